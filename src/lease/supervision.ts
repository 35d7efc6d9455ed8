/**
 * The heartbeat supervision of one batch: a task of the shared scheduler that sends bounded
 * rounds, keeps the lease, and aborts the work's signal when the lease is lost or the limit
 * asks for it.
 */
import type { JsMsg } from "@nats-io/jetstream";
import { errorName, HeartbeatLimitError, LeaseExpiredError } from "../errors.js";
import type { VerifiedInProgressPolicy } from "../policy/in-progress-policy.js";
import { windowFor, windowIsShared } from "../policy/redelivery-window.js";
import { deliveryCount } from "../nats/message-access.js";
import { MetricNames } from "../telemetry/metric-names.js";
import type { MetricsRecorder } from "../telemetry/metrics-recorder.js";
import type { MetricsSink } from "../telemetry/metrics-sink.js";
import type { TraceRecorder } from "../telemetry/tracing.js";
import { sendConfirmedRound, sendRound, type ClosableConnection, type RequestConnection, type RoundResult } from "./heartbeat-round.js";
import { publishLeaseEvent, wantsLeaseEvent } from "./lease-events.js";
import { LeaseTracker } from "./lease-tracker.js";
import { epochMs, isEpochMs } from "./received-at.js";
import { COALESCE_MS, type Scheduler, type ScheduledTask, type SchedulerEntry } from "./scheduler.js";
import type { Lease, WithInProgressOptions } from "./work-context.js";
import type { SupervisionHandle, WorkRun } from "./work-run.js";

const MAX_CONFIRM_TIMEOUT_MS = 5000;

/** The checked options a supervision runs with. */
export interface SupervisionOptions {
  readonly signal: AbortSignal | undefined;
  readonly metrics: MetricsSink | undefined;
  readonly receivedAt: WithInProgressOptions["receivedAt"];
  readonly onLimit: "continue" | "abort";
  readonly confirm: { readonly connection: RequestConnection; readonly timeoutMs: number | undefined } | undefined;
  readonly connection: ClosableConnection | undefined;
  readonly requireProgress: boolean;
}

/** The heartbeat supervision of one batch: a task of the shared scheduler. */
export class Supervision implements ScheduledTask, SupervisionHandle {
  beats = 0;
  schedulerEntry: SchedulerEntry | undefined = undefined;

  readonly #msgs: readonly JsMsg[];
  readonly #policy: VerifiedInProgressPolicy;
  readonly #opts: SupervisionOptions;
  readonly #scheduler: Scheduler;
  readonly #metrics: MetricsRecorder;
  readonly #run: Pick<WorkRun, "abort">;
  readonly #tracker: LeaseTracker;
  readonly #batchId: number;
  readonly #trace: TraceRecorder;
  #lease: Lease | undefined;
  #nextBeat: number | undefined;
  #beating = true;
  #finished = false;
  #expired = false;
  #progressed = false;
  #waitingForProgress = false;
  #inFlight = 0;
  /** The clock reading taken when the batch was set up, for the first schedule. */
  readonly #createdAt: number;

  constructor(
    msgs: readonly JsMsg[],
    policy: VerifiedInProgressPolicy,
    opts: SupervisionOptions,
    scheduler: Scheduler,
    metrics: MetricsRecorder,
    run: Pick<WorkRun, "abort">,
    batchId: number,
    trace: TraceRecorder,
  ) {
    this.#batchId = batchId;
    this.#trace = trace;
    this.#msgs = msgs;
    this.#policy = policy;
    this.#opts = opts;
    this.#scheduler = scheduler;
    this.#metrics = metrics;
    this.#run = run;

    const nowMono = scheduler.clock.now();
    this.#createdAt = nowMono;
    const nowWall = Date.now();
    // A receive time in the future (clock skew) counts as now.
    const deliveredAt = (wall: number | undefined): number => (wall === undefined ? nowMono : nowMono - Math.max(0, nowWall - wall));
    const receivedAt = opts.receivedAt;
    const batchWall = receivedAt === undefined || typeof receivedAt === "function" ? undefined : epochMs(receivedAt, "options.receivedAt");
    // Without BackOff every message has the same window, whatever its delivery count.
    const shared = windowIsShared(policy) ? windowFor(policy, undefined) : undefined;
    if (shared !== undefined && typeof receivedAt !== "function") {
      // One window and one delivery time for the whole batch: constant work, whatever its size.
      this.#tracker = new LeaseTracker(shared, deliveredAt(batchWall), msgs.length);
    } else {
      const windows = new Float64Array(msgs.length);
      const delivered = new Float64Array(msgs.length);
      for (let i = 0; i < msgs.length; i++) {
        const m = msgs[i]!;
        windows[i] = shared ?? windowFor(policy, deliveryCount(m));
        let wall = batchWall;
        if (typeof receivedAt === "function") {
          let v: number | Date | undefined;
          try {
            v = receivedAt(m, i);
          } catch (err) {
            throw new TypeError(`options.receivedAt(msgs[${i}]) threw: it must return epoch milliseconds, a Date or undefined`, { cause: err });
          }
          // Epoch milliseconds pass as they are (no message string built per message).
          wall = v === undefined ? batchWall : isEpochMs(v) ? v : epochMs(v, `options.receivedAt(msgs[${i}])`);
        }
        delivered[i] = deliveredAt(wall);
      }
      this.#tracker = new LeaseTracker(windows, delivered);
    }
    // Every message is refreshed at least every intervalMs, counting from its delivery.
    this.#nextBeat = Math.max(nowMono, this.#tracker.oldestRefresh() + policy.intervalMs);
  }

