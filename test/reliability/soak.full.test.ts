import { describe, expect, it } from "vitest";
import { soakScenario } from "./scenarios/soak.js";

describe("reliability (full): soak", () => {
  it("2,000 messages, 3 workers, writes up to 3× AckWait, temporary and permanent failures: the invariants hold", async () => {
    const r = await soakScenario({
      messages: 2000,
      workers: 3,
      batchSize: 20,
      ackWaitMs: 2000,
      intervalMs: 800,
      nakDelayMs: 200,
      maxDeliver: 3,
      longShare: 0.01,
      mediumShare: 0.05,
      temporaryShare: 0.05,
      permanentShare: 0.01,
      seed: 2024,
    });
    expect(r.report.violations).toEqual([]);
    expect(r.report.counts.committed + r.report.counts.deadLettered).toBe(2000);
    expect(r.plans.filter((p) => p.writeMs >= 2000).length).toBeGreaterThanOrEqual(10);
  });
});
