/**
 * Notices a blocked event loop while batches are under supervision. A synchronous sink, a
 * CPU-bound transform or a long GC pause stops every timer of the process: no beat leaves from
 * the main thread, and a lease can pass unseen. A task of the batches' scheduler, due every
 * eighth of the threshold, measures how late it runs; a tick (or a batch starting or finishing,
 * which can be the first thing to run after the block) that finds it overdue by more than a
 * quarter of the shortest redelivery window among the batches in flight reports a stall: a
 * metric per metrics sink and a diagnostics event with its duration and the batches in flight.
 */
import { DiagnosticsChannels, publishEvent } from "../telemetry/diagnostics.js";
import { MetricNames } from "../telemetry/metric-names.js";
import type { MetricsRecorder } from "../telemetry/metrics-recorder.js";
import type { Scheduler, ScheduledTask, SchedulerEntry } from "./scheduler.js";

/** The share of the shortest redelivery window in flight a stall must exceed to be reported. */
export const STALL_SHARE = 0.25;
/** The watch never reports a shorter stall. */
const MIN_THRESHOLD_MS = 50;
/**
 * The watch looks every eighth of the threshold: a stall is measured from when its tick was
 * due, so it is under-measured by at most this much.
 */
const LOOKS_PER_THRESHOLD = 8;

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
  /** How long the event loop could not run the heartbeat timer (at least), in milliseconds. */
  readonly durationMs: number;
  /** The smallest stall reported: a quarter of the shortest redelivery window in flight. */
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
  readonly threaded: boolean;
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
export class StallWatch implements ScheduledTask {
  schedulerEntry: SchedulerEntry | undefined = undefined;
  readonly passive = true;
  readonly #scheduler: Scheduler;
  #head: StallWatcher | undefined;
  #count = 0;
  #thresholdMs = Number.POSITIVE_INFINITY;

  private constructor(scheduler: Scheduler) {
    this.#scheduler = scheduler;
  }

  static of(scheduler: Scheduler): StallWatch {
    let w = watches.get(scheduler);
    if (w === undefined) {
      w = new StallWatch(scheduler);
      watches.set(scheduler, w);
    }
    return w;
  }

  /** A batch comes under supervision. Call it before the batch schedules its own tick. */
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
    if (threshold < this.#thresholdMs) {
      this.#thresholdMs = threshold;
      this.#arm(now);
    } else if (this.#count === 1) {
      this.#arm(now);
    }
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
    if (this.#count === 0) {
      // Nothing in flight: no watch, no timer of its own; the next batch sets the threshold anew.
      this.#thresholdMs = Number.POSITIVE_INFINITY;
      this.#scheduler.cancel(this);
    }
  }

  run(now: number, due: number): void {
    this.#report(now, due);
    if (this.#count > 0) this.#arm(now);
  }

  /** Reports a stall if the watch's tick is overdue by more than the threshold. */
  check(now: number): void {
    const entry = this.schedulerEntry;
    if (entry === undefined || entry.index < 0 || this.#count === 0) return;
    if (this.#report(now, entry.due)) this.#arm(now);
  }

  #report(now: number, due: number): boolean {
    const stalled = now - due;
    if (!(stalled > this.#thresholdMs)) return false;
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
    return true;
  }

  #arm(now: number): void {
    this.#scheduler.schedule(this, now + this.#thresholdMs / LOOKS_PER_THRESHOLD, now);
  }
}