  /** The batch lease, made on first use. */
  get lease(): Lease {
    if (this.#lease === undefined) {
      const tracker = this.#tracker;
      const clock = this.#scheduler.clock;
      const self = this;
      this.#lease = {
        get deadline() {
          return Date.now() + (tracker.deadline - clock.now());
        },
        remainingMs: () => tracker.deadline - clock.now(),
        get expired() {
          return self.#expired;
        },
      };
    }
    return this.#lease;
  }

  start(): void {
    this.#metrics.gaugeAdd(MetricNames.CURRENT_IN_PROGRESS_BATCHES_ACTIVE, 1);
    // Set up moments ago, in the same call: its clock reading still stands.
    this.#reschedule(this.#createdAt);
  }

  /** The work settled: no beat may leave after this. */
  finish(): void {
    if (this.#finished) return;
    this.#finished = true;
    this.#beating = false;
    this.#scheduler.cancel(this);
    this.#metrics.gaugeAdd(MetricNames.CURRENT_IN_PROGRESS_BATCHES_ACTIVE, -1);
    this.#metrics.observe(MetricNames.IN_PROGRESS_HEARTBEATS_PER_BATCH, this.beats);
  }

  /** No more beats (abort, limit, closed connection); the lease is still watched. */
  stopBeating(): void {
    this.#beating = false;
    this.#nextBeat = undefined;
    this.#reschedule();
  }

  progress(): void {
    this.#progressed = true;
    if (this.#waitingForProgress && this.#beating && !this.#finished) {
      this.#waitingForProgress = false;
      this.#nextBeat = this.#scheduler.clock.now();
      this.#reschedule();
    }
  }

  run(now: number, due: number): void {
    if (this.#finished || this.#expired) return;
    this.#metrics.observe(MetricNames.IN_PROGRESS_TICK_LATENESS_SECONDS, Math.max(0, now - due) / 1000);

    if (now >= this.#tracker.deadline) {
      // A confirmed round sent before the deadline may still prove the lease; decide when it lands.
      if (this.#inFlight === 0) {
        this.#expire(now);
        return;
      }
    } else if (this.#beating && this.#nextBeat !== undefined && now + COALESCE_MS >= this.#nextBeat) {
      // Up to COALESCE_MS early: beats that fall close together leave in one tick.
      if (this.#opts.requireProgress && !this.#progressed) {
        this.#metrics.count(MetricNames.IN_PROGRESS_BEATS_SKIPPED_TOTAL);
        this.#waitingForProgress = true;
        this.#nextBeat = undefined;
      } else {
        this.#beat(now, Math.max(0, now - due));
      }
    }
    this.#reschedule();
  }

  #beat(now: number, latenessMs: number): void {
    this.beats += 1;
    this.#progressed = false;
    const beat = this.beats;
    this.#metrics.count(MetricNames.IN_PROGRESS_ATTEMPTS_TOTAL);
    const clock = this.#scheduler.clock;
    const confirm = this.#opts.confirm;
    // Tentative; a failed round brings it forward, a closed connection or the limit clears it.
    this.#nextBeat = now + this.#policy.intervalMs;

    if (confirm) {
      const timeoutMs = confirm.timeoutMs ?? Math.min(MAX_CONFIRM_TIMEOUT_MS, Math.max(1, Math.floor(this.#policy.intervalMs / 2)));
      this.#inFlight += 1;
      void sendConfirmedRound(this.#msgs, confirm.connection, timeoutMs).then((result) => {
        this.#inFlight -= 1;
        if (this.#finished) return;
        this.#record(result, beat, now, clock.now() - now, latenessMs, true);
        this.#reschedule();
      });
    } else {
      const result = sendRound(this.#msgs, this.#opts.connection);
      this.#record(result, beat, now, clock.now() - now, latenessMs, false);
    }

    if (this.beats >= this.#policy.maxHeartbeats && this.#beating) this.#limitReached();
  }

  #record(result: RoundResult, beat: number, sentAt: number, durationMs: number, latenessMs: number, confirmed: boolean): void {
    this.#metrics.observe(MetricNames.IN_PROGRESS_HEARTBEAT_SECONDS, durationMs / 1000);
    if (result.refreshed === "all") this.#tracker.refreshAll(sentAt);
    else for (const i of result.refreshed) this.#tracker.refresh(i, sentAt);
    if (result.released !== undefined) for (const i of result.released) this.#tracker.release(i);
    if (result.refreshed !== "all" || result.released !== undefined) this.#tracker.settle();
    // The work settled every message itself: nothing is left to keep alive, so no more rounds
    // (they would send nothing, yet count towards maxHeartbeats and its onLimit).
    if (result.released !== undefined && this.#tracker.deadline === Number.POSITIVE_INFINITY && this.#beating) this.stopBeating();
    if (result.failed === 0) {
      this.#metrics.count(MetricNames.IN_PROGRESS_SUCCESSES_TOTAL);
      this.#trace.heartbeat(beat, 0);
      // The payload's closure is built only when someone listens: this runs once per beat.
      if (wantsLeaseEvent("heartbeatSent")) publishLeaseEvent("heartbeatSent", () => ({
        batchId: this.#batchId,
        batchSize: this.#msgs.length,
        beat,
        durationMs,
        latenessMs,
        confirmed,
      }));
      return;
    }
    this.#metrics.count(MetricNames.IN_PROGRESS_FAILURES_TOTAL);
    this.#trace.heartbeat(beat, result.failed);
    publishLeaseEvent("heartbeatFailed", () => ({
      batchId: this.#batchId,
      batchSize: this.#msgs.length,
      beat,
      failedMessages: result.failed,
      errorName: errorName(result.firstError),
      final: result.closed,
    }));
    if (result.closed) {
      this.stopBeating();
    } else if (this.#beating && this.#nextBeat !== undefined) {
      // Retry before the lease runs out rather than a full interval later.
      const now = this.#scheduler.clock.now();
      const halfway = now + Math.max(0, (this.#tracker.deadline - now) / 2);
      this.#nextBeat = Math.min(this.#nextBeat, Math.max(now, halfway));
    }
  }

  #limitReached(): void {
    const onLimit = this.#opts.onLimit;
    this.#metrics.count(MetricNames.IN_PROGRESS_MAX_HEARTBEATS_REACHED_TOTAL);
    publishLeaseEvent("heartbeatLimit", () => ({
      batchId: this.#batchId,
      batchSize: this.#msgs.length,
      maxHeartbeats: this.#policy.maxHeartbeats,
      onLimit,
    }));
    this.#beating = false;
    this.#nextBeat = undefined;
    if (onLimit === "abort") this.#run.abort(new HeartbeatLimitError(this.#policy.maxHeartbeats), true);
  }

  #expire(now: number): void {
    this.#expired = true;
    this.#beating = false;
    this.#nextBeat = undefined;
    const overdueMs = now - this.#tracker.deadline;
    this.#metrics.count(MetricNames.IN_PROGRESS_LEASE_EXPIRED_TOTAL);
    this.#trace.leaseLost(overdueMs);
    publishLeaseEvent("leaseExpired", () => ({
      batchId: this.#batchId,
      batchSize: this.#msgs.length,
      overdueMs,
      beats: this.beats,
    }));
    this.#scheduler.cancel(this);
    // The work goes on: it decides what a lost lease means (usually: do not commit).
    this.#run.abort(new LeaseExpiredError(overdueMs), false);
  }

  #reschedule(now?: number): void {
    if (this.#finished || this.#expired) return;
    const lease = this.#tracker.deadline;
    let due = this.#nextBeat !== undefined && this.#beating ? Math.min(this.#nextBeat, lease) : lease;
    // While a confirmed round is in flight past the deadline, its reply decides; look again shortly.
    if (this.#inFlight > 0 && due <= this.#scheduler.clock.now()) due = this.#scheduler.clock.now() + 10;
    // Nothing left to watch (every message settled by the work, no beat due): no timer.
    if (due === Number.POSITIVE_INFINITY) this.#scheduler.cancel(this);
    else this.#scheduler.schedule(this, due, now);
  }
}
