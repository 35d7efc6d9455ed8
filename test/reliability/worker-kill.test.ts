import { describe, expect, it } from "vitest";
import { workerKillScenario } from "./scenarios/worker-kill.js";

describe("reliability (short): worker processes killed mid-write", () => {
  it("the dead workers' messages come back after AckWait and are committed by another worker; duplicates only for commit-then-crash", async () => {
    const r = await workerKillScenario({ victims: 2, batchSize: 2, extraMessages: 4, survivors: 2, ackWaitMs: 2000, intervalMs: 600 });
    expect(r.report.violations).toEqual([]);
    expect(r.held).toHaveLength(4);
    expect(r.committedBeforeKill).toHaveLength(2);
    expect(r.report.counts.duplicateCommits).toBe(2);
  });
});
