import { describe, expect, it } from "vitest";
import { linkProblem, measureRttMs } from "../../../src/consume/link-check.js";

describe("linkProblem: what a round trip must fit", () => {
  const run = { pullExpiryMs: 1000, intervalMs: 5000, windowMs: 30_000 };

  it("a round trip below a third of the pull expiry fits; a third or more does not, and the fix is named", () => {
    expect(linkProblem(0.2, run)).toBeUndefined();
    expect(linkProblem(333, run)).toBeUndefined();
    expect(linkProblem(333.4, run)).toMatch(/took 334 ms, a third or more of the pull expiry \(1000 ms\).*Raise expiresMs to at least 1003 /);
    // A subscription's pulls are not ended by the client: no expiry rule.
    expect(linkProblem(900, { ...run, pullExpiryMs: undefined })).toBeUndefined();
  });

  it("the interval plus twice the round trip must stay below the window", () => {
    const each = { pullExpiryMs: undefined, intervalMs: 1500, windowMs: 2000 };
    expect(linkProblem(249, each)).toBeUndefined();
    expect(linkProblem(250, each)).toMatch(/heartbeat interval \(1500 ms\) plus twice the round trip must stay below the consumer's redelivery window \(2000 ms\)\. Lower intervalMs below 1500,/);
    // A round trip of half the window or more: no interval fits, and the message says so.
    expect(linkProblem(1000, each)).toMatch(/No interval fits: raise AckWait above 3500, or run the worker nearer the server$/);
    // Heartbeats off, or the window unknown: no lease rule.
    expect(linkProblem(5000, { pullExpiryMs: undefined, intervalMs: undefined, windowMs: 2000 })).toBeUndefined();
    expect(linkProblem(5000, { pullExpiryMs: undefined, intervalMs: 1500, windowMs: undefined })).toBeUndefined();
  });
});

describe("measureRttMs", () => {
  it("reads the connection's rtt(); anything else, a rejection or a strange answer is unknown", async () => {
    expect(await measureRttMs({ rtt: async () => 12.5 })).toBe(12.5);
    expect(await measureRttMs({})).toBeUndefined();
    expect(await measureRttMs(undefined)).toBeUndefined();
    expect(await measureRttMs({ rtt: async () => { throw new Error("closed"); } })).toBeUndefined();
    expect(await measureRttMs({ rtt: async () => Number.NaN })).toBeUndefined();
    expect(await measureRttMs({ rtt: async () => "5" })).toBeUndefined();
  });
});
