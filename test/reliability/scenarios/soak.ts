/**
 * Scenario: a soak. Several workers, each with its own connection and its own
 * `CommitThenAck.run`, share one durable consumer. Every message carries its own plan (drawn
 * from a seeded random source): a write time from 0 to 3× AckWait, and possibly a temporary
 * failure (once or twice, NAKed with a small delay) or a permanent one (dead-lettered).
 *
 * Proves, over many messages: nothing lost, nothing acked before its commit, no beat after a
 * message's end; redeliveries happen only for the failures (each redelivery has a recorded
 * cause on the delivery before it) — long writes are carried by their beats, not redelivered;
 * each temporary failure costs exactly one NAK and one redelivery; every permanent failure is
 * in the dead-letter stream; no retry comes before its NAK's delay, and (with a MaxDeliver)
 * nothing ends on its last allowed delivery without a final frame or a copy.
 */
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { expect } from "vitest";
import {
  CommitThenAck,
  InMemoryMetrics,
  LeaseExpiredError,
  MetricNames,
  PermanentSinkError,
  TemporarySinkError,
  type FailedMessage,
} from "../../../src/index.js";
import { AckSpy } from "../../helpers/ack-spy.js";
import { createFixture, eventually, uniqueName } from "../../helpers/jetstream.js";
import { startServer } from "../../helpers/nats-server.js";
import { assertInvariants, checkInvariants, printSummary, type InvariantReport } from "../invariants.js";
import { DeadLetterLedger, IdempotentSink, keyOf } from "../sink.js";
import { RECONNECT, consumerInfoWhen, seededRandom, sleep, watchUnhandledRejections } from "../support.js";

export interface SoakOptions {
  readonly messages: number;
  readonly workers: number;
  readonly batchSize: number;
  readonly ackWaitMs: number;
  readonly intervalMs: number;
  readonly nakDelayMs: number;
  /** Share of messages whose write takes AckWait to 3× AckWait (the rest: mostly a few ms, some up to AckWait). */
  readonly longShare: number;
  readonly mediumShare: number;
  /** Share of messages that fail temporarily (one or two deliveries), and permanently. */
  readonly temporaryShare: number;
  readonly permanentShare: number;
  readonly seed: number;
  /**
   * The consumer's MaxDeliver (default unlimited). At 3, a message whose plan fails twice
   * commits on its last allowed delivery; the invariant check holds every message that reached
   * it to a final frame or a copy.
   */
  readonly maxDeliver?: number;
}

/** What a message asks of the sink. */
interface Plan {
  readonly i: number;
  readonly writeMs: number;
  /** The first N deliveries fail with TemporarySinkError. */
  readonly temporaryFailures: number;
  readonly permanent: boolean;
}

export interface SoakResult {
  readonly report: InvariantReport;
  readonly plans: readonly Plan[];
  readonly leaseExpired: number;
  readonly durationMs: number;
}

export function soakPlans(o: SoakOptions): Plan[] {
  const rnd = seededRandom(o.seed);
  const plans: Plan[] = [];
  for (let i = 1; i <= o.messages; i++) {
    const r = rnd();
    const writeMs =
      r < o.longShare
        ? Math.round(o.ackWaitMs * (1 + 2 * rnd()))
        : r < o.longShare + o.mediumShare
          ? Math.round(50 + (o.ackWaitMs - 50) * rnd())
          : Math.round(20 * rnd());
    const f = rnd();
    const permanent = f < o.permanentShare;
    const temporaryFailures = !permanent && f < o.permanentShare + o.temporaryShare ? (rnd() < 0.25 ? 2 : 1) : 0;
    plans.push({ i, writeMs, temporaryFailures, permanent });
  }
  return plans;
}

