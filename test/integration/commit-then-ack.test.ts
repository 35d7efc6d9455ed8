/**
 * CommitThenAck against a real nats-server. AckWait is 2 s unless a test says otherwise; the
 * ack-frame spy and consumer info are the oracles.
 */
import { spawn } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { describe, expect, it } from "vitest";
import { AckPolicy, jetstream, jetstreamManager, type JsMsg } from "@nats-io/jetstream";
import { nanos, type NatsConnection } from "@nats-io/transport-node";
import {
  AckNotConfirmedError,
  CommitThenAck,
  ConsumerPolicyError,
  DeadLetterHeaders,
  InMemoryMetrics,
  LeaseExpiredError,
  MetricNames,
  PermanentSinkError,
  TemporarySinkError,
  verifyInProgressPolicy,
} from "../../src/index.js";
import { AckSpy } from "../helpers/ack-spy.js";
import { consumerInfo, createFixture, eventually, fetchBatch, publish, uniqueName } from "../helpers/jetstream.js";
import { startRival } from "../helpers/rival.js";
import { natsServerVersion } from "../helpers/nats-server.js";
import { useServer } from "../helpers/server-fixture.js";
import { versionAtLeast } from "../helpers/server-version.js";

const ACK_WAIT_MS = 2000;
const serverVersion = () => process.env["JSIP_NATS_SERVER_VERSION"] ?? natsServerVersion();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const root = join(import.meta.dirname, "..", "..");
const policy = () =>
  verifyInProgressPolicy({ enabled: true, intervalMs: 700, maxHeartbeats: 50, shutdownTimeoutMs: 1000 }, { ackWaitMs: ACK_WAIT_MS, source: "configured" });

/** Whether this client refuses a subject with a space when subscribing (recent 3.x clients do). */
function refusesSpaces(nc: NatsConnection): boolean {
  try {
    nc.subscribe("_INBOX probe.x").unsubscribe();
    return false;
  } catch {
    return true;
  }
}

