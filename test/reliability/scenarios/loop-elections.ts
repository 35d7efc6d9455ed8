/**
 * Scenario: leader elections under the consumer loops (`run`, `runEach`) on a 3-node cluster with
 * a replicated stream and consumer, while messages flow: a stream leader step-down, a consumer
 * leader step-down, or the consumer leader's server killed (started again afterwards).
 *
 * An ACK sent while there is no leader reaches nobody; unconfirmed, its message comes back after
 * AckWait and is written twice. The loops confirm their ACKs by default (and ask again until the
 * new leader answers), so an election spends no duplicate. The scenario counts the messages
 * written more than once in each election window — with the loops' default, and with confirmed
 * ACKs switched off for comparison.
 */
import { jetstream } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { expect } from "vitest";
import { CommitThenAck, type BatchResult } from "../../../src/index.js";
import { createFixture, publish } from "../../helpers/jetstream.js";
import type { NatsCluster } from "../../helpers/nats-server.js";
import { RECONNECT, consumerInfoWhen, sleep, watchUnhandledRejections } from "../support.js";

export type Election = "stream-stepdown" | "consumer-stepdown" | "kill-leader";

export interface LoopElectionOptions {
  readonly loop: "run" | "runEach";
  readonly election: Election;
  readonly messages: number;
  /** `false`: the loops' confirmed ACKs switched off (the comparison). */
  readonly confirm: boolean;
}

export interface LoopElectionResult {
  readonly written: number;
  /** Messages written more than once. */
  readonly duplicates: number;
  readonly electionMs: number;
}

export async function loopElectionScenario(cluster: NatsCluster, o: LoopElectionOptions): Promise<LoopElectionResult> {
  const conns: NatsConnection[] = [];
  const unhandled = watchUnhandledRejections();
  const stop = new AbortController();
  let running: Promise<void> | undefined;
  try {
    const admin = await cluster.connect(RECONNECT);
    const worker = await cluster.connect(RECONNECT);
    conns.push(admin, worker);
    const f = await createFixture(admin, { ackWaitMs: 2000, replicas: 3 });
    const initial = await consumerInfoWhen(admin, f.stream, f.consumer, (c) => Boolean(c.cluster?.leader), "a consumer leader");
    const published = await publish(f, o.messages);
    const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, {
      inProgress: { enabled: true, intervalMs: 500, maxHeartbeats: 100 },
      connection: worker,
      ...(o.confirm ? {} : { confirmAck: false as const }),
    });
    const writes = new Map<number, number>();
    const record = (seq: number): void => void writes.set(seq, (writes.get(seq) ?? 0) + 1);
    const results: BatchResult[] = [];
    const consumer = await jetstream(worker).consumers.get(f.stream, f.consumer);
    running =
      o.loop === "run"
        ? ack.run(consumer, async (msgs) => {
            for (const m of msgs) record(m.seq);
            await sleep(40);
          }, { batchSize: 10, concurrency: 4, signal: stop.signal, onBatch: (r) => results.push(r), onError: () => undefined })
        : ack.runEach(consumer, async (m) => {
            record(m.seq);
            await sleep(40);
          }, { concurrency: 16, signal: stop.signal, onResult: (r) => results.push(r), onError: () => undefined });

    // The fault once a quarter of the messages is written, while the rest flow.
    while (writes.size < o.messages / 4) await sleep(10);
    const faultAt = performance.now();
    const oldLeader = initial.cluster!.leader!;
    let killed: (typeof cluster.servers)[number] | undefined;
    if (o.election === "stream-stepdown") {
      await admin.request(`$JS.API.STREAM.LEADER.STEPDOWN.${f.stream}`, "", { timeout: 5000 });
    } else if (o.election === "consumer-stepdown") {
      await admin.request(`$JS.API.CONSUMER.LEADER.STEPDOWN.${f.stream}.${f.consumer}`, "", { timeout: 5000 });
    } else {
      killed = cluster.servers.find((s) => s.options.name === oldLeader);
      expect(killed, `server ${oldLeader}`).toBeDefined();
      await killed!.kill();
    }
    const after = await consumerInfoWhen(
      admin,
      f.stream,
      f.consumer,
      (c) => Boolean(c.cluster?.leader) && (o.election === "stream-stepdown" || c.cluster!.leader !== oldLeader),
      "a consumer leader after the fault",
      60_000,
    );
    const electionMs = Math.round(performance.now() - faultAt);
    expect(after.cluster?.leader).toBeDefined();
    const last = published.at(-1) ?? 0;
    await consumerInfoWhen(admin, f.stream, f.consumer, (c) => c.num_ack_pending === 0 && c.num_pending === 0 && c.ack_floor.stream_seq >= last, "the consumer drained", 60_000);
    // A redelivery of a message whose ACK was lost would come AckWait after the election: wait it out.
    await sleep(2500);
    stop.abort();
    await running;
    if (killed) await killed.restart();
    expect(unhandled.seen).toEqual([]);
    expect([...writes.keys()].sort((a, b) => a - b)).toEqual(published);
    const duplicates = [...writes.values()].filter((n) => n > 1).length;
    console.log(`loop election: ${o.loop} ${o.election} confirm=${o.confirm}: ${electionMs} ms, ${duplicates} of ${o.messages} written twice`);
    return { written: writes.size, duplicates, electionMs };
  } finally {
    stop.abort();
    await running?.catch(() => undefined);
    unhandled.stop();
    await Promise.allSettled(conns.map((c) => c.close()));
  }
}
