import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startCluster, type NatsCluster } from "../helpers/nats-server.js";
import { loopElectionScenario, type Election } from "./scenarios/loop-elections.js";

describe("reliability (full): every kind of election under both loops, with and without confirmed ACKs", () => {
  let cluster: NatsCluster;
  beforeAll(async () => {
    cluster = await startCluster();
  });
  afterAll(async () => {
    await cluster?.dispose();
  });

  for (const loop of ["run", "runEach"] as const) {
    for (const election of ["stream-stepdown", "consumer-stepdown", "kill-leader"] as Election[]) {
      it(`${loop}, ${election}: the default (confirmed ACKs) writes none twice; without them the duplicates are counted`, async () => {
        const withConfirm = await loopElectionScenario(cluster, { loop, election, messages: 300, confirm: true });
        expect(withConfirm.written).toBe(300);
        expect(withConfirm.duplicates).toBe(0);
        const without = await loopElectionScenario(cluster, { loop, election, messages: 300, confirm: false });
        expect(without.written).toBe(300);
        expect(without.duplicates).toBeGreaterThanOrEqual(0);
      });
    }
  }

  for (const loop of ["run", "runEach"] as const) {
    it(`${loop}, kill-leader with the worker on the leader's server: the default writes none twice`, async () => {
      const r = await loopElectionScenario(cluster, { loop, election: "kill-leader", messages: 300, confirm: true, workerOnLeader: true });
      expect(r.workerDisconnects).toBeGreaterThanOrEqual(1);
      expect(r.heldAcks).toBeGreaterThanOrEqual(1);
      expect(r.written).toBe(300);
      expect(r.duplicates).toBe(0);
    });
  }
});
