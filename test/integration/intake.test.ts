/**
 * The loops' intake on a real nats-server: pulls are never cut short, nothing is held that
 * cannot start, a shutdown keeps the leases of draining writes and returns on time, and the
 * frames a loop owes are flushed before it returns. A second worker pulling the same durable is
 * the proof a lease was kept: it receives nothing.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { jetstream, type JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import {
  CommitThenAck,
  ConsumerPolicyError,
  InMemoryMetrics,
  MetricNames,
  verifyInProgressPolicy,
  type BatchResult,
  type RunErrorContext,
} from "../../src/index.js";
import { withLateAcks } from "../helpers/late-acks.js";
import { AckSpy } from "../helpers/ack-spy.js";
import { consumerInfo, createFixture, eventually, fetchBatch, publish } from "../helpers/jetstream.js";
import { startRival } from "../helpers/rival.js";
import { startCluster, type NatsCluster } from "../helpers/nats-server.js";
import { useServer } from "../helpers/server-fixture.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * A steady trickle from another connection: bursts of ten plain publishes every `everyMs` until
 * stopped, so pulls keep ending partial while the server is delivering. The stream is new, so
 * the sequences are 1 ..= n.
 */
/**
 * A worker on a connection of its own whose writes wait on `busy` until `release()`; `stop` ends
 * its loop, and `end(running)` releases the writes, stops the loop, waits for it and closes.
 */
async function heldWorker(connect: () => Promise<NatsConnection>) {
  const worker = await connect();
  let release!: () => void;
  const busy = new Promise<void>((r) => (release = r));
  const stop = new AbortController();
  const end = async (running: Promise<unknown>): Promise<void> => {
    release();
    stop.abort();
    await running;
    await worker.close();
  };
  return { worker, ack: new CommitThenAck(), stop, busy, release, end };
}

async function trickle(connect: () => Promise<NatsConnection>, subject: string, everyMs: number): Promise<{ readonly seqs: () => number[]; stop(): Promise<void> }> {
  const nc = await connect();
  let n = 0;
  let stopping = false;
  const done = (async () => {
    while (!stopping) {
      for (let k = 0; k < 10; k++) nc.publish(subject, `t-${++n}`);
      await sleep(everyMs);
    }
    await nc.flush();
    await nc.close();
  })();
  return {
    seqs: () => Array.from({ length: n }, (_, i) => i + 1),
    async stop() {
      stopping = true;
      await done;
    },
  };
}

/** Counts writes per stream sequence. */
class Writes {
  readonly count = new Map<number, number>();
  add(msgs: readonly JsMsg[]): void {
    for (const m of msgs) this.count.set(m.seq, (this.count.get(m.seq) ?? 0) + 1);
  }
  twice(): number[] {
    return [...this.count].filter(([, n]) => n > 1).map(([s]) => s);
  }
}

/**
 * A steady trickle into `run` with long pulls, max_deliver 1 and heartbeats every `intervalMs`:
 * every message must be written exactly once (a message handed to a pull the loop cut short
 * would be lost on its only delivery).
 */
