import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startCluster, type NatsCluster } from "../helpers/nats-server.js";
import { clusterFailoverScenario } from "./scenarios/cluster-failover.js";

describe("reliability (short): consumer leader change in a 3-node cluster, R3 stream and consumer", () => {
  let cluster: NatsCluster;
  beforeAll(async () => {
    cluster = await startCluster();
  });
  afterAll(async () => {
    await cluster?.dispose();
  });

  it("a leader step-down during writes of 3× AckWait: beats carry on against the new leader; every message committed", async () => {
    const r = await clusterFailoverScenario(cluster, { fault: "stepdown", faults: 1, workers: 2, batchSize: 2, ackWaitMs: 2000, intervalMs: 700 });
    expect(r.report.violations).toEqual([]);
    expect(r.faults).toHaveLength(1);
    expect(r.report.counts.committed).toBe(4);
  });

  it("the leader's server killed during writes of 3× AckWait: beats carry on against the new leader; every message committed", async () => {
    const r = await clusterFailoverScenario(cluster, { fault: "kill-leader", faults: 1, workers: 2, batchSize: 2, ackWaitMs: 2000, intervalMs: 700 });
    expect(r.report.violations).toEqual([]);
    expect(r.faults[0]?.newLeader).not.toBe(r.faults[0]?.oldLeader);
    expect(r.report.counts.committed).toBe(4);
  });
});
