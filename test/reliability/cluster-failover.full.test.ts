import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startCluster, type NatsCluster } from "../helpers/nats-server.js";
import { clusterFailoverScenario } from "./scenarios/cluster-failover.js";

describe("reliability (full): repeated consumer leader changes in a 3-node cluster", () => {
  let cluster: NatsCluster;
  beforeAll(async () => {
    cluster = await startCluster();
  });
  afterAll(async () => {
    await cluster?.dispose();
  });

  it("three step-downs in a row under 9 messages in long writes", async () => {
    const r = await clusterFailoverScenario(cluster, { fault: "stepdown", faults: 3, workers: 3, batchSize: 3, ackWaitMs: 2000, intervalMs: 700 });
    expect(r.report.violations).toEqual([]);
    expect(r.faults).toHaveLength(3);
    expect(r.report.counts.committed).toBe(9);
  });

  it("three leader kills in a row (each killed server restarted and caught up before the next) under 9 messages in long writes", async () => {
    const r = await clusterFailoverScenario(cluster, { fault: "kill-leader", faults: 3, workers: 3, batchSize: 3, ackWaitMs: 2000, intervalMs: 700 });
    expect(r.report.violations).toEqual([]);
    expect(r.faults).toHaveLength(3);
    expect(r.report.counts.committed).toBe(9);
  });
});
