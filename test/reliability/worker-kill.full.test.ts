import { describe, expect, it } from "vitest";
import { workerKillScenario } from "./scenarios/worker-kill.js";

describe("reliability (full): worker processes killed mid-write", () => {
  it("four workers killed with batches in flight, three survivors drain 60 messages", async () => {
    const r = await workerKillScenario({ victims: 4, batchSize: 3, extraMessages: 36, survivors: 3, ackWaitMs: 2000, intervalMs: 600 });
    expect(r.report.violations).toEqual([]);
    expect(r.held).toHaveLength(12);
    expect(r.committedBeforeKill).toHaveLength(6);
    expect(r.report.counts.committed).toBe(60);
  });
});
