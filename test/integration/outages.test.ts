/**
 * Outages on a real nats-server, each longer than the consumer's AckWait: the sink down for
 * 12 s (MaxDeliver 3), and the only server restarting mid-run. Neither may spend a healthy
 * message's delivery, write one twice, or count an ACK that never went out. And a restart that
 * takes a memory stream with it: made again, its new messages reuse the old sequences, and
 * every one must still be written.
 */
import { describe, expect, it } from "vitest";
import { AckPolicy, StorageType, jetstream, jetstreamManager, type JsMsg } from "@nats-io/jetstream";
import { nanos } from "@nats-io/transport-node";
import { CommitThenAck, InMemoryMetrics, MetricNames, TemporarySinkError, type BatchResult } from "../../src/index.js";
import { AckSpy } from "../helpers/ack-spy.js";
import { consumerInfo, createFixture, eventually, publish } from "../helpers/jetstream.js";
import { startServer } from "../helpers/nats-server.js";
import { startRival } from "../helpers/rival.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const RECONNECT = { reconnect: true, maxReconnectAttempts: -1, reconnectTimeWait: 100 } as const;

/** Writes per stream sequence, with the delivery count each write saw. */
class Ledger {
  readonly writes = new Map<number, number[]>();
  attempts = 0;
  record(msgs: readonly JsMsg[]): void {
    for (const m of msgs) this.writes.set(m.seq, [...(this.writes.get(m.seq) ?? []), m.info.deliveryCount]);
  }
  twice(): number[] {
    return [...this.writes].filter(([, d]) => d.length > 1).map(([s]) => s);
  }
}

/**
 * Runs `ack` over the fixture's consumer (300 ms writes, batches of 10, 4 at once), stops the
 * only server for `outageMs` while writes are under way, restarts it, and ends the loop once
 * `settled(results)` holds.
 */
async function runThroughRestart(
  srv: { stop(): Promise<void>; restart(): Promise<unknown> },
  ack: CommitThenAck,
  f: Awaited<ReturnType<typeof createFixture>>,
  settled: (results: readonly BatchResult[]) => boolean,
  outageMs = 3000,
): Promise<{ ledger: Ledger; results: BatchResult[] }> {
  const ledger = new Ledger();
  const results: BatchResult[] = [];
  const shutdown = new AbortController();
  let writing = 0;
  const running = ack.run(
    await f.js.consumers.get(f.stream, f.consumer),
    async (msgs) => {
      writing += 1;
      await sleep(300);
      ledger.record(msgs);
      writing -= 1;
    },
    { batchSize: 10, concurrency: 4, signal: shutdown.signal, onBatch: (r) => results.push(r), onError: () => undefined },
  );
  await eventually(() => writing >= 2 && ledger.writes.size >= 20, "writes under way");
  await srv.stop();
  await sleep(outageMs);
  await srv.restart();
  await eventually(() => settled(results), "every message settled", 30_000);
  shutdown.abort();
  await running;
  return { ledger, results };
}

