/**
 * The runEach HTTP example against a throwaway nats-server and its local stand-in API: one
 * run stopped by SIGTERM while calls are in flight, then one that drains the consumer. Every
 * order must end acked after a 2xx or dead-lettered after a 4xx; a 5xx is retried; the API
 * never sees more calls at once than the concurrency; no message is redelivered except after
 * a NAK or a shutdown (slow calls are kept alive by heartbeats).
 */
import { DeadLetterHeaders, type BatchResult } from "jetstream-inprogress";
import { describe, expect, it } from "vitest";
import { main, sequenceOf, startSlowApi } from "../../examples/run-each-http.js";
import { AckSpy } from "../helpers/ack-spy.js";
import { consumerInfo, createFixture, eventually } from "../helpers/jetstream.js";
import { useServer } from "../helpers/server-fixture.js";

const ORDERS = 24;
const CONCURRENCY = 4;
const ACK_WAIT_MS = 1_000;
const SHUTDOWN_TIMEOUT_MS = 1_500;
/** Every sixth order is invalid (qty 0): the API answers 400. */
const invalid = (id: number): boolean => id % 6 === 0;

interface Settled {
  readonly phase: 1 | 2;
  readonly seq: number;
  readonly delivery: number;
  readonly action: string;
  readonly writeMs: number;
}

