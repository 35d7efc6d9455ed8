/** How the runEach HTTP example maps a failed call to the library's error classes. */
import { PermanentSinkError, TemporarySinkError } from "jetstream-inprogress";
import { describe, expect, it } from "vitest";
import { classifyHttpFailure, sequenceOf } from "../../examples/run-each-http.js";

describe("examples/run-each-http.ts: classifyHttpFailure", () => {
  it.each([500, 502, 503, 504, 408, 429])("retries a %i", (status) => {
    expect(classifyHttpFailure(status)).toBeInstanceOf(TemporarySinkError);
  });

  it.each([400, 401, 403, 404, 409, 422])("dead-letters a %i", (status) => {
    expect(classifyHttpFailure(status)).toBeInstanceOf(PermanentSinkError);
  });

  it("retries a timeout and an unreachable server, keeping the cause", () => {
    const timeout = new DOMException("The operation was aborted due to timeout", "TimeoutError");
    const t = classifyHttpFailure(timeout);
    expect(t).toBeInstanceOf(TemporarySinkError);
    expect(t.message).toBe("the API call timed out");
    expect(t.cause).toBe(timeout);
    const refused = new TypeError("fetch failed", { cause: Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" }) });
    expect(classifyHttpFailure(refused)).toBeInstanceOf(TemporarySinkError);
  });

  it("reads the stream sequence from an idempotency key", () => {
    expect(sequenceOf("ORDERS:42")).toBe(42);
  });
});
