import { describe, expect, it } from "vitest";
import { connectionDropScenario } from "./scenarios/connection-drop.js";

describe("reliability (full): a worker's connection drops and the client reconnects", () => {
  it("a brief cut inside AckWait: failed beats counted, beats resume after the reconnect, nothing redelivered", async () => {
    const r = await connectionDropScenario({ mode: "brief", batchSize: 5, ackWaitMs: 4000, intervalMs: 800, cutMs: 1200 });
    expect(r.report.violations).toEqual([]);
    expect(r.workers.plain.failures).toBeGreaterThanOrEqual(1);
    expect(r.workers.confirmed.failures).toBeGreaterThanOrEqual(1);
    expect(r.report.counts.redeliveries).toBe(0);
  });

  it("a cut that outlasts AckWait, with larger batches", async () => {
    const r = await connectionDropScenario({ mode: "outlast", batchSize: 10, ackWaitMs: 2000, intervalMs: 700, cutMs: 0 });
    expect(r.report.violations).toEqual([]);
    expect(r.workers.plain.leaseExpired + r.workers.confirmed.leaseExpired).toBe(2);
    expect(r.report.counts.redeliveries).toBe(20);
  });

  it("a silent partition: only confirmed beats notice it; unconfirmed beats count no failure while nothing reaches the server", async () => {
    const r = await connectionDropScenario({ mode: "blackhole", batchSize: 3, ackWaitMs: 2000, intervalMs: 700, cutMs: 0 });
    expect(r.report.violations).toEqual([]);
    expect(r.workers.confirmed.leaseExpired).toBe(1);
    expect(r.workers.plain.failures).toBe(0);
    expect(r.report.counts.duplicateCommits).toBe(3);
  });
});