async function trickleIntoLongPulls(nc: NatsConnection, connect: () => Promise<NatsConnection>, intervalMs: number, replicas = 1): Promise<void> {
  const f = await createFixture(nc, { ackWaitMs: 2000, maxDeliver: 1, replicas });
  const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, { inProgress: { enabled: true, intervalMs, maxHeartbeats: 50 } });
  const writes = new Writes();
  const results: BatchResult[] = [];
  const errors: Array<[unknown, RunErrorContext]> = [];
  const shutdown = new AbortController();
  const running = ack.run(
    await f.js.consumers.get(f.stream, f.consumer),
    async (msgs) => {
      writes.add(msgs);
      await sleep(15);
    },
    { batchSize: 1000, expiresMs: 30_000, concurrency: 2, signal: shutdown.signal, onBatch: (r) => results.push(r), onError: (e, c) => errors.push([e, c]) },
  );
  const t = await trickle(connect, f.subject, 5);
  await sleep(4000);
  await t.stop();
  const seqs = t.seqs();
  await eventually(async () => {
    const info = await consumerInfo(f);
    return info.num_pending === 0 && info.num_ack_pending === 0;
  }, "every message delivered and settled", 20_000);
  shutdown.abort();
  await running;
  expect(writes.twice()).toEqual([]);
  expect(seqs.filter((s) => !writes.count.has(s))).toEqual([]);
  expect(results.reduce((n, r) => n + r.acked, 0)).toBe(seqs.length);
  expect(results.every((r) => r.exhausted === 0 && r.left === 0 && r.abandoned === 0)).toBe(true);
  // expiresMs 30 s is above the lease bound: clamped, and said so.
  const clamped = errors.find(([e]) => e instanceof ConsumerPolicyError && e.reason === "pull_expiry_clamped");
  expect(clamped?.[1].during).toBe("start");
  const info = await consumerInfo(f);
  expect(info.num_redelivered).toBe(0);
  expect(info.delivered.stream_seq).toBe(seqs.length);
  // The consumer's own count of deliveries: one per message.
  expect(info.delivered.consumer_seq).toBe(seqs.length);
}

