import { describe, expect, it } from "vitest";
import { serverRestartScenario } from "./scenarios/server-restart.js";

describe("reliability (full): server restarts mid-heartbeat", () => {
  it("three restarts under three concurrent batches: every outage costs counted beats, never a message", async () => {
    const r = await serverRestartScenario({ batches: 3, batchSize: 5, restarts: 3, ackWaitMs: 5000, intervalMs: 1000, outageMs: 1500 });
    expect(r.report.violations).toEqual([]);
    expect(r.report.counts.committed).toBe(15);
    expect(r.report.counts.redeliveries).toBe(0);
    expect(r.reconnects).toBeGreaterThanOrEqual(3);
  });
});
