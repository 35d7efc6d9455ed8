/**
 * Notices a blocked event loop while batches are under supervision. A synchronous sink, a
 * CPU-bound transform or a long GC pause stops every timer of the process: no beat leaves from
 * the main thread, and a lease can pass unseen. The batches' own scheduler knows when its next
 * task (a beat, a lease check) was due: when it finally runs, or when a batch starts or settles
 * (which can be the first thing to run after the block), a task overdue by more than a quarter of
 * the shortest redelivery window among the batches in flight means the loop was blocked at least
 * that long — a stall: a metric per metrics sink and a diagnostics event with its duration and
 * the batches in flight. No timer of its own: a block during which nothing was due held back no
 * beat and goes unreported.
 */
import { DiagnosticsChannels, publishEvent } from "../telemetry/diagnostics.js";
import { MetricNames } from "../telemetry/metric-names.js";
import type { MetricsRecorder } from "../telemetry/metrics-recorder.js";
import type { Scheduler } from "./scheduler.js";

/** The share of the shortest redelivery window in flight a stall must exceed to be reported. */
export const STALL_SHARE = 0.25;
/** The watch never reports a shorter stall. */
const MIN_THRESHOLD_MS = 50;

/**
 * Published on {@link DiagnosticsChannels.EVENT_LOOP_STALL}: the event loop was blocked while
 * batches were under supervision.
 *
 * @example
 * ```ts
 * diagnostics.subscribe(DiagnosticsChannels.EVENT_LOOP_STALL, (e) => {
 *   const stall = e as EventLoopStallEvent;
 *   log.warn({ ms: stall.durationMs, batches: stall.batchesInFlight, onThread: stall.threadedBatches }, "event loop stalled");
 * });
 * ```
 */
export interface EventLoopStallEvent {
  /** How late the first held-back heartbeat task ran, in milliseconds: the loop was blocked at least this long. */
  readonly durationMs: number;
  /** The smallest lateness reported: a quarter of the shortest redelivery window in flight. */
  readonly thresholdMs: number;
  /** Batches under supervision when the stall was noticed. */
  readonly batchesInFlight: number;
  /** Of those, the batches beaten by the heartbeat thread (their leases were kept). */
  readonly threadedBatches: number;
}

/** One batch's part in the watch (linked into the watch's list while the batch is in flight). */
export interface StallWatcher {
  readonly windowMs: number;
  readonly metrics: MetricsRecorder;
  /** Beaten by the heartbeat thread (cleared when the batch falls back to main-thread beats). */
  threaded: boolean;
  /** The watch's list: set by the watch only. */
  prev?: StallWatcher | undefined;
  next?: StallWatcher | undefined;
  linked?: boolean;
}

const watches = new WeakMap<Scheduler, StallWatch>();

/**
 * The stall watch of one scheduler (the process-wide one, or a test's). Entering and leaving
 * cost a few field writes (a batch starts and settles thousands of times a second): the
 * batches in flight are an intrusive list, the threshold follows the shortest window that
 * entered since the watch was last empty, and what a stall reports is gathered only then.
 */
export class StallWatch {
  readonly #scheduler: Scheduler;
  #head: StallWatcher | undefined;
  #count = 0;
  #thresholdMs = Number.POSITIVE_INFINITY;
  /** A stall is reported once: lateness counts from here after a report. */
  #quietUntil = Number.NEGATIVE_INFINITY;

  private constructor(scheduler: Scheduler) {
    this.#scheduler = scheduler;
    scheduler.onTick = (now, due) => this.#check(now, due);
  }

  static of(scheduler: Scheduler): StallWatch {
    let w = watches.get(scheduler);
    if (w === undefined) {
      w = new StallWatch(scheduler);
      watches.set(scheduler, w);
    }
    return w;
  }

  /** A batch comes under supervision (a stall that ends with its start is reported first). */
  enter(w: StallWatcher, now: number): void {
    if (w.linked === true) return;
    if (this.#count > 0) this.check(now);
    w.linked = true;
    w.prev = undefined;
    w.next = this.#head;
    if (this.#head !== undefined) this.#head.prev = w;
    this.#head = w;
    this.#count += 1;
    const threshold = Math.max(MIN_THRESHOLD_MS, w.windowMs * STALL_SHARE);
    if (threshold < this.#thresholdMs) this.#thresholdMs = threshold;
  }

  /** A batch settled; a stall that is ending now (its work blocked the loop) is reported first. */
  leave(w: StallWatcher, now: number): void {
    if (w.linked !== true) return;
    this.check(now);
    w.linked = false;
    if (w.prev !== undefined) w.prev.next = w.next;
    else this.#head = w.next;
    if (w.next !== undefined) w.next.prev = w.prev;
    w.prev = w.next = undefined;
    this.#count -= 1;
    // Nothing in flight: the next batch sets the threshold anew.
    if (this.#count === 0) this.#thresholdMs = Number.POSITIVE_INFINITY;
  }

  /** Reports a stall if the scheduler's next task is overdue by more than the threshold. */
  check(now: number): void {
    const due = this.#scheduler.nextDue;
    if (due !== undefined) this.#check(now, due);
  }

  #check(now: number, due: number): void {
    if (this.#count === 0) return;
    const stalled = now - Math.max(due, this.#quietUntil);
    if (!(stalled > this.#thresholdMs)) return;
    this.#quietUntil = now;
    const sinks = new Set<MetricsRecorder>();
    let threaded = 0;
    for (let w = this.#head; w !== undefined; w = w.next) {
      sinks.add(w.metrics);
      if (w.threaded) threaded += 1;
    }
    for (const m of sinks) {
      m.count(MetricNames.IN_PROGRESS_EVENT_LOOP_STALLS_TOTAL);
      m.observe(MetricNames.IN_PROGRESS_EVENT_LOOP_STALL_SECONDS, stalled / 1000);
    }
    const batches = this.#count;
    const thresholdMs = this.#thresholdMs;
    publishEvent(DiagnosticsChannels.EVENT_LOOP_STALL, (): EventLoopStallEvent => ({
      durationMs: Math.round(stalled),
      thresholdMs: Math.round(thresholdMs),
      batchesInFlight: batches,
      threadedBatches: threaded,
    }));
  }
}