describe("CommitThenAck on a real nats-server", () => {
  const fx = useServer();


  it("orders frames: every +WPI before the final frame, the +ACK only after the write resolved", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: ACK_WAIT_MS });
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    const seqs = await publish(f, 3);
    const msgs = await fetchBatch(f, 3);
    const metrics = new InMemoryMetrics();
    const ack = new CommitThenAck({ inProgress: policy(), metrics });
    let resolvedAt = 0;
    const result = await ack.process(msgs, async () => {
      await sleep(2500);
      await fx.drain();
      resolvedAt = performance.now();
    });
    await fx.drain();
    expect(result).toMatchObject({ outcome: "acked", acked: 3 });
    expect(result.heartbeats).toBeGreaterThanOrEqual(3);
    for (const seq of seqs) {
      const frames = spy.forSequence(seq);
      expect(frames.map((x) => x.kind)).toEqual([...Array(frames.length - 1).fill("+WPI"), "+ACK"]);
      expect(frames.at(-1)!.at).toBeGreaterThan(resolvedAt);
      expect(frames.filter((x) => x.kind === "+WPI").every((x) => x.at < resolvedAt)).toBe(true);
    }
    const c = metrics.snapshot().counters;
    expect(c[MetricNames.MESSAGES_ACKED_TOTAL]).toBe(3);
    expect(metrics.snapshot().observations[MetricNames.BATCH_WRITE_SECONDS]?.[0]).toBeGreaterThan(2);
  });

  it("three workers on one durable consumer, writes longer than AckWait: every message committed once, no redelivery", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: ACK_WAIT_MS });
    await publish(f, 12);
    const committed: number[] = [];
    const deliveries: string[] = [];
    const shutdown = new AbortController();
    const workers = await Promise.all(
      [1, 2, 3].map(async (w) => {
        const conn = await fx.srv.connect();
        const ack = await CommitThenAck.forConsumer(await jetstreamManager(conn), f.stream, f.consumer, {
          inProgress: { enabled: true, intervalMs: 700, maxHeartbeats: 50 },
          connection: conn,
        });
        const consumer = await jetstream(conn).consumers.get(f.stream, f.consumer);
        const done = ack.run(
          consumer,
          async (msgs) => {
            for (const m of msgs) deliveries.push(`${m.seq}@${m.info.deliveryCount}`);
            await sleep(3000);
            for (const m of msgs) committed.push(m.seq);
          },
          { batchSize: 2, signal: shutdown.signal },
        );
        return { conn, done, w };
      }),
    );
    await eventually(() => committed.length === 12, "12 commits", 40_000, 100);
    shutdown.abort();
    for (const w of workers) {
      await w.done;
      await w.conn.close();
    }
    expect([...committed].sort((a, b) => a - b)).toEqual(Array.from({ length: 12 }, (_, i) => i + 1));
    expect(deliveries.every((d) => d.endsWith("@1"))).toBe(true);
    const info = await consumerInfo(f);
    expect(info.delivered.consumer_seq).toBe(12);
    expect(info.num_redelivered).toBe(0);
    expect(info.num_ack_pending).toBe(0);
    expect(info.ack_floor.stream_seq).toBe(12);
  });

  it("a temporary failure is NAKed with its delay and redelivered after it", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 30_000 });
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    const [seq] = await publish(f, 1);
    const msgs = await fetchBatch(f, 1);
    const ack = new CommitThenAck({ onTemporaryFailure: { action: "nak", delayMs: 1500 } });
    const t0 = performance.now();
    const result = await ack.process(msgs, () => {
      throw new TemporarySinkError("db busy");
    });
    expect(result).toMatchObject({ outcome: "nacked", nacked: 1 });
    expect(result.messages[0]).toMatchObject({ requestedDelayMs: 1500, effectiveDelayMs: 1500 });
    expect((result.error as Error).message).toBe("db busy");
    const again = await fetchBatch(f, 1, 6000);
    const waited = performance.now() - t0;
    expect(again[0]?.seq).toBe(seq!);
    expect(again[0]?.info.deliveryCount).toBe(2);
    expect(waited).toBeGreaterThanOrEqual(1400);
    expect(spy.of("-NAK", seq)[0]?.payload).toBe(`-NAK {"delay":${nanos(1500)}}`);
    again[0]?.ack();
  });

  it("a write beaten past AckWait that then fails temporarily: every +WPI leaves before the delayed -NAK, none after it, and the delay holds (a second worker receives nothing until it passed)", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: ACK_WAIT_MS });
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    const [seq] = await publish(f, 1);
    const msgs = await fetchBatch(f, 1);
    const rival = await startRival(jetstream(fx.rivalConn), f.stream, f.consumer);
    let rivalStopped = false;
    try {
      // A delay twice AckWait: a +WPI after the NAK would wipe it (server-facts) and bring the
      // message back one AckWait after that beat, well before the delay.
      const delayMs = 2 * ACK_WAIT_MS;
      // Settled at the first failure (no retry in place), so the NAK follows the one write.
      const ack = new CommitThenAck({ inProgress: policy(), onTemporaryFailure: { action: "nak", delayMs, retryInPlace: false } });
      const result = await ack.process(msgs, async () => {
        await sleep(2.5 * ACK_WAIT_MS);
        throw new TemporarySinkError("db busy");
      });
      expect(result).toMatchObject({ outcome: "nacked", nacked: 1 });
      await fx.drain();
      const frames = spy.forSequence(seq!);
      const nak = frames.findIndex((fr) => fr.kind === "-NAK");
      expect(nak, "the -NAK reached the server").toBeGreaterThanOrEqual(0);
      expect(frames[nak]!.payload).toBe(`-NAK {"delay":${nanos(delayMs)}}`);
      // The write outlived AckWait on its beats alone: several before the NAK, none after it.
      expect(frames.slice(0, nak).every((fr) => fr.kind === "+WPI")).toBe(true);
      expect(nak).toBeGreaterThanOrEqual(5);
      const nakAt = frames[nak]!.at;
      // The lease held through the write: the second worker got nothing while it ran.
      expect(rival.received).toEqual([]);
      // The redelivery comes after the delay, not one AckWait after a late beat.
      await eventually(() => rival.received.length > 0, "the redelivery after the NAK's delay", 4 * delayMs, 25);
      const redeliveredAt = performance.now();
      expect(rival.received[0]).toEqual({ seq: seq!, deliveryCount: 2 });
      expect(redeliveredAt - nakAt).toBeGreaterThanOrEqual(delayMs - 300);
      await fx.drain();
      expect(spy.forSequence(seq!).slice(nak + 1)).toEqual([]);
      await rival.stop();
      rivalStopped = true;
    } finally {
      if (!rivalStopped) await rival.stop().catch(() => undefined);
    }
  });

  it("one instance, two batches: the first batch's lease ends at maxHeartbeats and aborts its own signal; the next batch starts with a fresh signal, keeps its lease and is acked", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: ACK_WAIT_MS });
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    const seqs = await publish(f, 2);
    const limited = verifyInProgressPolicy({ enabled: true, intervalMs: 700, maxHeartbeats: 2, shutdownTimeoutMs: 1000 }, { ackWaitMs: ACK_WAIT_MS, source: "configured" });
    const ack = new CommitThenAck({ inProgress: limited, onTemporaryFailure: { action: "leave", retryInPlace: false } });
    let firstReason: unknown;
    const first = await ack.process(await fetchBatch(f, 1), async (_msgs, ctx) => {
      // Waits for its own lease to end (two beats, then AckWait): at most about 3.4 s.
      await new Promise<void>((resolve) => {
        const bound = setTimeout(resolve, 8000);
        ctx.signal.addEventListener("abort", () => (clearTimeout(bound), resolve()), { once: true });
      });
      firstReason = ctx.signal.reason;
      throw new TemporarySinkError("gave up with the lease");
    });
    expect(firstReason).toBeInstanceOf(LeaseExpiredError);
    // Nothing was sent for it: its redelivery below is the lease ending, not a NAK.
    expect(first).toMatchObject({ outcome: "left", left: 1, acked: 0, nacked: 0, leaseLost: true });
    // The next batch: the first message (redelivered once its lease ended) and the second.
    const next = await fetchBatch(f, 2, 6000);
    expect(next.map((m) => m.seq).sort((a, b) => a - b)).toEqual([...seqs].sort((a, b) => a - b));
    const rival = await startRival(jetstream(fx.rivalConn), f.stream, f.consumer);
    let abortedAtStart: boolean | undefined;
    let second;
    try {
      second = await ack.process(next, async (_msgs, ctx) => {
        abortedAtStart = ctx.signal.aborted;
        // Within its two beats' cover (1.4 s + AckWait), past one AckWait.
        await sleep(ACK_WAIT_MS + 500);
      });
    } finally {
      await rival.stop();
    }
    expect(abortedAtStart).toBe(false);
    expect(second).toMatchObject({ outcome: "acked", acked: 2 });
    expect(rival.received).toEqual([]);
    await fx.drain();
    for (const seq of seqs) expect(spy.of("+ACK", seq)).toHaveLength(1);
    expect(spy.of("-NAK", seqs[0])).toHaveLength(0);
    expect(spy.of("+WPI", seqs[1]).length).toBeGreaterThanOrEqual(1);
    const info = await consumerInfo(f);
    expect(info.num_ack_pending).toBe(0);
  });

  it("an unclassified error is retried, never treated as permanent; leave sends nothing", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: ACK_WAIT_MS });
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    const [seq] = await publish(f, 1);
    const msgs = await fetchBatch(f, 1);
    const ack = new CommitThenAck({ onTemporaryFailure: { action: "leave" } });
    const result = await ack.process(msgs, () => Promise.reject(new RangeError("what is this")));
    expect(result).toMatchObject({ outcome: "left", left: 1 });
    await fx.drain();
    expect(spy.forSequence(seq!)).toHaveLength(0);
    const again = await fetchBatch(f, 1, 6000);
    expect(again[0]?.info.deliveryCount).toBe(2);
    again[0]?.ack();
  });

  it("a permanent failure lands in the dead-letter stream (headers, message id) and is not redelivered", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: ACK_WAIT_MS });
    const dlqStream = uniqueName("DLQ");
    const dlqSubject = `${dlqStream.toLowerCase()}.dead`;
    await f.jsm.streams.add({ name: dlqStream, subjects: [dlqSubject] });
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    const { headers } = await import("@nats-io/transport-node");
    const h = headers();
    h.set("Tenant", "t-7");
    await f.js.publish(f.subject, "poison", { headers: h, msgID: "original-id" });
    const msgs = await fetchBatch(f, 1);
    const metrics = new InMemoryMetrics();
    const ack = new CommitThenAck({ deadLetter: { js: f.js, subject: dlqSubject }, metrics });
    const result = await ack.process(msgs, () => {
      throw new PermanentSinkError("cannot parse");
    });
    expect(result).toMatchObject({ outcome: "dead_lettered", deadLettered: 1 });
    const dlq = await f.js.consumers.get(dlqStream);
    const copy = await dlq.next({ expires: 2000 });
    expect(copy?.string()).toBe("poison");
    expect(copy?.headers?.get("Tenant")).toBe("t-7");
    expect(copy?.headers?.get(DeadLetterHeaders.STREAM)).toBe(f.stream);
    expect(copy?.headers?.get(DeadLetterHeaders.CONSUMER)).toBe(f.consumer);
    expect(copy?.headers?.get(DeadLetterHeaders.STREAM_SEQUENCE)).toBe("1");
    expect(copy?.headers?.get(DeadLetterHeaders.DELIVERY_COUNT)).toBe("1");
    expect(copy?.headers?.get(DeadLetterHeaders.ERROR)).toBe("PermanentSinkError");
    expect(copy?.headers?.get(DeadLetterHeaders.SUBJECT)).toBe(f.subject);
    expect(copy?.headers?.get("Nats-Msg-Id")).toBe(`${f.stream}:${f.consumer}:1`);
    expect(JSON.stringify([...(copy?.headers ?? [])])).not.toContain("cannot parse");
    // The original was acked after the copy was confirmed, and is never redelivered.
    await fx.drain();
    expect(spy.of("+ACK", 1)).toHaveLength(1);
    expect(await fetchBatch(f, 1, 3000)).toHaveLength(0);
    expect(metrics.snapshot().counters[MetricNames.MESSAGES_DEAD_LETTERED_TOTAL]).toBe(1);
    // A second dead-letter publish of the same message is deduplicated by the stream.
    const info = await f.jsm.streams.info(dlqStream);
    await f.js.publish(dlqSubject, "poison", { msgID: `${f.stream}:${f.consumer}:1` });
    expect((await f.jsm.streams.info(dlqStream)).state.messages).toBe(info.state.messages);
  });

  it("a failed dead-letter publish leaves the original redeliverable", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: ACK_WAIT_MS });
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    const [seq] = await publish(f, 1);
    const msgs = await fetchBatch(f, 1);
    const ack = new CommitThenAck({
      deadLetter: { js: f.js, subject: "no.stream.captures.this", timeoutMs: 1000 },
      onTemporaryFailure: { action: "leave" },
    });
    const result = await ack.process(msgs, () => {
      throw new PermanentSinkError("poison");
    });
    expect(result.outcome).toBe("left");
    expect(result.messages[0]?.settleError).toBeDefined();
    await fx.drain();
    expect(spy.of("+ACK", seq)).toHaveLength(0);
    const again = await fetchBatch(f, 1, 6000);
    expect(again[0]?.seq).toBe(seq);
    expect(again[0]?.info.deliveryCount).toBe(2);
    again[0]?.ack();
  });

  it(`Term: +TERM with its reason from 2.10.4, a bare +TERM before (on ${serverVersion()} ${versionAtLeast(serverVersion(), "2.10.4") ? "with the reason" : "bare"}); either really stops redelivery`, async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: ACK_WAIT_MS });
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    const [seq] = await publish(f, 1);
    const msgs = await fetchBatch(f, 1);
    const ack = new CommitThenAck({ connection: fx.nc, onTemporaryFailure: { action: "nak" } });
    const result = await ack.process(msgs, () => {
      throw new PermanentSinkError("poison");
    });
    expect(result).toMatchObject({ outcome: "termed", termed: 1 });
    await fx.drain();
    const term = spy.of("+TERM", seq);
    expect(term).toHaveLength(1);
    // The library reads the version from the connection; the test from the binary's report.
    expect(fx.nc.info?.version).toBe(serverVersion());
    expect(term[0]?.payload).toBe(versionAtLeast(serverVersion(), "2.10.4") ? "+TERM permanent failure: PermanentSinkError" : "+TERM");
    expect(await fetchBatch(f, 1, 3000)).toHaveLength(0);
    const info = await consumerInfo(f);
    expect(info.num_ack_pending).toBe(0);
    expect(info.num_redelivered).toBe(0);
  });

  it("confirmed ACKs wait for the server's reply: one reply for the batch, and it answers for every ACK before it", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: ACK_WAIT_MS, maxAckPending: 2000 });
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    // 1,000 frames: more than the client's buffer holds before it writes to the socket mid-batch.
    const n = 1000;
    await publish(f, n);
    const msgs = await fetchBatch(f, n, 5000);
    expect(msgs).toHaveLength(n);
    const ack = new CommitThenAck({ connection: fx.nc, confirmAck: { timeoutMs: 2000, retries: 1 } });
    const result = await ack.process(msgs, async () => undefined);
    expect(result.outcome).toBe("acked");
    expect(result.messages.every((m) => m.confirmed)).toBe(true);
    // Read at once: the server confirmed the last ACK, so it had taken every one before it.
    expect((await consumerInfo(f)).num_ack_pending).toBe(0);
    await fx.drain();
    const acks = spy.of("+ACK");
    expect(acks).toHaveLength(n);
    expect(acks.filter((x) => x.withReply).map((x) => x.streamSequence)).toEqual([msgs[n - 1]!.seq]);
  });

  it("a confirming connection whose client refuses the reply subscription (an inbox prefix that is no subject): every +ACK still leaves, plain, each result carries the client's error, and a second worker receives nothing", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: ACK_WAIT_MS });
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    // Both clients take the prefix at connect time and refuse it only as a subscription subject.
    const bad = await fx.srv.connect({ inboxPrefix: "_INBOX bad" });
    try {
      const seqs = await publish(f, 3);
      const msgs = await fetchBatch(f, 3);
      const ack = new CommitThenAck({ connection: bad, confirmAck: { timeoutMs: 1000, retries: 1 } });
      const result = await ack.process(msgs, async () => undefined);
      expect(result.outcome).toBe("acked");
      expect(result.messages.map((m) => [m.action, m.confirmed])).toEqual(seqs.map(() => ["acked", false]));
      const error = result.messages[0]!.settleError;
      expect(error).toBeInstanceOf(Error);
      if (!refusesSpaces(bad)) {
        // Older clients (nats 2.x, @nats-io 3.0) send the prefix to the server unchecked; no
        // answer ever comes, and that is reported too, never hidden.
        expect(result.messages.every((m) => m.settleError instanceof AckNotConfirmedError)).toBe(true);
        return;
      }
      expect(String(error)).toMatch(/subject/i);
      expect(result.messages.every((m) => m.settleError === error)).toBe(true);
      await bad.flush();
      await fx.drain();
      const acks = spy.of("+ACK");
      expect(acks.map((x) => x.streamSequence).sort((a, b) => a - b)).toEqual(seqs);
      expect(acks.some((x) => x.withReply)).toBe(false);
      // The ACKs landed: a second worker pulling past AckWait receives nothing.
      const rival = await startRival(jetstream(fx.rivalConn), f.stream, f.consumer);
      await sleep(ACK_WAIT_MS + 1500);
      await rival.stop();
      expect(rival.received).toEqual([]);
      expect((await consumerInfo(f)).num_ack_pending).toBe(0);
    } finally {
      await bad.close();
    }
  });

  it("partial results: the committed messages are acked, the failures settled by class", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: ACK_WAIT_MS });
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    const seqs = await publish(f, 4);
    const msgs = await fetchBatch(f, 4);
    const ack = new CommitThenAck({ onTemporaryFailure: { action: "nak", delayMs: 5000 } });
    const result = await ack.process(msgs, (batch) => ({
      failed: [
        { msg: batch[1]!, error: new TemporarySinkError("row lock") },
        { msg: batch[2]!, error: new PermanentSinkError("bad row") },
      ],
    }));
    expect(result).toMatchObject({ outcome: "partial", acked: 2, nacked: 1, termed: 1 });
    await fx.drain();
    expect(spy.forSequence(seqs[0]!).map((x) => x.kind)).toEqual(["+ACK"]);
    expect(spy.forSequence(seqs[1]!).map((x) => x.kind)).toEqual(["-NAK"]);
    expect(spy.forSequence(seqs[2]!).map((x) => x.kind)).toEqual(["+TERM"]);
    expect(spy.forSequence(seqs[3]!).map((x) => x.kind)).toEqual(["+ACK"]);
  });

  it("forConsumer fails closed before anything is delivered: BackOff, too-small AckWait, missing consumer, drift, push/ephemeral, non-explicit", async () => {
    const jsm = await jetstreamManager(fx.nc);
    const expectRefused = async (p: Promise<unknown>, reason: string) => {
      const err = await p.catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConsumerPolicyError);
      expect((err as ConsumerPolicyError).reason).toBe(reason);
      return err as ConsumerPolicyError;
    };
    const backoff = await createFixture(fx.nc, { ackWaitMs: 1000, backOffMs: [1000, 4000], maxDeliver: 5 });
    await publish(backoff, 2);
    const e1 = await expectRefused(
      CommitThenAck.forConsumer(jsm, backoff.stream, backoff.consumer, { inProgress: { enabled: true, intervalMs: 500 } }),
      "policy_violation",
    );
    expect(e1.violations.map((v) => v.code)).toEqual(["backoff_not_supported"]);
    // Even with heartbeats off, a BackOff changes NAK delays: refused in reject mode.
    await expectRefused(CommitThenAck.forConsumer(jsm, backoff.stream, backoff.consumer), "policy_violation");

    const small = await createFixture(fx.nc, { ackWaitMs: 4000 });
    await publish(small, 2);
    const e2 = await expectRefused(
      CommitThenAck.forConsumer(jsm, small.stream, small.consumer, { inProgress: { enabled: true, intervalMs: 5000 } }),
      "policy_violation",
    );
    expect(e2.violations.map((v) => v.code)).toEqual(["interval_too_close_to_ack_wait"]);
    expect(e2.message).toContain("80% of AckWait 4000 ms");
    await expectRefused(CommitThenAck.forConsumer(jsm, small.stream, small.consumer, { ackWaitMs: 30_000 }), "ack_wait_drift");

    await expectRefused(CommitThenAck.forConsumer(jsm, small.stream, "NO_SUCH_CONSUMER"), "consumer_not_found");
    await expectRefused(CommitThenAck.forConsumer(jsm, "NO_SUCH_STREAM", "X"), "consumer_not_found");

    const name = uniqueName("NOACK");
    await jsm.consumers.add(small.stream, { durable_name: name, ack_policy: AckPolicy.None });
    await expectRefused(CommitThenAck.forConsumer(jsm, small.stream, name), "ack_policy_not_explicit");
    const eph = await jsm.consumers.add(small.stream, { ack_policy: AckPolicy.Explicit, inactive_threshold: nanos(60_000) });
    await expectRefused(CommitThenAck.forConsumer(jsm, small.stream, eph.name), "not_durable");

    for (const f of [backoff, small]) {
      const info = await consumerInfo(f);
      expect(info.delivered.consumer_seq).toBe(0);
      expect(info.num_pending).toBe(2);
    }
    // And a good one passes, with the inspected timing.
    const ok = await CommitThenAck.forConsumer(jsm, small.stream, small.consumer, { inProgress: { enabled: true, intervalMs: 3000 }, ackWaitMs: 4000 });
    expect(ok.policy).toMatchObject({ enabled: true, intervalMs: 3000, timing: { ackWaitMs: 4000, source: "inspected" } });
  });

  it("a worker process killed mid-write: its message is redelivered after AckWait and committed by another worker", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: ACK_WAIT_MS });
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    const [seq] = await publish(f, 1);
    // node itself, not the tsx wrapper (which would survive its child being killed, or the reverse).
    const child = spawn(process.execPath, ["--import", "tsx", join(root, "test", "helpers", "worker-process.ts")], {
      cwd: root,
      env: { ...process.env, NATS_URL: fx.srv.url, STREAM: f.stream, CONSUMER: f.consumer, INTERVAL_MS: "500" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    try {
      const lines = createInterface({ input: child.stdout! });
      let writing = false;
      lines.on("line", (l) => {
        if (l.startsWith("writing")) writing = true;
      });
      await eventually(() => writing, "the child to start writing", 30_000);
      // It keeps the message alive with beats: wait for a few, then kill it without warning.
      await spy.waitFor((fr) => fr.filter((x) => x.kind === "+WPI" && x.streamSequence === seq).length >= 3, 10_000, "3 beats from the child");
      child.kill("SIGKILL");
      await exited;
      const killedAt = performance.now();
      const committed: number[] = [];
      const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, { inProgress: { enabled: true, intervalMs: 500 } });
      const shutdown = new AbortController();
      const consumer = await f.js.consumers.get(f.stream, f.consumer);
      let redeliveredAfter = 0;
      const run = ack.run(consumer, async (msgs: readonly JsMsg[]) => {
        redeliveredAfter = performance.now() - killedAt;
        for (const m of msgs) {
          expect(m.info.deliveryCount).toBe(2);
          committed.push(m.seq);
        }
      }, { signal: shutdown.signal });
      await eventually(() => committed.length === 1, "the redelivered commit", 15_000).finally(() => shutdown.abort());
      shutdown.abort();
      await run;
      expect(committed).toEqual([seq]);
      // Not before the last beat's AckWait could have run out.
      expect(redeliveredAfter).toBeGreaterThan(ACK_WAIT_MS - 600);
      await fx.drain();
      expect(spy.of("+ACK", seq).map((x) => x.deliveryCount)).toEqual([2]);
    } finally {
      child.kill("SIGKILL");
      await exited;
    }
  });

  it("shutdown mid-batch: nothing acked while the write may still commit; run returns at the bound; the late commit is acked", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: ACK_WAIT_MS });
    await using spy = await AckSpy.start(fx.spyConn, f.stream);
    const seqs = await publish(f, 3);
    const ack = new CommitThenAck({ inProgress: policy() });
    const consumer = await f.js.consumers.get(f.stream, f.consumer);
    const shutdown = new AbortController();
    let started = false;
    let ended = false;
    const run = ack.run(consumer, async () => {
      started = true;
      await sleep(3000); // ignores its signal, and outlives the 1 s shutdown bound
      ended = true;
    }, { batchSize: 3, signal: shutdown.signal });
    await eventually(() => started, "the write to start");
    await sleep(800);
    const t0 = performance.now();
    shutdown.abort();
    await run;
    const took = performance.now() - t0;
    // The write was abandoned at the 1 s bound: run returned without it, and nothing was sent for it.
    expect(ended).toBe(false);
    expect(took).toBeGreaterThan(900);
    expect(took).toBeLessThan(1000 + 1500);
    await fx.drain();
    expect(spy.of("+ACK")).toHaveLength(0);
    // Beats went on while it drained, up to the bound.
    const beatsBeforeBound = spy.of("+WPI").length;
    expect(beatsBeforeBound).toBeGreaterThanOrEqual(3);
    await ack.drain();
    expect(ended).toBe(true);
    await fx.drain();
    // Its late commit is acked (the server ignores an ACK of a delivery it no longer holds).
    for (const seq of seqs) expect(spy.forSequence(seq).filter((x) => x.kind !== "+WPI").map((x) => x.kind)).toEqual(["+ACK"]);
    expect(spy.of("-NAK")).toHaveLength(0);
  });

  it("run survives fetch errors: they are reported and counted, and the loop keeps trying", async () => {
    const f = await createFixture(fx.nc, { ackWaitMs: 30_000 });
    const errors: unknown[] = [];
    const metrics = new InMemoryMetrics();
    const ack = new CommitThenAck({ metrics });
    const consumer = await f.js.consumers.get(f.stream, f.consumer);
    const shutdown = new AbortController();
    const seen: number[] = [];
    const run = ack.run(consumer, async (msgs) => {
      for (const m of msgs) seen.push(m.seq);
    }, { signal: shutdown.signal, onError: (e, c) => errors.push(c.during === "fetch" && c.consecutiveFailures !== undefined ? "failed pull" : e) });
    await publish(f, 2);
    await eventually(() => seen.length === 2, "two commits");
    // Delete the consumer under the loop: pulls fail, the loop reports and keeps trying.
    await f.jsm.consumers.delete(f.stream, f.consumer);
    await eventually(() => (metrics.snapshot().counters[MetricNames.FETCH_FAILURES_TOTAL] ?? 0) >= 2, "two failed pulls", 20_000);
    shutdown.abort();
    await run;
    expect(metrics.snapshot().counters[MetricNames.FETCH_FAILURES_TOTAL]).toBeGreaterThanOrEqual(2);
    // Each failed pull went to onError too, with its count and pause.
    const failed = errors.filter((e) => e === "failed pull");
    expect(failed.length).toBeGreaterThanOrEqual(2);
    // And the subscription's own notice of the deletion, with the server's words, came first.
    const notices = errors.filter((e): e is Error => e instanceof Error && /its subscription reported consumer_deleted/.test(e.message));
    expect(notices.length).toBeGreaterThanOrEqual(1);
    expect(errors.indexOf(notices[0]!)).toBeLessThan(errors.indexOf("failed pull"));
    expect(metrics.snapshot().counters[MetricNames.MESSAGES_ACKED_TOTAL]).toBe(2);
  });
});