export async function soakScenario(o: SoakOptions): Promise<SoakResult> {
  const name = `soak ${o.messages} messages x${o.workers} workers`;
  await using srv = await startServer();
  const admin = await srv.connect(RECONNECT);
  const spyConn = await srv.connect(RECONNECT);
  const conns = await Promise.all(Array.from({ length: o.workers }, () => srv.connect(RECONNECT)));
  const unhandled = watchUnhandledRejections();
  const stop = new AbortController();
  const runs: Promise<void>[] = [];
  try {
    const f = await createFixture(admin, { ackWaitMs: o.ackWaitMs, maxAckPending: 10_000, ...(o.maxDeliver !== undefined ? { maxDeliver: o.maxDeliver } : {}) });
    const dlqStream = uniqueName("DLQ");
    const dlqSubject = `${dlqStream.toLowerCase()}.dead`;
    await f.jsm.streams.add({ name: dlqStream, subjects: [dlqSubject] });
    await using spy = await AckSpy.start(spyConn, f.stream);
    const plans = soakPlans(o);
    const published: number[] = [];
    const pubs = plans.map((p) => f.js.publish(f.subject, JSON.stringify(p)));
    for (const ack of await Promise.all(pubs)) published.push(ack.seq);
    published.sort((a, b) => a - b);

    const sink = new IdempotentSink();
    const ledger = new DeadLetterLedger();
    const metrics = conns.map(() => new InMemoryMetrics());
    const started = performance.now();
    for (const [w, conn] of conns.entries()) {
      const wname = `w${w + 1}`;
      const ack = await CommitThenAck.forConsumer(await jetstreamManager(conn), f.stream, f.consumer, {
        inProgress: { enabled: true, intervalMs: o.intervalMs, maxHeartbeats: 1000 },
        connection: conn,
        metrics: metrics[w]!,
        onTemporaryFailure: { action: "nak", delayMs: o.nakDelayMs },
        deadLetter: ledger.target(jetstream(conn), dlqSubject),
      });
      const consumer = await jetstream(conn).consumers.get(f.stream, f.consumer);
      runs.push(
        ack.run(consumer, async (msgs, ctx) => {
          const failed: FailedMessage[] = [];
          // One abort listener per batch, shared by its messages' writes. A lost lease is the
          // whole batch's: even a message already committed may be redelivered before its ACK.
          const aborted = new Promise<void>((resolve) =>
            ctx.signal.addEventListener(
              "abort",
              () => {
                const kind = ctx.signal.reason instanceof LeaseExpiredError ? "lease_expired" : "aborted";
                for (const m of msgs) sink.fail(keyOf(m), wname, kind);
                resolve();
              },
              { once: true },
            ),
          );
          await Promise.all(
            msgs.map(async (m) => {
              const plan = m.json<Plan>();
              const key = keyOf(m);
              sink.deliver(key, wname);
              await Promise.race([sleep(plan.writeMs), aborted]);
              if (ctx.signal.aborted) {
                failed.push({ msg: m, error: ctx.signal.reason });
              } else if (plan.permanent) {
                sink.fail(key, wname, "permanent");
                failed.push({ msg: m, error: new PermanentSinkError("the sink refuses this record") });
              } else if (key.dc <= plan.temporaryFailures) {
                sink.fail(key, wname, "temporary");
                failed.push({ msg: m, error: new TemporarySinkError("the sink is busy") });
              } else {
                sink.commit(key, wname);
              }
            }),
          );
          return { failed };
        }, { batchSize: o.batchSize, signal: stop.signal }),
      );
    }

    const done = (s: number): boolean => sink.committed(f.stream, s) !== undefined || ledger.find(f.stream, s) !== undefined;
    await eventually(() => published.every(done), `all ${o.messages} messages committed or dead-lettered`, 240_000, 100);
    const info = await consumerInfoWhen(admin, f.stream, f.consumer, (c) => c.num_ack_pending === 0 && c.num_pending === 0, "the consumer drained");
    const durationMs = performance.now() - started;
    stop.abort();
    await Promise.all(runs);
    await Promise.all(conns.map((c) => c.flush()));
    await spyConn.flush();

    const failureAt = (seq: number, dc: number) => sink.failures.find((x) => x.seq === seq && x.dc === dc);
    const report = checkInvariants({
      stream: f.stream,
      published,
      sink,
      deadLetters: ledger,
      frames: spy.frames,
      consumer: info,
      unhandled: unhandled.seen,
      ...(o.maxDeliver !== undefined ? { maxDeliver: o.maxDeliver } : {}),
      explainRedelivery: (seq, dc) => {
        const before = failureAt(seq, dc - 1);
        return before ? `${before.kind} failure of delivery ${dc - 1}` : undefined;
      },
    });
    assertInvariants(report, name);

    const sum = (metric: string): number => metrics.reduce((n, m) => n + (m.snapshot().counters[metric] ?? 0), 0);
    const temporary = sink.failures.filter((x) => x.kind === "temporary").length;
    const leaseLost = sink.failures.filter((x) => x.kind === "lease_expired" || x.kind === "aborted");
    const permanentPlans = plans.filter((p) => p.permanent).length;
    // Each temporary failure: one NAK, one redelivery. A lost lease (only on an overloaded
    // machine) may add one redelivery per message of its batch.
    expect(report.counts.naks).toBe(temporary);
    expect(sum(MetricNames.MESSAGES_NACKED_TOTAL)).toBe(temporary);
    expect(report.counts.redeliveries).toBeGreaterThanOrEqual(temporary);
    expect(report.counts.redeliveries).toBeLessThanOrEqual(temporary + leaseLost.length);
    if (leaseLost.length === 0) expect(report.counts.redeliveries).toBe(temporary);
    // Every NAK's retry was seen, and none came before its delay (rule 8 of the check).
    if (leaseLost.length === 0) expect(report.counts.nakRetries).toBe(temporary);
    expect(temporary).toBe(plans.reduce((n, p) => n + p.temporaryFailures, 0));
    // Permanent failures are dead-lettered once each, and the copies are in the stream. With a
    // MaxDeliver, a lease lost on a message's last allowed delivery (only on an overloaded
    // machine) dead-letters it too: nothing would bring it back.
    const permanentSeqs = new Set(published.filter((_, idx) => plans[idx]!.permanent));
    const lostOnLast = new Set(leaseLost.filter((x) => o.maxDeliver !== undefined && o.maxDeliver > 0 && x.dc >= o.maxDeliver).map((x) => x.seq));
    for (const seq of permanentSeqs) expect(ledger.find(f.stream, seq), `permanent seq ${seq} dead-lettered`).toBeDefined();
    for (const seq of ledger.sequences(f.stream)) {
      expect(permanentSeqs.has(seq) || lostOnLast.has(seq), `seq ${seq} dead-lettered without a permanent failure or a lease lost on its last delivery`).toBe(true);
    }
    if (lostOnLast.size === 0) expect(report.counts.deadLettered).toBe(permanentPlans);
    expect((await f.jsm.streams.info(dlqStream)).state.messages).toBe(report.counts.deadLettered);
    expect(report.counts.committed).toBe(o.messages - report.counts.deadLettered);
    // Duplicates only where a lease was lost.
    const lostSeqs = new Set(leaseLost.map((x) => x.seq));
    for (const d of report.duplicates) expect(lostSeqs.has(d.seq), `seq ${d.seq} committed twice: ${d.attempts.join(", ")}`).toBe(true);
    // Long writes were carried by beats: each got at least one.
    plans.forEach((p, idx) => {
      if (p.writeMs >= o.ackWaitMs && !p.permanent) expect(spy.of("+WPI", published[idx]).length, `beats for seq ${published[idx]}`).toBeGreaterThanOrEqual(1);
    });
    expect(sum(MetricNames.IN_PROGRESS_FAILURES_TOTAL)).toBe(0);
    expect(sum(MetricNames.MESSAGES_EXHAUSTED_TOTAL)).toBe(0);

    const leaseExpired = sum(MetricNames.IN_PROGRESS_LEASE_EXPIRED_TOTAL);
    printSummary(name, report, {
      nacked: sum(MetricNames.MESSAGES_NACKED_TOTAL),
      temporaryFailures: temporary,
      permanentFailures: permanentPlans,
      longWrites: plans.filter((p) => p.writeMs >= o.ackWaitMs).length,
      beatRounds: sum(MetricNames.IN_PROGRESS_ATTEMPTS_TOTAL),
      leaseExpired,
      leaseLostMessages: leaseLost.length,
      durationMs: Math.round(durationMs),
    });
    return { report, plans, leaseExpired, durationMs };
  } finally {
    stop.abort();
    await Promise.allSettled(runs);
    unhandled.stop();
    await Promise.allSettled([admin.close(), spyConn.close(), ...conns.map((c) => c.close())]);
  }
}
