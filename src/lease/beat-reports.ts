/**
 * What a heartbeat round leaves in a batch's books outside the lease: the metrics, the trace
 * and the lease events, for rounds sent from the main thread and for what the heartbeat thread
 * reports.
 */
import { errorName } from "../errors.js";
import { MetricNames } from "../telemetry/metric-names.js";
import type { MetricsRecorder } from "../telemetry/metrics-recorder.js";
import type { TraceRecorder } from "../telemetry/tracing.js";
import type { RoundResult } from "./heartbeat-round.js";
import { publishLeaseEvent, wantsLeaseEvent } from "./lease-events.js";
import type { RoundCounts, ThreadBeats, ThreadReading } from "./thread-beats.js";
/** Where a batch's books go: its metrics, its trace, the lease events. */
export interface ReportTarget {
  readonly metrics: MetricsRecorder;
  readonly trace: TraceRecorder;
  readonly batchId: number;
  readonly size: number;
}

/** A round's books: one success or one failure (the payloads are built only for listeners). */
export function reportRound(result: RoundResult, beat: number, durationMs: number, latenessMs: number, confirmed: boolean, t: ReportTarget): void {
  const { metrics, trace, batchId, size } = t;
  if (result.failed === 0) {
    metrics.count(MetricNames.IN_PROGRESS_SUCCESSES_TOTAL);
    trace.heartbeat(beat, 0);
    // The payload's closure is built only when someone listens: this runs once per beat.
    if (wantsLeaseEvent("heartbeatSent")) publishLeaseEvent("heartbeatSent", () => ({ batchId, batchSize: size, beat, durationMs, latenessMs, confirmed }));
    return;
  }
  metrics.count(MetricNames.IN_PROGRESS_FAILURES_TOTAL);
  trace.heartbeat(beat, result.failed);
  publishLeaseEvent("heartbeatFailed", () => ({
    batchId,
    batchSize: size,
    beat,
    failedMessages: result.failed,
    errorName: errorName(result.firstError),
    final: result.closed,
  }));
}

/** A failure of the heartbeat thread itself, for the whole batch: one failed beat. */
export function reportThreadFailed(name: string, final: boolean, beat: number, t: ReportTarget): void {
  t.metrics.count(MetricNames.IN_PROGRESS_FAILURES_TOTAL);
  publishLeaseEvent("heartbeatFailed", () => ({ batchId: t.batchId, batchSize: t.size, beat, failedMessages: t.size, errorName: name, final }));
}

/** `maxHeartbeats` was reached: counted and published. */
export function reportLimit(maxHeartbeats: number, onLimit: "continue" | "abort", t: ReportTarget): void {
  t.metrics.count(MetricNames.IN_PROGRESS_MAX_HEARTBEATS_REACHED_TOTAL);
  publishLeaseEvent("heartbeatLimit", () => ({ batchId: t.batchId, batchSize: t.size, maxHeartbeats, onLimit }));
}

/** The lease was lost: counted, traced and published. */
export function reportLeaseExpired(overdueMs: number, beats: number, t: ReportTarget): void {
  t.metrics.count(MetricNames.IN_PROGRESS_LEASE_EXPIRED_TOTAL);
  t.trace.leaseLost(overdueMs);
  publishLeaseEvent("leaseExpired", () => ({ batchId: t.batchId, batchSize: t.size, overdueMs, beats }));
}

