/**
 * Scenario: leader elections under the consumer loops (`run`, `runEach`) on a 3-node cluster with
 * a replicated stream and consumer, while messages flow: a stream leader step-down, a consumer
 * leader step-down, or the consumer leader's server killed (started again afterwards).
 *
 * An ACK sent while there is no leader reaches nobody; unconfirmed, its message comes back after
 * AckWait and is written twice. The loops confirm their ACKs by default (and ask again until the
 * new leader answers), so an election spends no duplicate. The scenario counts the messages
 * written more than once in each election window — with the loops' default, and with confirmed
 * ACKs switched off for comparison. With `workerOnLeader`, the worker is connected to the consumer
 * leader's server, so a kill also cuts the worker's own connection; the writes under way then end
 * the moment the client reports the cut, so their ACKs are held over the reconnect and then meet
 * the election.
 */
import { jetstream } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { expect } from "vitest";
import { AckNotConfirmedError, CommitThenAck, InMemoryMetrics, MetricNames, type BatchResult } from "../../../src/index.js";
import { AckSpy } from "../../helpers/ack-spy.js";
import { createFixture, publish } from "../../helpers/jetstream.js";
import type { NatsCluster } from "../../helpers/nats-server.js";
import { RECONNECT, consumerInfoWhen, deferred, sleep, step, watchUnhandledRejections } from "../support.js";

export type Election = "stream-stepdown" | "consumer-stepdown" | "kill-leader";

export interface LoopElectionOptions {
  readonly loop: "run" | "runEach";
  readonly election: Election;
  readonly messages: number;
  /** `false`: the loops' confirmed ACKs switched off (the comparison). */
  readonly confirm: boolean;
  /** A host's explicit `confirmAck` instead of the loops' default (with `confirm: true`). */
  readonly confirmAck?: { readonly timeoutMs: number; readonly retries: number };
  /** Connect the worker to the consumer leader's server (else to any node, as a client picks). */
  readonly workerOnLeader?: boolean;
  /** How long each write takes (default 40 ms). */
  readonly writeMs?: number;
  /**
   * A subscriber on the stream's ack subjects (an audit tap), open for the whole scenario on a
   * server other than the consumer leader's: while the consumer has no leader, a confirmed ACK
   * reaches it and times out instead of being refused.
   */
  readonly tap?: boolean;
}

export interface LoopElectionResult {
  readonly written: number;
  /** Messages written more than once. */
  readonly duplicates: number;
  readonly electionMs: number;
  /** How often the worker's connection was cut. */
  readonly workerDisconnects: number;
  /** ACKs held over the worker's reconnect (`acks_held_total`). */
  readonly heldAcks: number;
  /** Deliveries of committed messages acked at once, not written (`redeliveries_of_committed_total`). */
  readonly redeliveriesOfCommitted: number;
  /** `+ACK` frames the tap saw (0 without one). */
  readonly tapped: number;
  /** ACKs reported unconfirmed (`AckNotConfirmedError`), by their last failure's kind. */
  readonly unconfirmed: Readonly<Record<AckNotConfirmedError["lastFailure"], number>>;
  /** The stream sequences of those ACKs. */
  readonly unconfirmedSequences: readonly number[];
  /** Stream sequences the tap saw acked at a later delivery than their first ACK (empty without one). */
  readonly ackedAgain: readonly number[];
}