describe("intake on a real nats-server", () => {
  const fx = useServer();

  it("another delivery of a committed message whose ACK is still on its way is acked, never written again", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 1000 });
    // This connection's ACK frames reach the server 2.5 s late, as during a consumer leader
    // election: the message comes back after AckWait while its ACK is on its way.
    const late = withLateAcks(fx.nc, 2500);
    const metrics = new InMemoryMetrics();
    const ack = new CommitThenAck({ connection: late, confirmAck: { timeoutMs: 4000, retries: 0 }, metrics });
    const writes = new Map<number, number[]>();
    const shutdown = new AbortController();
    const running = ack.runEach(
      await f.js.consumers.get(f.stream, f.consumer),
      async (m) => void writes.set(m.seq, [...(writes.get(m.seq) ?? []), m.info.deliveryCount]),
      { concurrency: 1, expiresMs: 1000, signal: shutdown.signal },
    );
    const [seq] = await publish(f, 1);
    await eventually(() => (metrics.snapshot().counters[MetricNames.REDELIVERIES_OF_COMMITTED_TOTAL] ?? 0) >= 1, "the redelivery acked", 10_000);
    // The second delivery was acked at once: nothing is pending although the first ACK is still late.
    await eventually(async () => (await consumerInfo(f)).num_ack_pending === 0, "nothing pending");
    expect(writes.get(seq!)).toEqual([1]);
    shutdown.abort();
    await running;
    expect(writes.get(seq!)).toEqual([1]);
  });

  for (const intervalMs of [20, 300, 1000]) {
    it(`a steady trickle into long pulls (heartbeats every ${intervalMs} ms, max_deliver 1): every message written once, none lost`, async () => {
      await trickleIntoLongPulls(fx.nc, () => fx.srv.connect(), intervalMs);
    });
  }

  it("a graceful shutdown mid-write keeps the lease: another worker pulling the same durable receives nothing, the commit is acked once", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 1000 });
    const rivalConn = await fx.srv.connect();
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    const seqs = await publish(f, 3);
    const policy = { enabled: true, intervalMs: 300, maxHeartbeats: 30, shutdownTimeoutMs: 5000 };
    const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, { inProgress: policy });
    const shutdown = new AbortController();
    const results: BatchResult[] = [];
    let aborted = false;
    let started!: () => void;
    const writing = new Promise<void>((r) => (started = r));
    const running = ack.run(
      await f.js.consumers.get(f.stream, f.consumer),
      async (_msgs, ctx) => {
        started();
        // A driver call without cancellation: it notices the abort but finishes its commit.
        await sleep(3000);
        aborted = ctx.signal.aborted;
      },
      { batchSize: 3, signal: shutdown.signal, onBatch: (r) => results.push(r) },
    );
    await writing;
    const rival = await startRival(jetstream(rivalConn), f.stream, f.consumer);
    await sleep(300);
    shutdown.abort();
    await running;
    await rival.stop();
    await rivalConn.close();
    expect(aborted).toBe(true);
    expect(rival.received).toEqual([]);
    expect(results).toHaveLength(1);
    expect(results[0]).toMatchObject({ outcome: "acked", acked: 3, leaseLost: false });
    expect(results[0]!.heartbeats).toBeGreaterThanOrEqual(8);
    await fx.drain();
    for (const seq of seqs) expect(spy.forSequence(seq).filter((x) => x.kind !== "+WPI").map((x) => x.kind)).toEqual(["+ACK"]);
  });

  it("a lease lost after the shutdown began is reported (leaseLost: true), whatever aborted first", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 1000 });
    await publish(f, 1);
    // Two beats, then the lease runs out while the write drains after the shutdown.
    const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, { inProgress: { enabled: true, intervalMs: 300, maxHeartbeats: 2, shutdownTimeoutMs: 5000 } });
    const shutdown = new AbortController();
    const results: BatchResult[] = [];
    let started!: () => void;
    const writing = new Promise<void>((r) => (started = r));
    const running = ack.run(
      await f.js.consumers.get(f.stream, f.consumer),
      async () => {
        started();
        await sleep(2500);
      },
      { batchSize: 1, signal: shutdown.signal, onBatch: (r) => results.push(r) },
    );
    await writing;
    shutdown.abort();
    await running;
    expect(results[0]).toMatchObject({ outcome: "acked", leaseLost: true });
    expect(results[0]!.messages[0]!.leaseLost).toBe(true);
  });

  it("a write that never settles: run returns within its bound, and its message gets no frame while it runs", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 5000 });
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    const [seq] = await publish(f, 1);
    const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, { inProgress: { enabled: true, intervalMs: 1000, shutdownTimeoutMs: 1000 } });
    const shutdown = new AbortController();
    const results: BatchResult[] = [];
    let started!: () => void;
    const writing = new Promise<void>((r) => (started = r));
    const never = new Promise<void>(() => undefined);
    const running = ack.run(
      await f.js.consumers.get(f.stream, f.consumer),
      async () => {
        started();
        await never;
      },
      { batchSize: 1, signal: shutdown.signal, onBatch: (r) => results.push(r) },
    );
    await writing;
    const t0 = performance.now();
    shutdown.abort();
    await running;
    const tookMs = performance.now() - t0;
    // expiry (no pull open) + 2 × shutdownTimeoutMs + a flush, with room for a busy machine.
    expect(tookMs).toBeLessThan(4500);
    expect(results[0]).toMatchObject({ outcome: "abandoned", abandoned: 1, acked: 0 });
    expect(ack.abandoned).toBe(1);
    await fx.drain();
    expect(spy.forSequence(seq!).filter((x) => x.kind !== "+WPI")).toEqual([]);
  });

  it("runEach: a handler that never settles does not hang the loop either", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 5000 });
    await publish(f, 2);
    const ack = new CommitThenAck({ inProgress: verifyInProgressPolicy({ enabled: false, shutdownTimeoutMs: 1000 }, undefined) });
    const shutdown = new AbortController();
    let started = 0;
    const running = ack.runEach(await f.js.consumers.get(f.stream, f.consumer), () => {
      started += 1;
      return new Promise(() => undefined);
    }, { concurrency: 2, signal: shutdown.signal });
    await eventually(() => started === 2, "both handlers running");
    const t0 = performance.now();
    shutdown.abort();
    await running;
    expect(performance.now() - t0).toBeLessThan(4500);
    expect(ack.abandoned).toBe(2);
  });

  it("runEach with every handler busy sends nothing while it waits: no pull, no consumer-info read, until a handler is free", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 30_000 });
    await publish(f, 3);
    // Everything the worker's connection asks of the server about this consumer.
    const asked: string[] = [];
    const sub = fx.nc.subscribe(`$JS.API.CONSUMER.>`, { callback: (_err, m) => void asked.push(m.subject) });
    await fx.nc.flush();
    const { worker, ack, stop, busy, release, end } = await heldWorker(() => fx.srv.connect());
    let started = 0;
    const running = ack.runEach(await jetstream(worker).consumers.get(f.stream, f.consumer), () => ((started += 1), busy), {
      concurrency: 2,
      expiresMs: 1000,
      signal: stop.signal,
    });
    try {
      await eventually(() => started === 2, "both handlers running");
      // Past the pull's end and several of the client's heartbeat periods (half the expiry):
      // with no pull out, nothing is expected from the server, so nothing is asked either.
      await sleep(1500);
      asked.length = 0;
      await sleep(4000);
      expect(asked).toEqual([]);
      release();
      await eventually(() => started === 3, "the third message, pulled once a handler was free");
    } finally {
      sub.unsubscribe();
      await end(running);
    }
  });

  it.each([
    // Four handlers, three busy: one free.
    { loop: "runEach" as const, options: { concurrency: 4 }, free: 1 },
    // Room for two batches of three (six), one batch of three being written: three free.
    { loop: "run" as const, options: { concurrency: 2, batchSize: 3 }, free: 3 },
  ])("$loop: a subscription opened again while writes run (its consumer deleted and made again) asks in every pull, its first too, only for what the loop can start ($free)", async ({ loop, options, free }) => {
    const f = await createFixture(fx.nc, { ackWaitMs: 30_000 });
    await publish(f, 3);
    const config = (await f.jsm.consumers.info(f.stream, f.consumer)).config;
    // Every pull the worker sends for this consumer, as the server receives it.
    const pulls: number[] = [];
    const sub = fx.nc.subscribe(`$JS.API.CONSUMER.MSG.NEXT.${f.stream}.${f.consumer}`, { callback: (_err, m) => void pulls.push(m.json<{ batch: number }>().batch) });
    await fx.nc.flush();
    const { worker, ack, stop, busy, end } = await heldWorker(() => fx.srv.connect());
    const started: number[] = [];
    const errors: unknown[] = [];
    const consumer = await jetstream(worker).consumers.get(f.stream, f.consumer);
    const settings = { ...options, expiresMs: 1000, signal: stop.signal, onError: (e: unknown) => void errors.push(e) };
    const running =
      loop === "runEach"
        ? ack.runEach(consumer, (m) => (started.push(m.seq), busy), settings)
        : ack.run(consumer, (msgs) => (started.push(...msgs.map((m) => m.seq)), busy), settings);
    try {
      await eventually(() => started.length === 3, "three messages being written");
      const before = pulls.length;
      await f.jsm.consumers.delete(f.stream, f.consumer);
      await eventually(() => errors.some((e) => e instanceof Error && /consumer_deleted/.test(e.message)), "the deletion reported", 20_000);
      await f.jsm.consumers.add(f.stream, config);
      // The new consumer delivers from the start, into the room left.
      await eventually(() => started.length === 3 + free, "the free room fed", 20_000);
      await sleep(1500);
      const after = pulls.slice(before);
      // A pull opened the new subscription (the client sends it as it subscribes).
      expect(after.length).toBeGreaterThanOrEqual(1);
      // Before: the first pull of a subscription opened again asked for the whole capacity.
      expect(Math.max(...after)).toBe(free);
      // Nothing more came than the loop could start.
      expect(started).toHaveLength(3 + free);
    } finally {
      sub.unsubscribe();
      await end(running);
    }
  });

  it("runEach pulls only for free handlers: none waits for one, none is written twice or exhausted without an attempt (max_deliver 2)", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 1000, maxDeliver: 2 });
    const seqs = await publish(f, 8);
    // One beat only: a message that waited for a handler would lose its lease while waiting.
    const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, { inProgress: { enabled: true, intervalMs: 700, maxHeartbeats: 1 } });
    const handled = new Map<number, number[]>();
    const results: BatchResult[] = [];
    let running = 0;
    let most = 0;
    const shutdown = new AbortController();
    const loop = ack.runEach(
      await f.js.consumers.get(f.stream, f.consumer),
      async (m) => {
        running += 1;
        most = Math.max(most, running);
        handled.set(m.seq, [...(handled.get(m.seq) ?? []), m.info.deliveryCount]);
        await sleep(1000);
        running -= 1;
      },
      { concurrency: 2, batchSize: 20, signal: shutdown.signal, onResult: (r) => results.push(r) },
    );
    await eventually(() => results.length === 8, "eight results", 20_000);
    shutdown.abort();
    await loop;
    expect(most).toBe(2);
    expect([...handled.keys()].sort((a, b) => a - b)).toEqual(seqs);
    // The delivery counts the worker saw: every message handled once, on its first delivery.
    expect([...handled.values()].every((d) => d.length === 1 && d[0] === 1)).toBe(true);
    expect(results.every((r) => r.outcome === "acked" && !r.leaseLost)).toBe(true);
  });

  it("a fresh instance (no AckWait known to it), heartbeats off, expiresMs 10 s: one message is written once, not redelivered into the open pull", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 2000 });
    await publish(f, 1);
    const ack = new CommitThenAck();
    const writes = new Writes();
    const errors: unknown[] = [];
    const shutdown = new AbortController();
    const running = ack.run(await f.js.consumers.get(f.stream, f.consumer), async (msgs) => writes.add(msgs), {
      expiresMs: 10_000,
      signal: shutdown.signal,
      onError: (e) => errors.push(e),
    });
    await eventually(() => writes.count.size === 1, "the message written");
    await sleep(2500);
    shutdown.abort();
    await running;
    expect([...writes.count.values()]).toEqual([1]);
    // The AckWait learnt from the consumer bounds the pull: 2000 / 4 is below the client's minimum.
    expect(errors.some((e) => e instanceof ConsumerPolicyError && e.reason === "pull_expiry_clamped" && /1000 ms/.test(e.message))).toBe(true);
  });

  it("heartbeats off, pulls open at once and served in turns: a message waiting for its own pull's end keeps its lease (another worker receives nothing)", async () => {
    // AckWait 4 s bounds each pull at 1 s (a quarter); a message waits at most that long for its
    // pull to end, then is written for 1.5 s: acked about 2.5 s after it arrived at the latest.
    const f = await createFixture(fx.nc, { ackWaitMs: 4000 });
    const rivalConn = await fx.srv.connect();
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    // A first full batch: the loop sees a backlog, so its next pulls overlap.
    const first = await publish(f, 10);
    const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer);
    const writes = new Writes();
    const redelivered: number[] = [];
    const results: BatchResult[] = [];
    const shutdown = new AbortController();
    const running = ack.run(
      await f.js.consumers.get(f.stream, f.consumer),
      async (msgs) => {
        writes.add(msgs);
        for (const m of msgs) if (m.info.deliveryCount > 1) redelivered.push(m.seq);
        await sleep(1500);
      },
      { batchSize: 10, concurrency: 3, signal: shutdown.signal, onBatch: (r) => results.push(r) },
    );
    await eventually(() => writes.count.size === 10, "the first batch written");
    // A trickle while two pulls are open: the server hands its messages to them in turns.
    let mostWaiting = 0;
    const trickled: number[] = [];
    for (let i = 0; i < 30; i++) {
      trickled.push((await f.js.publish(f.subject, `t-${i}`)).seq);
      if (i % 5 === 0) mostWaiting = Math.max(mostWaiting, (await consumerInfo(f)).num_waiting);
      await sleep(100);
    }
    await eventually(async () => (await consumerInfo(f)).num_pending === 0, "every message delivered to the loop");
    // Every message is the loop's now: anything the rival receives is a redelivery.
    const rival = await startRival(jetstream(rivalConn), f.stream, f.consumer);
    await eventually(async () => (await consumerInfo(f)).num_ack_pending === 0, "every message acked", 15_000);
    // Past AckWait after the last delivery: a lease lost to waiting would have come back by now.
    await sleep(4500);
    await rival.stop();
    await rivalConn.close();
    shutdown.abort();
    await running;
    expect(mostWaiting).toBeGreaterThanOrEqual(2);
    expect(rival.received).toEqual([]);
    expect(redelivered).toEqual([]);
    expect(writes.twice()).toEqual([]);
    const all = [...first, ...trickled];
    expect(all.filter((s) => !writes.count.has(s))).toEqual([]);
    expect(results.every((r) => r.messages.length <= 10 && r.acked === r.messages.length)).toBe(true);
    await fx.drain();
    for (const seq of all) expect(spy.forSequence(seq).map((x) => x.kind)).toEqual(["+ACK"]);
  }, 40_000);

  it("run resolves only after its last ACKs reached the server (consumer info from another connection, at once)", async () => {
    const other = await fx.srv.connect();
    try {
      for (let round = 0; round < 8; round++) {
        const f = await createFixture(fx.nc, { ackWaitMs: 30_000 });
        await publish(f, 50);
        const ack = new CommitThenAck();
        const shutdown = new AbortController();
        let seen = 0;
        await ack.run(await f.js.consumers.get(f.stream, f.consumer), async (msgs) => {
          seen += msgs.length;
          if (seen >= 50) shutdown.abort();
        }, { batchSize: 50, signal: shutdown.signal });
        const info = await (await import("@nats-io/jetstream")).jetstreamManager(other).then((jsm) => jsm.consumers.info(f.stream, f.consumer));
        expect(info.num_ack_pending).toBe(0);
        expect(info.ack_floor.stream_seq).toBe(50);
      }
    } finally {
      await other.close();
    }
  });

  it("metrics: messages held before their write are beaten (in_progress_held_beats_total)", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 1000 });
    const metrics = new InMemoryMetrics();
    const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, { inProgress: { enabled: true, intervalMs: 200 }, metrics });
    const writes = new Writes();
    const shutdown = new AbortController();
    const running = ack.run(await f.js.consumers.get(f.stream, f.consumer), async (msgs) => writes.add(msgs), {
      batchSize: 100,
      expiresMs: 1000,
      signal: shutdown.signal,
    });
    await sleep(100);
    // Arrives in an open pull that ends 1 s later, longer than the heartbeat interval.
    await publish(f, 1);
    await eventually(() => writes.count.size === 1, "the message written");
    shutdown.abort();
    await running;
    expect(metrics.snapshot().counters[MetricNames.IN_PROGRESS_HELD_BEATS_TOTAL] ?? 0).toBeGreaterThanOrEqual(1);
  });
});