describe("outages on a real nats-server", () => {
  it("the sink down for 12 s, MaxDeliver 3: every message written once on its first delivery, nothing dead-lettered or exhausted, a bounded number of attempts", async () => {
    await using srv = await startServer();
    const nc = await srv.connect();
    try {
      const f = await createFixture(nc, { ackWaitMs: 3000, maxDeliver: 3 });
      await f.jsm.streams.add({ name: `${f.stream}_DLQ`, subjects: [`${f.subject}.dlq`] });
      const seqs = await publish(f, 20);
      const metrics = new InMemoryMetrics();
      const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, {
        inProgress: { enabled: true, intervalMs: 1000, maxHeartbeats: 20 },
        deadLetter: { js: f.js, subject: `${f.subject}.dlq` },
        metrics,
      });
      const ledger = new Ledger();
      const downUntil = performance.now() + 12_000;
      const results: BatchResult[] = [];
      const shutdown = new AbortController();
      const running = ack.run(
        await f.js.consumers.get(f.stream, f.consumer),
        async (msgs) => {
          ledger.attempts += 1;
          if (performance.now() < downUntil) throw new TemporarySinkError("connection refused");
          ledger.record(msgs);
        },
        { batchSize: 5, concurrency: 2, signal: shutdown.signal, onBatch: (r) => results.push(r) },
      );
      await eventually(() => results.reduce((n, r) => n + r.acked, 0) === 20, "all twenty acked", 30_000);
      shutdown.abort();
      await running;
      expect([...ledger.writes.keys()].sort((a, b) => a - b)).toEqual(seqs);
      // The delivery counts the worker saw: no delivery was spent on the outage.
      expect([...ledger.writes.values()].every((d) => d.length === 1 && d[0] === 1)).toBe(true);
      expect(results.every((r) => r.outcome === "acked")).toBe(true);
      const c = metrics.snapshot().counters;
      expect(c[MetricNames.MESSAGES_DEAD_LETTERED_TOTAL] ?? 0).toBe(0);
      expect(c[MetricNames.MESSAGES_EXHAUSTED_TOTAL] ?? 0).toBe(0);
      expect(c[MetricNames.MESSAGES_NACKED_TOTAL] ?? 0).toBe(0);
      // Two batches held through the outage (pulls paused), each tried about seven times.
      expect(ledger.attempts).toBeLessThanOrEqual(40);
      expect(c[MetricNames.WRITE_RETRIES_TOTAL]).toBeGreaterThanOrEqual(10);
      const info = await consumerInfo(f);
      expect(info.delivered.consumer_seq).toBe(20);
      expect((await f.jsm.streams.info(`${f.stream}_DLQ`)).state.messages).toBe(0);
    } finally {
      await nc.close();
    }
  });

  it("the only server down longer than AckWait mid-run: held ACKs go out after the reconnect, nothing written twice, acked counts only ACKs that went out", async () => {
    await using srv = await startServer();
    const nc = await srv.connect(RECONNECT);
    const spyConn = await srv.connect(RECONNECT);
    try {
      const f = await createFixture(nc, { ackWaitMs: 2000 });
      await using spy = await AckSpy.start(spyConn, f.stream);
      const seqs = await publish(f, 200);
      const metrics = new InMemoryMetrics();
      const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, {
        inProgress: { enabled: true, intervalMs: 500, maxHeartbeats: 40 },
        metrics,
        connection: nc,
      });
      const { ledger } = await runThroughRestart(srv, ack, f, (results) => results.reduce((n, r) => n + r.acked, 0) >= 200);
      await eventually(async () => (await consumerInfo(f)).num_ack_pending === 0, "nothing pending", 15_000);
      expect([...ledger.writes.keys()].sort((a, b) => a - b)).toEqual(seqs);
      expect(ledger.twice()).toEqual([]);
      // Every ACK counted went out and landed: two hundred counted, none unsent, the ack floor
      // at the last message. (The spy's own connection was down too: it cannot be the witness.)
      const c = metrics.snapshot().counters;
      expect(c[MetricNames.MESSAGES_ACKED_TOTAL]).toBe(200);
      expect(c[MetricNames.ACKS_UNSENT_TOTAL] ?? 0).toBe(0);
      expect((await consumerInfo(f)).ack_floor.stream_seq).toBe(seqs.at(-1));
      expect(spy.of("-NAK")).toEqual([]);
    } finally {
      await nc.close();
      await spyConn.close();
    }
  });

  it.each([
    { path: "message by message (no connection: ackAck)", withConnection: false },
    { path: "in batches (through its connection)", withConnection: true },
  ])(
    "the only server down past a host's confirmAck window mid-run, $path: the ACKs wait for the reconnect, then are confirmed; nothing written twice, a second worker receives nothing",
    async ({ withConnection }) => {
      await using srv = await startServer();
      const nc = await srv.connect(RECONNECT);
      try {
        const f = await createFixture(nc, { ackWaitMs: 2000 });
        const seqs = await publish(f, 100);
        const metrics = new InMemoryMetrics();
        // Its window, timeoutMs × (retries + 1), is 3 s: long enough for a restarted server's
        // JetStream to answer again (1 s was not, once, on 2.15.1: "no responders" past it), and
        // the outage is twice as long, so attempts spent during it would all be lost.
        const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, {
          inProgress: { enabled: true, intervalMs: 500, maxHeartbeats: 40 },
          confirmAck: { timeoutMs: 1000, retries: 2 },
          metrics,
          ...(withConnection ? { connection: nc } : {}),
        });
        const { ledger, results } = await runThroughRestart(srv, ack, f, (done) => done.reduce((n, r) => n + r.acked + r.left, 0) >= 100, 6000);
        expect([...ledger.writes.keys()].sort((a, b) => a - b)).toEqual(seqs);
        expect(ledger.twice()).toEqual([]);
        // Every ACK confirmed: none spent its attempts on the outage.
        const settled = results.flatMap((r) => r.messages);
        expect(settled.filter((r) => r.action !== "acked" || r.confirmed !== true || r.settleError !== undefined).map((r) => [r.msg.seq, r.action, String(r.settleError)])).toEqual([]);
        const c = metrics.snapshot().counters;
        expect(c[MetricNames.ACKS_HELD_TOTAL]).toBeGreaterThanOrEqual(1);
        expect(c[MetricNames.ACKS_UNSENT_TOTAL] ?? 0).toBe(0);
        // The lease was kept and every ACK landed: a second worker on the same durable, past
        // AckWait, receives nothing.
        const rival = await startRival(f.js, f.stream, f.consumer);
        await sleep(3500);
        await rival.stop();
        expect(rival.received).toEqual([]);
        expect((await consumerInfo(f)).ack_floor.stream_seq).toBe(seqs.at(-1));
      } finally {
        await nc.close();
      }
    },
    60_000,
  );

  it("the only server restarts and its memory stream is gone: made again under the same name, its new messages (the old sequences) are each written once, a failed write included", async () => {
    await using srv = await startServer();
    const nc = await srv.connect(RECONNECT);
    const stream = `MEM_${process.pid}`;
    const subject = `${stream.toLowerCase()}.events`;
    // What a service does at its start: the stream and its durable, if missing.
    const provision = async (): Promise<void> => {
      const jsm = await jetstreamManager(nc);
      await jsm.streams.add({ name: stream, subjects: [subject], storage: StorageType.Memory });
      await jsm.consumers.add(stream, { durable_name: "worker", ack_policy: AckPolicy.Explicit, ack_wait: nanos(30_000) });
    };
    try {
      await provision();
      const js = jetstream(nc);
      const jsm = await jetstreamManager(nc);
      const metrics = new InMemoryMetrics();
      const ack = await CommitThenAck.forConsumer(jsm, stream, "worker", { metrics, connection: nc, onTemporaryFailure: { action: "nak", delayMs: 100, retryInPlace: false } });
      const written: string[] = [];
      // The sink fails the first write of each new message: each comes back as a redelivery.
      const failing = new Set(["new-1", "new-2", "new-3"]);
      const shutdown = new AbortController();
      const running = ack.run(
        await js.consumers.get(stream, "worker"),
        (msgs) => {
          const bodies = msgs.map((m) => m.string());
          if (bodies.some((b) => failing.delete(b))) throw new TemporarySinkError("database down once");
          written.push(...bodies);
        },
        { batchSize: 10, expiresMs: 1000, signal: shutdown.signal, onError: () => undefined },
      );
      const old: number[] = [];
      for (let i = 1; i <= 3; i++) old.push((await js.publish(subject, `old-${i}`)).seq);
      await eventually(async () => written.length === 3 && (await jsm.consumers.info(stream, "worker")).ack_floor.stream_seq === 3, "the old messages written and acked");
      await srv.restart();
      await eventually(async () => {
        try {
          await provision();
          return true;
        } catch {
          return false;
        }
      }, "the stream made again after the restart", 20_000);
      const fresh: number[] = [];
      for (let i = 1; i <= 3; i++) fresh.push((await js.publish(subject, `new-${i}`)).seq);
      expect(fresh).toEqual(old);
      await eventually(() => written.filter((b) => b.startsWith("new-")).length === 3, "the new messages written after their failed write", 20_000);
      shutdown.abort();
      await running;
      expect(failing.size).toBe(0);
      expect([...written].sort()).toEqual(["new-1", "new-2", "new-3", "old-1", "old-2", "old-3"]);
      expect(metrics.snapshot().counters[MetricNames.REDELIVERIES_OF_COMMITTED_TOTAL] ?? 0).toBe(0);
      expect((await jsm.consumers.info(stream, "worker")).num_ack_pending).toBe(0);
    } finally {
      await nc.close();
    }
  });
});
