/**
 * Outages on a real nats-server, each longer than the consumer's AckWait: the sink down for
 * 12 s (MaxDeliver 3), and the only server restarting mid-run. Neither may spend a healthy
 * message's delivery, write one twice, or count an ACK that never went out.
 */
import { describe, expect, it } from "vitest";
import type { JsMsg } from "@nats-io/jetstream";
import { CommitThenAck, InMemoryMetrics, MetricNames, TemporarySinkError, type BatchResult } from "../../src/index.js";
import { AckSpy } from "../helpers/ack-spy.js";
import { consumerInfo, createFixture, eventually, publish } from "../helpers/jetstream.js";
import { startServer } from "../helpers/nats-server.js";

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
      await sleep(3000);
      await srv.restart();
      await eventually(() => results.reduce((n, r) => n + r.acked, 0) >= 200, "all two hundred acked", 30_000);
      shutdown.abort();
      await running;
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
});