describe("intake on a 3-node cluster (R3 stream and consumer)", () => {
  let cluster: NatsCluster;
  let nc: NatsConnection;
  beforeAll(async () => {
    cluster = await startCluster();
    nc = await cluster.connect();
  });
  afterAll(async () => {
    await nc?.close();
    await cluster?.dispose();
  });

  it("a steady trickle into long pulls (heartbeats every 300 ms, max_deliver 1): every message written once, none lost", async () => {
    await trickleIntoLongPulls(nc, () => cluster.connect(), 300, 3);
  });

  it("confirmed ACKs from each node (leader or not): the batch's one reply comes after the consumer leader took every ACK", async () => {
    const f = await createFixture(nc, { replicas: 3, maxAckPending: 2000 });
    const n = 500;
    for (const url of cluster.urls) {
      const worker = await cluster.connect({ servers: url });
      try {
        const on = { ...f, nc: worker, js: jetstream(worker) };
        await publish(on, n);
        const msgs = await fetchBatch(on, n, 5000);
        expect(msgs).toHaveLength(n);
        const ack = new CommitThenAck({ connection: worker, confirmAck: { timeoutMs: 5000, retries: 1 } });
        const result = await ack.process(msgs, async () => undefined);
        expect(result.messages.every((m) => m.confirmed)).toBe(true);
        // Read at once, from the leader: every ACK before the confirmed one was taken.
        expect((await consumerInfo(f)).num_ack_pending).toBe(0);
      } finally {
        await worker.close();
      }
    }
  });
});
