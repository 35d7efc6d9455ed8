import { describe, expect, it } from "vitest";
import { serverRestartScenario } from "./scenarios/server-restart.js";

describe("reliability (short): server restart mid-heartbeat", () => {
  it("beats fail while the server is down and resume after the reconnect; the ACKs land after the commits; nothing lost", async () => {
    const r = await serverRestartScenario({ batches: 1, batchSize: 3, restarts: 1, ackWaitMs: 5000, intervalMs: 1000, outageMs: 1200 });
    expect(r.report.violations).toEqual([]);
    expect(r.report.counts.committed).toBe(3);
    expect(r.report.counts.redeliveries).toBe(0);
  });
});