describe("examples/run-each-http.ts (real nats-server, local HTTP API)", () => {
  const fx = useServer();

  it("acks after a 2xx, retries a 5xx, dead-letters a 4xx, keeps slow calls alive, bounds the calls in flight and stops gracefully", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: ACK_WAIT_MS, maxDeliver: 10 });
    const dlqStream = `${f.stream}_DLQ`;
    const dlqSubject = `${f.stream.toLowerCase()}.dlq`;
    await f.jsm.streams.add({ name: dlqStream, subjects: [dlqSubject] });
    // The first call for every fourth order is answered 503 (before the order is looked at).
    const api = await startSlowApi({ minMs: 300, maxMs: 1500, unavailable: (key, attempt) => attempt === 1 && sequenceOf(key) % 4 === 0 });
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    try {
      for (let id = 1; id <= ORDERS; id++) {
        const ack = await f.js.publish(f.subject, JSON.stringify({ id, sku: `sku-${id}`, qty: invalid(id) ? 0 : 1 }));
        expect(ack.seq).toBe(id);
      }
      const env = {
        NATS_URL: fx.srv.url,
        API_URL: api.url,
        STREAM: f.stream,
        CONSUMER: f.consumer,
        DEAD_LETTER_SUBJECT: dlqSubject,
        CONCURRENCY: String(CONCURRENCY),
        SHUTDOWN_TIMEOUT_MS: String(SHUTDOWN_TIMEOUT_MS),
      };
      const settled: Settled[] = [];
      const record = (phase: 1 | 2) => (r: BatchResult) => {
        for (const m of r.messages) settled.push({ phase, seq: m.msg.seq, delivery: m.msg.info.deliveryCount, action: m.action, writeMs: r.writeMs });
      };
      const lines: string[] = [];

      // Phase 1: SIGTERM while calls are running.
      const before = process.listeners("SIGTERM");
      const first = main({ env, log: (l) => lines.push(l), onResult: record(1) });
      await eventually(() => api.calls.filter((c) => c.status !== undefined).length >= 6 && api.inFlight > 0, "answered calls and calls in flight");
      // The listener main installed is what the signal would run; call it rather than signal
      // the test process, whose other listeners (if any) are not ours to trigger.
      const ours = process.listeners("SIGTERM").filter((l) => !before.includes(l));
      expect(ours).toHaveLength(1);
      const stopAt = performance.now();
      (ours[0] as (signal: NodeJS.Signals) => void)("SIGTERM");
      const s1 = await first;
      const stopMs = performance.now() - stopAt;
      expect(s1.stoppedBy).toBe("SIGTERM");
      // Running calls are cancelled at once; messages already received get the shutdown bound.
      expect(stopMs).toBeLessThan(SHUTDOWN_TIMEOUT_MS + 1_500);
      expect(api.inFlight).toBe(0);
      expect(process.listeners("SIGTERM")).toEqual(before);
      expect(lines.at(-1)).toMatch(/^stopped \(SIGTERM\) after [\d.]+ s: \d+ acked, \d+ dead-lettered, \d+ retried, \d+ left for redelivery/);
      const cancelled = api.calls.filter((c) => c.status === undefined);

      // Phase 2: drain what is left (the cancelled calls come back after AckWait).
      const s2 = await main({ env: { ...env, EXIT_WHEN_DRAINED: "1" }, log: (l) => lines.push(l), onResult: record(2) });
      expect(s2.stoppedBy).toBe("drained");
      const info = await consumerInfo(f);
      expect(info.num_pending).toBe(0);
      expect(info.num_ack_pending).toBe(0);

      // Every order: acked after a 2xx, or dead-lettered after a 4xx; every 5xx retried.
      const copies = new Map<number, number>();
      const dlqInfo = await f.jsm.streams.info(dlqStream);
      for (let s = 1; s <= dlqInfo.state.messages; s++) {
        const copy = await f.jsm.streams.getMessage(dlqStream, { seq: s });
        const source = Number(copy?.header.get(DeadLetterHeaders.STREAM_SEQUENCE));
        copies.set(source, (copies.get(source) ?? 0) + 1);
      }
      for (let seq = 1; seq <= ORDERS; seq++) {
        const calls = api.calls.filter((c) => sequenceOf(c.key) === seq);
        const answered = calls.filter((c) => c.status !== undefined);
        const last = answered.at(-1);
        const mine = settled.filter((r) => r.seq === seq);
        const final = mine.at(-1);
        if (invalid(seq)) {
          expect(last?.status, `order ${seq}`).toBe(400);
          expect(final?.action, `order ${seq}`).toBe("dead_lettered");
          expect(copies.get(seq), `order ${seq}`).toBe(1);
        } else {
          expect([200, 201], `order ${seq}`).toContain(last?.status);
          expect(final?.action, `order ${seq}`).toBe("acked");
          expect(copies.has(seq), `order ${seq}`).toBe(false);
          expect(api.accepted.has(`${f.stream}:${seq}`)).toBe(true);
        }
        // A 503 is followed by another call for the same order: on the same delivery (tried again
        // in place while the lease holds), or on a later one after that delivery was NAKed (or
        // left by the shutdown).
        answered.forEach((c, i) => {
          if (c.status !== 503) return;
          expect(i, `order ${seq}: a 503 was the last answer`).toBeLessThan(answered.length - 1);
          if (answered[i + 1]!.delivery === c.delivery) return;
          const settledAs = mine.find((r) => r.delivery === c.delivery);
          expect(["nacked", "left"], `order ${seq}, delivery ${c.delivery}`).toContain(settledAs?.action);
          if (settledAs?.action === "left") expect(settledAs.phase).toBe(1);
        });
        // The message was settled once, with its final frame, and never acked after a failure.
        expect(spy.of("+ACK", seq)).toHaveLength(1);
        expect(spy.of("+ACK", seq)[0]!.deliveryCount).toBe(final!.delivery);
      }
      expect(api.calls.some((c) => c.status === 503)).toBe(true);
      expect(cancelled.length).toBeGreaterThan(0);

      // Redelivered only after a NAK or the shutdown: never because a call was slow.
      for (const r of settled.filter((x) => x.delivery > 1)) {
        const previous = settled.find((x) => x.seq === r.seq && x.delivery === r.delivery - 1);
        expect(previous, `order ${r.seq}: delivery ${r.delivery - 1} was never settled (${spy.summary()})`).toBeDefined();
        if (previous!.action === "left") expect(previous!.phase, `order ${r.seq}: left outside the shutdown`).toBe(1);
        else expect(previous!.action, `order ${r.seq}, delivery ${previous!.delivery}`).toBe("nacked");
      }
      expect(settled.filter((r) => r.phase === 2 && r.action === "left")).toEqual([]);
      // Heartbeats carried calls (and waits for a slot) past AckWait on their first delivery.
      expect(s1.heartbeats + s2.heartbeats).toBeGreaterThan(0);
      expect(spy.of("+WPI").length).toBeGreaterThan(0);
      expect(settled.some((r) => r.delivery === 1 && r.action === "acked" && r.writeMs > ACK_WAIT_MS)).toBe(true);

      // Never more calls at once than the concurrency. A call cancelled by the stop ends for the
      // client at the stop; the server hears of it a few milliseconds later, when the handlers of
      // messages already received may have started (they get the shutdown bound), so count
      // those calls as ending at the stop.
      const ends = (c: (typeof api.calls)[number]): number => (c.status === undefined ? Math.min(c.endedAt ?? stopAt, stopAt) : c.endedAt!);
      const events = api.calls.flatMap((c) => [
        { at: c.startedAt, d: 1 },
        { at: ends(c), d: -1 },
      ]);
      events.sort((a, b) => a.at - b.at || a.d - b.d);
      let running = 0;
      let most = 0;
      for (const e of events) most = Math.max(most, (running += e.d));
      expect(most).toBeLessThanOrEqual(CONCURRENCY);
      expect(most).toBeGreaterThan(1);
      expect(api.maxInFlight).toBeLessThanOrEqual(CONCURRENCY + cancelled.length);
    } finally {
      await api.close();
      await f.jsm.streams.delete(f.stream).catch(() => undefined);
      await f.jsm.streams.delete(dlqStream).catch(() => undefined);
    }
  }, 30_000);
});
