import { describe, expect, it } from "vitest";
import { LeaseExpiredError } from "../../src/index.js";
import { connectionDropScenario } from "./scenarios/connection-drop.js";

describe("reliability (short): a worker's connection drops and the client reconnects", () => {
  it("a cut that outlasts AckWait: the failed beats are counted and the lease-expired signal fires; the messages go to another worker, once", async () => {
    const r = await connectionDropScenario({ mode: "outlast", batchSize: 2, ackWaitMs: 2000, intervalMs: 700, cutMs: 0 });
    expect(r.report.violations).toEqual([]);
    for (const w of [r.workers.plain, r.workers.confirmed]) {
      expect(w.leaseExpired).toBe(1);
      expect(w.failures).toBeGreaterThanOrEqual(1);
      expect(w.result.error).toBeInstanceOf(LeaseExpiredError);
    }
    expect(r.report.counts.duplicateCommits).toBe(0);
  });

  it("the write finishes during a cut: a plain ACK is held and sent after the reconnect; a confirmed ACK is retried and lands; no duplicate", async () => {
    const r = await connectionDropScenario({ mode: "ack-while-cut", batchSize: 2, ackWaitMs: 5000, intervalMs: 1000, cutMs: 1500 });
    expect(r.report.violations).toEqual([]);
    expect(r.workers.plain.result.messages.every((m) => m.action === "acked" && m.settleError === undefined)).toBe(true);
    expect(r.workers.confirmed.result.messages.every((m) => m.confirmed === true && m.settleError === undefined)).toBe(true);
    expect(r.report.counts.duplicateCommits).toBe(0);
  });
});
