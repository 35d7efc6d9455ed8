import { describe, expect, it } from "vitest";
import { readOptionKeys } from "../../../src/policy/option-keys.js";

describe("readOptionKeys", () => {
  const known = ["deadLetter", "onTemporaryFailure", "batchSize"];

  it("passes known keys and treats undefined and null as no options", () => {
    expect(readOptionKeys("o", { batchSize: 1 }, known)).toEqual({ batchSize: 1 });
    expect(readOptionKeys("o", undefined, known)).toEqual({});
    expect(readOptionKeys("o", null, known)).toEqual({});
  });

  it("refuses a misspelt key with the nearest known one", () => {
    expect(() => readOptionKeys("CommitThenAck options", { deadletter: {} }, known)).toThrow(
      /CommitThenAck options: unknown option "deadletter" — did you mean "deadLetter"\?/,
    );
    expect(() => readOptionKeys("o", { onTemporaryFailures: {} }, known)).toThrow(/did you mean "onTemporaryFailure"/);
    expect(() => readOptionKeys("o", { batchsize: 5 }, known)).toThrow(/did you mean "batchSize"/);
  });

  it("names every known key when nothing is near", () => {
    expect(() => readOptionKeys("o", { zzzzzzzzzz: 1 }, known)).toThrow(/unknown option "zzzzzzzzzz"\. A misspelt option.*known: deadLetter, onTemporaryFailure, batchSize/);
  });

  it("refuses what is not an object, and a revoked proxy, with a TypeError", () => {
    expect(() => readOptionKeys("o", 5, known)).toThrow(TypeError);
    expect(() => readOptionKeys("o", [], known)).toThrow(/must be an object, got an array/);
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    expect(() => readOptionKeys("o", proxy, known)).toThrow(/could not be read/);
  });
});
