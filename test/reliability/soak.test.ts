import { describe, expect, it } from "vitest";
import { soakScenario } from "./scenarios/soak.js";

describe("reliability (short): soak", () => {
  it("200 messages, 3 workers, writes up to 3× AckWait, temporary and permanent failures: the invariants hold", async () => {
    const r = await soakScenario({
      messages: 200,
      workers: 3,
      batchSize: 10,
      ackWaitMs: 2000,
      intervalMs: 800,
      nakDelayMs: 200,
      maxDeliver: 3,
      longShare: 0.02,
      mediumShare: 0.05,
      temporaryShare: 0.05,
      permanentShare: 0.02,
      seed: 7,
    });
    expect(r.report.violations).toEqual([]);
    expect(r.report.counts.committed + r.report.counts.deadLettered).toBe(200);
    expect(r.plans.some((p) => p.writeMs >= 2000)).toBe(true);
  });
});