export async function loopElectionScenario(cluster: NatsCluster, o: LoopElectionOptions): Promise<LoopElectionResult> {
  const conns: NatsConnection[] = [];
  const unhandled = watchUnhandledRejections();
  const stop = new AbortController();
  let running: Promise<void> | undefined;
  try {
    const admin = await step("connecting the admin", cluster.connect(RECONNECT));
    conns.push(admin);
    const f = await step("creating the R3 stream and consumer", createFixture(admin, { ackWaitMs: 2000, replicas: 3 }));
    const initial = await consumerInfoWhen(admin, f.stream, f.consumer, (c) => Boolean(c.cluster?.leader), "a consumer leader");
    const leaderNode = cluster.servers.find((s) => s.options.name === initial.cluster!.leader);
    // With a tap, on a server the kill spares: the variant asks what the tap does to ACKs asked
    // of no leader, and its trace (the unconfirmed ACKs acked again at their next delivery)
    // assumes a worker that was not cut too; a worker cut by the kill is the variant below.
    const spared = cluster.urls.filter((u) => u !== leaderNode!.url);
    const servers = o.workerOnLeader ? [leaderNode!.url, ...spared] : o.tap ? spared : cluster.urls;
    const worker = await step("connecting the worker", cluster.connect({ ...RECONNECT, servers, noRandomize: o.workerOnLeader === true }));
    conns.push(worker);
    let workerDisconnects = 0;
    const cut = deferred();
    void (async () => {
      for await (const s of worker.status()) {
        if (s.type !== "disconnect") continue;
        workerDisconnects += 1;
        cut.resolve();
      }
    })();
    // On a server the kill spares: a tap whose own connection the kill cut would be missing
    // until it reconnects, and ACKs asked meanwhile would be refused (seen in a CI run).
    const tapConn = o.tap ? await step("connecting the tap", cluster.connect({ ...RECONNECT, servers: cluster.urls.filter((u) => u !== leaderNode!.url) })) : undefined;
    if (tapConn) conns.push(tapConn);
    // Closed with its connection.
    const tap = tapConn ? await step("the tap on the ack subjects", AckSpy.start(tapConn, f.stream)) : undefined;
    const published = await step("publishing", publish(f, o.messages));
    const metrics = new InMemoryMetrics();
    const ack = await step(
      "CommitThenAck.forConsumer",
      CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, {
        inProgress: { enabled: true, intervalMs: 500, maxHeartbeats: 100 },
        connection: worker,
        metrics,
        ...(!o.confirm ? { confirmAck: false as const } : o.confirmAck !== undefined ? { confirmAck: o.confirmAck } : {}),
      }),
    );
    const writes = new Map<number, number>();
    // What each write and each settle of a sequence saw, printed for those written twice.
    const trail = new Map<number, string[]>();
    let faultAt = Number.NaN;
    const note = (seq: number, what: string): void => {
      const t = Number.isNaN(faultAt) ? "before" : `+${Math.round(performance.now() - faultAt)} ms`;
      const list = trail.get(seq) ?? [];
      list.push(`${t} ${what}`);
      trail.set(seq, list);
    };
    const record = (m: { readonly seq: number; readonly info: { readonly deliveryCount: number } }): void => {
      writes.set(m.seq, (writes.get(m.seq) ?? 0) + 1);
      note(m.seq, `write (delivery ${m.info.deliveryCount}, worker ${workerDisconnects > 0 ? "cut" : "connected"})`);
    };
    const unconfirmed = { timeout: 0, no_responders: 0, error: 0 };
    const unconfirmedSequences: number[] = [];
    const settled = (r: BatchResult): void => {
      for (const x of r.messages) {
        note(x.msg.seq, `${x.action}${"confirmed" in x ? ` confirmed=${String(x.confirmed)}` : ""}${x.settleError !== undefined ? ` (${String(x.settleError)})` : ""}`);
        if (!(x.settleError instanceof AckNotConfirmedError)) continue;
        unconfirmed[x.settleError.lastFailure] += 1;
        unconfirmedSequences.push(x.msg.seq);
      }
    };
    // With the worker on the leader's server, the writes from the fault on end at the cut (bounded).
    const write = async (): Promise<void> => {
      if (o.workerOnLeader && writes.size >= o.messages / 4 && workerDisconnects === 0) await Promise.race([cut.promise, sleep(30_000)]);
      else await sleep(o.writeMs ?? 40);
    };
    const consumer = await step("reading the consumer on the worker", jetstream(worker, { timeout: 20_000 }).consumers.get(f.stream, f.consumer));
    running =
      o.loop === "run"
        ? ack.run(consumer, async (msgs) => {
            for (const m of msgs) record(m);
            await write();
          }, { batchSize: 10, concurrency: 4, signal: stop.signal, onBatch: settled, onError: () => undefined })
        : ack.runEach(consumer, async (m) => {
            record(m);
            await write();
          }, { concurrency: 16, signal: stop.signal, onResult: settled, onError: () => undefined });

    // The fault once a quarter of the messages is written, while the rest flow.
    while (writes.size < o.messages / 4) await sleep(10);
    faultAt = performance.now();
    const oldLeader = initial.cluster!.leader!;
    let killed: (typeof cluster.servers)[number] | undefined;
    if (o.election === "stream-stepdown") {
      await step("stream leader step-down", admin.request(`$JS.API.STREAM.LEADER.STEPDOWN.${f.stream}`, "", { timeout: 5000 }));
    } else if (o.election === "consumer-stepdown") {
      await step("consumer leader step-down", admin.request(`$JS.API.CONSUMER.LEADER.STEPDOWN.${f.stream}.${f.consumer}`, "", { timeout: 5000 }));
    } else {
      killed = cluster.servers.find((s) => s.options.name === oldLeader);
      expect(killed, `server ${oldLeader}`).toBeDefined();
      await step("killing the leader's server", killed!.kill());
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
    await step("the loop ending", running);
    if (killed) {
      await step("restarting the killed server", killed.restart());
      // Caught up again before the next scenario places a stream on every node.
      await step("JetStream on every node again", cluster.waitForJetStream(30_000));
    }
    expect(unhandled.seen).toEqual([]);
    expect([...writes.keys()].sort((a, b) => a - b)).toEqual(published);
    const duplicates = [...writes.values()].filter((n) => n > 1).length;
    for (const [seq, n] of writes) if (n > 1) console.log(`written ${n}×: #${seq}: ${(trail.get(seq) ?? []).join("; ")}`);
    const counters = metrics.snapshot().counters;
    const acks = tap?.of("+ACK") ?? [];
    const tapped = acks.length;
    // Acked at two or more deliveries: a later delivery than the first ACK's.
    const ackedAt = new Map<number, Set<number>>();
    for (const a of acks) ackedAt.set(a.streamSequence, (ackedAt.get(a.streamSequence) ?? new Set()).add(a.deliveryCount));
    const ackedAgain = [...ackedAt].filter(([, dcs]) => dcs.size > 1).map(([seq]) => seq).sort((a, b) => a - b);
    unconfirmedSequences.sort((a, b) => a - b);
    const heldAcks = counters[MetricNames.ACKS_HELD_TOTAL] ?? 0;
    const redeliveriesOfCommitted = counters[MetricNames.REDELIVERIES_OF_COMMITTED_TOTAL] ?? 0;
    console.log(`loop election: ${o.loop} ${o.election} confirm=${o.confirm}${o.confirmAck ? ` confirmAck=${JSON.stringify(o.confirmAck)} unconfirmed ${JSON.stringify(unconfirmed)}` : ""}${o.workerOnLeader ? " (worker on the leader's server)" : ""}${o.tap ? " (a tap on the ack subjects)" : ""}: ${electionMs} ms, ${duplicates} of ${o.messages} written twice, worker cut ${workerDisconnects}×, ${heldAcks} ACKs held over the reconnect, ${redeliveriesOfCommitted} redeliveries of committed messages acked${o.tap ? `, ${tapped} ACKs seen by the tap, ${counters[MetricNames.SETTLE_FAILURES_TOTAL] ?? 0} settle failures, unconfirmed ${JSON.stringify(unconfirmed)} on [${unconfirmedSequences.join(",")}], acked again at a later delivery [${ackedAgain.join(",")}]` : ""}`);
    return { written: writes.size, duplicates, electionMs, workerDisconnects, heldAcks, redeliveriesOfCommitted, tapped, unconfirmed, unconfirmedSequences, ackedAgain };
  } finally {
    stop.abort();
    await running?.catch(() => undefined);
    unhandled.stop();
    await Promise.allSettled(conns.map((c) => c.close()));
  }
}