/** Counts, traces and publishes what a reading shows; `first`: the beats counted before it. */
export function reportThreadReading(r: ThreadReading, first: number, confirmed: boolean, t: ReportTarget): void {
  const { metrics, trace, batchId, size } = t;
  if (r.successes > 0) {
    metrics.count(MetricNames.IN_PROGRESS_ATTEMPTS_TOTAL, r.successes);
    metrics.count(MetricNames.IN_PROGRESS_SUCCESSES_TOTAL, r.successes);
    for (let k = 1; k <= r.successes; k++) {
      const beat = Math.min(r.beats, first + k);
      trace.heartbeat(beat, 0);
      if (wantsLeaseEvent("heartbeatSent")) publishLeaseEvent("heartbeatSent", () => ({ batchId, batchSize: size, beat, durationMs: 0, latenessMs: 0, confirmed }));
    }
  }
  if (r.failures > 0) {
    metrics.count(MetricNames.IN_PROGRESS_ATTEMPTS_TOTAL, r.failures);
    metrics.count(MetricNames.IN_PROGRESS_FAILURES_TOTAL, r.failures);
    trace.heartbeat(r.beats, size);
    // Named by what the thread saw when each round failed: an outage, or replies that did not come.
    if (r.outages > 0) publishLeaseEvent("heartbeatFailed", () => ({ batchId, batchSize: size, beat: r.beats, failedMessages: size, errorName: "DisconnectedError", final: false }));
    if (r.failures > r.outages) publishLeaseEvent("heartbeatFailed", () => ({ batchId, batchSize: size, beat: r.beats, failedMessages: size, errorName: "TimeoutError", final: false }));
  }
}

/** How long after the reply timeout a late reading waits for the thread to record the replies. */
const LATE_REPLY_MARGIN_MS = 250;

/** Scratch for `readRounds` (no object per reading); read into locals before any sink is called. */
const rounds: RoundCounts = { successes: 0, failures: 0, outages: 0 };

/**
 * A batch under the thread watch, with metrics: counts the rounds the thread sent since the last
 * reading (summed with the other batches of the look: one sink call per name), or reports them as
 * a reading when one failed; returns the rounds sent in all. The rest of a reading (the limit, a
 * closed thread, the lease) the watch reads from the thread's summary.
 */
export function countThreadRounds(thread: ThreadBeats, first: number, t: ReportTarget): number {
  const beats = thread.readRounds(rounds);
  const { successes, failures, outages } = rounds;
  if (failures > 0) {
    reportThreadReading({ successes, failures, beats, lastBeatAgoMs: undefined, limit: false, outages }, first, false, t);
  } else if (successes > 0) {
    t.metrics.countSoon(MetricNames.IN_PROGRESS_ATTEMPTS_TOTAL, successes);
    t.metrics.countSoon(MetricNames.IN_PROGRESS_SUCCESSES_TOTAL, successes);
  }
  return beats;
}

/**
 * A confirmed round whose replies land after its batch finished: counted then (metrics only; the
 * batch's events and trace are over), so successes and failures still add up to the attempts.
 */
export function countRoundAnsweredLate(result: RoundResult, metrics: MetricsRecorder): void {
  metrics.count(result.failed === 0 ? MetricNames.IN_PROGRESS_SUCCESSES_TOTAL : MetricNames.IN_PROGRESS_FAILURES_TOTAL);
}

/**
 * A thread batch with confirmed beats, at its end: the rounds still waiting for their replies are
 * counted once the replies could have landed (`waitMs`, the reply timeout, and a margin for the
 * thread), metrics only. Returns the rounds sent in all.
 */
function countThreadRoundsAnsweredLate(thread: ThreadBeats, metrics: MetricsRecorder, waitMs: number): number {
  if (metrics.enabled) {
    setTimeout(() => {
      thread.readRounds(rounds);
      const { successes, failures } = rounds;
      metrics.count(MetricNames.IN_PROGRESS_ATTEMPTS_TOTAL, successes + failures);
      metrics.count(MetricNames.IN_PROGRESS_SUCCESSES_TOTAL, successes);
      metrics.count(MetricNames.IN_PROGRESS_FAILURES_TOTAL, failures);
    }, waitMs + LATE_REPLY_MARGIN_MS).unref();
  }
  return thread.beatsNow;
}

/**
 * A thread batch at its end, after its stop: the rounds sent since its last reading are counted
 * now, or, with confirmed beats (`confirmWaitMs`, their reply timeout), once answered.
 */
export function countLastThreadRounds(thread: ThreadBeats, first: number, t: ReportTarget, confirmWaitMs: number | undefined): number {
  return confirmWaitMs === undefined ? countThreadRounds(thread, first, t) : countThreadRoundsAnsweredLate(thread, t.metrics, confirmWaitMs);
}
