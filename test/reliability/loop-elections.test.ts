import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startCluster, type NatsCluster } from "../helpers/nats-server.js";
import { loopElectionScenario } from "./scenarios/loop-elections.js";

describe("reliability (short): leader elections under the consumer loops, 3-node cluster, R3 stream and consumer", () => {
  let cluster: NatsCluster;
  beforeAll(async () => {
    cluster = await startCluster();
  });
  afterAll(async () => {
    await cluster?.dispose();
  });

  it("run, a consumer leader step-down while messages flow: with the loops' confirmed ACKs, none written twice", async () => {
    const r = await loopElectionScenario(cluster, { loop: "run", election: "consumer-stepdown", messages: 300, confirm: true });
    expect(r.written).toBe(300);
    expect(r.duplicates).toBe(0);
  });

  it("run, a consumer leader step-down with a host's explicit confirmAck (2 s, 2 retries): the refused ACKs are asked again within its 6 s window without spending retries, so the new leader confirms every one; none written twice", async () => {
    const r = await loopElectionScenario(cluster, { loop: "run", election: "consumer-stepdown", messages: 300, confirm: true, confirmAck: { timeoutMs: 2000, retries: 2 } });
    expect(r.written).toBe(300);
    expect(r.duplicates).toBe(0);
    expect(r.unconfirmed).toEqual({ timeout: 0, no_responders: 0, error: 0 });
  });

  it("run, the consumer leader's server killed while messages flow: its subscription outlives the election, none written twice", async () => {
    const r = await loopElectionScenario(cluster, { loop: "run", election: "kill-leader", messages: 300, confirm: true });
    expect(r.written).toBe(300);
    expect(r.duplicates).toBe(0);
  });

  it("runEach, the consumer leader's server killed while messages flow: none written twice", async () => {
    const r = await loopElectionScenario(cluster, { loop: "runEach", election: "kill-leader", messages: 300, confirm: true });
    expect(r.written).toBe(300);
    expect(r.duplicates).toBe(0);
  });

  it("runEach, the consumer leader's server killed with a subscriber on the stream's ack subjects (an audit tap): ACKs asked of no leader time out instead of being refused, and still none is written twice", async () => {
    const r = await loopElectionScenario(cluster, { loop: "runEach", election: "kill-leader", messages: 300, confirm: true, tap: true });
    expect(r.tapped).toBeGreaterThanOrEqual(300);
    // The path the title names: unconfirmed ACKs timed out (the tap answers nothing, but no
    // "no responders" came back), and their messages, handed out again, were acked as committed.
    expect(r.unconfirmed.timeout).toBeGreaterThanOrEqual(1);
    expect(r.unconfirmed.no_responders).toBe(0);
    expect(r.redeliveriesOfCommitted).toBeGreaterThanOrEqual(1);
    // Seen on the tap: a message whose ACK went unconfirmed was handed out again and acked then.
    expect(r.ackedAgain.filter((s) => r.unconfirmedSequences.includes(s)).length).toBeGreaterThanOrEqual(1);
    expect(r.written).toBe(300);
    expect(r.duplicates).toBe(0);
  });

  it("runEach, the consumer leader's server killed under the worker's own connection: the ACKs held over the reconnect are confirmed by the new leader, none written twice", async () => {
    const r = await loopElectionScenario(cluster, { loop: "runEach", election: "kill-leader", messages: 300, confirm: true, workerOnLeader: true });
    // The case: the kill cut the worker's connection too.
    expect(r.workerDisconnects).toBeGreaterThanOrEqual(1);
    expect(r.heldAcks).toBeGreaterThanOrEqual(1);
    expect(r.written).toBe(300);
    expect(r.duplicates).toBe(0);
  });
});
