/**
 * Beats for messages a loop holds before their write starts (those that arrived in a pull that
 * is still open). JetStream counts a message's deadline from its delivery, so a message that
 * waits for its batch would otherwise spend its lease there. These beats keep it from arrival
 * to the start of its write; the write's own supervision (and its `maxHeartbeats` budget)
 * starts from the last of them. One scheduler task for every held message of a loop.
 */
import type { JsMsg } from "@nats-io/jetstream";
import { MetricNames } from "../telemetry/metric-names.js";
import type { MetricsRecorder } from "../telemetry/metrics-recorder.js";
import { sendRound, type ClosableConnection } from "./heartbeat-round.js";
import type { Scheduler, ScheduledTask, SchedulerEntry } from "./scheduler.js";

/** A held message and when its lease was last refreshed (its delivery or its last beat), monotonic ms. */
/** Keeps the leases of held messages until their write starts. */
export class HoldingBeats implements ScheduledTask {
  schedulerEntry: SchedulerEntry | undefined = undefined;
  readonly #intervalMs: number;
  readonly #scheduler: Scheduler;
  readonly #metrics: MetricsRecorder;
  readonly #connection: ClosableConnection | undefined;
  /** Each held message and when its lease was last refreshed (monotonic ms): no object per message. */
  readonly #held = new Map<JsMsg, number>();

  constructor(intervalMs: number, scheduler: Scheduler, metrics: MetricsRecorder, connection: ClosableConnection | undefined) {
    this.#intervalMs = intervalMs;
    this.#scheduler = scheduler;
    this.#metrics = metrics;
    this.#connection = connection;
  }

  /** Messages held now. */
  get size(): number {
    return this.#held.size;
  }

  /** Starts keeping `m`, delivered at `receivedAt` (monotonic ms). */
  hold(m: JsMsg, receivedAt: number): void {
    const wasEmpty = this.#held.size === 0;
    this.#held.set(m, receivedAt);
    if (wasEmpty) this.#scheduler.schedule(this, receivedAt + this.#intervalMs);
  }

  /**
   * Stops keeping `m` (its write starts, or it was dropped as a duplicate delivery) and returns
   * when its lease was last refreshed (monotonic ms), `undefined` when it was not held.
   */
  release(m: JsMsg): number | undefined {
    const refreshedAt = this.#held.get(m);
    if (refreshedAt === undefined) return undefined;
    this.#held.delete(m);
    if (this.#held.size === 0) this.#scheduler.cancel(this);
    return refreshedAt;
  }

  run(now: number): void {
    // Messages refreshed less than half an interval ago wait for the next tick; the others are
    // beaten together, in one round (one socket write).
    const due: JsMsg[] = [];
    const dueAt: number[] = [];
    let oldestLeft = Number.POSITIVE_INFINITY;
    for (const [m, refreshedAt] of this.#held) {
      if (now - refreshedAt >= this.#intervalMs / 2) {
        due.push(m);
        dueAt.push(refreshedAt);
      } else if (refreshedAt < oldestLeft) oldestLeft = refreshedAt;
    }
    if (due.length > 0) {
      const result = sendRound(due, this.#connection);
      const refreshed = result.refreshed === "all" ? undefined : new Set(result.refreshed);
      let sent = 0;
      for (let i = 0; i < due.length; i++) {
        let refreshedAt = dueAt[i]!;
        if (refreshed === undefined || refreshed.has(i)) {
          refreshedAt = now;
          this.#held.set(due[i]!, now);
          sent += 1;
        }
        if (refreshedAt < oldestLeft) oldestLeft = refreshedAt;
      }
      if (sent > 0) this.#metrics.count(MetricNames.IN_PROGRESS_HELD_BEATS_TOTAL, sent);
      if (result.failed > 0) this.#metrics.count(MetricNames.IN_PROGRESS_FAILURES_TOTAL);
      // Nothing can be sent any more; the loop ends with the connection.
      if (result.closed) return;
      // A failed beat is tried again soon rather than a whole interval later.
      if (result.failed > 0 && !result.closed) oldestLeft = Math.min(oldestLeft, now - this.#intervalMs / 2);
    }
    if (this.#held.size > 0 && oldestLeft !== Number.POSITIVE_INFINITY) this.#scheduler.schedule(this, Math.max(now + 1, oldestLeft + this.#intervalMs), now);
  }

  /** Stops every beat (the loop is over; anything still held was released or handed on). */
  dispose(): void {
    this.#held.clear();
    this.#scheduler.cancel(this);
  }
}
