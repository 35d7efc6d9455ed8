/**
 * The heartbeat supervision of one batch: a task of the shared scheduler that sends bounded
 * rounds, keeps the lease, and aborts the work's signal when the lease is lost or the limit
 * asks for it.
 */
import type { JsMsg } from "@nats-io/jetstream";
import { ConnectionClosedError, errorName, HeartbeatLimitError, LeaseExpiredError } from "../errors.js";
import type { VerifiedInProgressPolicy } from "../policy/in-progress-policy.js";
import { windowFor, windowIsShared } from "../policy/redelivery-window.js";
import { batchConnectionClosed, closerOf } from "../nats/connection-state.js";
import { MetricNames } from "../telemetry/metric-names.js";
import type { MetricsRecorder } from "../telemetry/metrics-recorder.js";
import type { MetricsSink } from "../telemetry/metrics-sink.js";
import type { TraceRecorder } from "../telemetry/tracing.js";
import { sendConfirmedRound, sendRound, type ClosableConnection, type RequestConnection, type RoundResult } from "./heartbeat-round.js";
import { countLastThreadRounds, countRoundAnsweredLate, countThreadRounds, reportLeaseExpired, reportLimit, reportRound, reportThreadFailed, reportThreadReading, type ReportTarget } from "./beat-reports.js";
import { trackBatch } from "./batch-deadlines.js";
import type { LeaseTracker } from "./lease-tracker.js";
import type { CheckedThreadConnection } from "./heartbeat-thread-options.js";
import { COALESCE_MS, joinWindowMs, type Cohort, type Scheduler, type ScheduledTask, type SchedulerEntry } from "./scheduler.js";
import { StallWatch, type StallWatcher } from "./stall-watch.js";
import { supervisionCohort } from "./supervision-cohort.js";
import { ThreadBeats } from "./thread-beats.js";
import { WatchSeat } from "./thread-watch.js";
import { BatchLease } from "./batch-lease.js";
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
  /** The heartbeat thread's connection: beats come from the thread (`undefined`: from the main thread). */
  readonly thread: CheckedThreadConnection | undefined;
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
  readonly #trace: TraceRecorder;
  /** Where its rounds are counted, traced and published. */
  readonly #reports: ReportTarget;
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
  /** The batch on the heartbeat thread, when it beats there. */
  #thread: ThreadBeats | undefined;
  #lastThreadBeat = Number.NEGATIVE_INFINITY;
  /** Settling: the books are closed, nothing is aborted any more (the work is over). */
  #finishing = false;
  readonly #stall: StallWatcher;
  readonly #stallWatch: StallWatch;
  /** The lease window less the interval, when every message has the same window. */
  readonly #slackMs: number | undefined;
  /** Thread mode: its seat under the watch that looks after it instead of its own task (thread-watch.ts). */
  #seat: WatchSeat | undefined;

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
    this.#trace = trace;
    this.#msgs = msgs;
    this.#policy = policy;
    this.#opts = opts;
    this.#scheduler = scheduler;
    this.#metrics = metrics;
    this.#run = run;
    this.#reports = { metrics, trace, batchId, size: msgs.length };
    this.earlyMs = joinWindowMs(policy.intervalMs);
    const nowMono = scheduler.clock.now();
    this.#createdAt = nowMono;
    // Without BackOff every message has the same window, whatever its delivery count.
    const shared = windowIsShared(policy) ? windowFor(policy, undefined) : undefined;
    this.#tracker = trackBatch(msgs, policy, opts.receivedAt, shared, nowMono);
    // Every message is refreshed at least every intervalMs, counting from its delivery.
    this.#nextBeat = Math.max(nowMono, this.#tracker.oldestRefresh() + policy.intervalMs);
    this.#stall = { windowMs: shared ?? windowFor(policy, undefined), metrics, threaded: opts.thread !== undefined };
    this.#slackMs = shared === undefined ? undefined : shared - policy.intervalMs;
    this.#stallWatch = StallWatch.of(scheduler);
  }

  /** The batch lease, made on first use. */
  get lease(): Lease {
    return (this.#lease ??= new BatchLease(this.#tracker, this.#scheduler.clock, this));
  }

  /** The lease's deadline passed without an accepted heartbeat. */
  get expired(): boolean {
    return this.#expired;
  }

  start(): void {
    this.#metrics.gaugeAdd(MetricNames.CURRENT_IN_PROGRESS_BATCHES_ACTIVE, 1);
    const now = this.#createdAt;
    // Before the batch's own tick: the watch's earlier one arms the timer once.
    this.#stallWatch.enter(this.#stall, now);
    if (this.#opts.thread !== undefined) this.#startThread(now);
    // Set up moments ago, in the same call: its clock reading still stands.
    this.#reschedule(now);
  }

  /**
   * The work settled: no beat may leave after this. A deadline that passed while nothing could
   * run (the work blocked the event loop) is a lost lease even though no tick saw it.
   */
  finish(): void {
    if (this.#finished) return;
    const now = this.#scheduler.clock.now();
    this.#stallWatch.leave(this.#stall, now);
    this.#finishing = true;
    this.#seat?.leave();
    if (this.#thread !== undefined) this.#stopThread(this.#thread, now);
    if (!this.#expired && this.#inFlight === 0 && now > this.#tracker.deadline + this.#confirmGraceMs()) this.#expire(now, false);
    this.#finished = true;
    this.#beating = false;
    this.#scheduler.cancel(this);
    this.#metrics.gaugeAdd(MetricNames.CURRENT_IN_PROGRESS_BATCHES_ACTIVE, -1);
    this.#metrics.observe(MetricNames.IN_PROGRESS_HEARTBEATS_PER_BATCH, this.beats);
  }

  /**
   * After `finish`: resolves once every `+WPI` the heartbeat thread sent for this batch reached
   * the server (bounded), so the final frame that follows cannot be overtaken by one on the
   * thread's connection — a `+WPI` after a NAK with a delay would reset the delay. At once for
   * main-thread beats (they share the frames' connection, in order).
   */
  quiet(): Promise<void> | undefined {
    const thread = this.#thread;
    if (thread === undefined) return undefined;
    this.#thread = undefined;
    return thread.quiet().then((failure) => {
      if (failure !== undefined) this.#notFlushed(failure);
    });
  }

  /**
   * The thread's beats were not confirmed to have reached the server before the final frame (a
   * slow or cut connection): one still on its way may follow it and cut a NAK's delay to AckWait.
   */
  #notFlushed(err: unknown): void {
    this.#threadFailed(errorName(err), true);
  }

  /** A failure of the thread itself, for the whole batch: one failed beat. */
  #threadFailed(name: string, final: boolean): void {
    reportThreadFailed(name, final, this.beats, this.#reports);
  }

  /** No more beats (abort, limit, closed connection); the lease is still watched. */
  stopBeating(): void {
    this.#beating = false;
    this.#nextBeat = undefined;
    this.#thread?.stop();
    this.#reschedule();
  }

  progress(): void {
    this.#thread?.progress();
    this.#progressed = true;
    if (this.#waitingForProgress && this.#beating && !this.#finished) {
      this.#waitingForProgress = false;
      this.#nextBeat = this.#scheduler.clock.now();
      this.#reschedule();
    }
  }

  run(now: number, due: number): void {
    const latenessMs = this.beginTick(now, due);
    if (latenessMs < 0) return;
    const result = this.sendPlainRound();
    this.completeTick(result, now, latenessMs, this.#scheduler.clock.now() - now);
  }

  /** Supervisions run together when they fall due in the same tick. */
  readonly cohort: Cohort = supervisionCohort;
  /** A beat due this soon joins a tick that runs anyway (`joinWindowMs`). */
  readonly earlyMs: number;

  /**
   * A tick up to its frames. Returns its lateness (ms) when a plain round is due, to be sent and
   * then completed by `completeTick`; -1 when the tick is done (expiry, thread, skip, confirmed).
   */
  beginTick(now: number, due: number): number {
    if (this.#finished || this.#expired) return -1;
    const latenessMs = Math.max(0, now - due);
    this.#metrics.observe(MetricNames.IN_PROGRESS_TICK_LATENESS_SECONDS, latenessMs / 1000);
    if (this.#thread !== undefined) {
      this.#runThreaded(now);
      if (this.#thread !== undefined || this.#finished || this.#expired) return -1;
    }

    if (now >= this.#tracker.deadline) {
      // A confirmed round sent before the deadline may still prove the lease; decide when it lands.
      if (this.#inFlight === 0) {
        this.#expire(now);
        return -1;
      }
    } else if (this.#beating && this.#nextBeat !== undefined && now + this.earlyMs >= this.#nextBeat) {
      // Up to earlyMs early: beats that fall close together leave in one tick.
      if (this.#opts.requireProgress && !this.#progressed) {
        this.#metrics.count(MetricNames.IN_PROGRESS_BEATS_SKIPPED_TOTAL);
        this.#waitingForProgress = true;
        this.#nextBeat = undefined;
      } else if (this.#beat(now, latenessMs)) {
        return latenessMs;
      }
    }
    this.#reschedule();
    return -1;
  }

  /** Counts a beat, sends a confirmed round; true for a plain one (the caller sends it). */
  #beat(now: number, latenessMs: number): boolean {
    this.beats += 1;
    this.#progressed = false;
    const beat = this.beats;
    this.#metrics.count(MetricNames.IN_PROGRESS_ATTEMPTS_TOTAL);
    const confirm = this.#opts.confirm;
    // Tentative; a failed round brings it forward, a closed connection or the limit clears it.
    this.#nextBeat = now + this.#policy.intervalMs;
    if (confirm === undefined) return true;
    const clock = this.#scheduler.clock;
    const timeoutMs = confirm.timeoutMs ?? this.#confirmTimeoutMs();
    this.#inFlight += 1;
    void sendConfirmedRound(this.#msgs, confirm.connection, timeoutMs).then((result) => {
      this.#inFlight -= 1;
      if (this.#finished) return countRoundAnsweredLate(result, this.#metrics);
      this.#record(result, beat, now, clock.now() - now, latenessMs, true);
      this.#reschedule();
    });
    if (this.beats >= this.#policy.maxHeartbeats && this.#beating) this.#limitReached();
    return false;
  }

  /** A plain round: `+WPI` for the batch's messages (see `sendRound`). */
  sendPlainRound(): RoundResult {
    return sendRound(this.#msgs, this.#opts.connection);
  }

  /** A plain round's frames were handed over (in `durationMs`): its books, the limit, the next tick. */
  completeTick(result: RoundResult, now: number, latenessMs: number, durationMs: number): void {
    // Settled while the other batches of its tick sent their frames: nothing left to keep.
    if (this.#finished) return;
    this.#record(result, this.beats, now, durationMs, latenessMs, false);
    if (this.beats >= this.#policy.maxHeartbeats && this.#beating) this.#limitReached();
    this.#reschedule();
  }

  #record(result: RoundResult, beat: number, sentAt: number, durationMs: number, latenessMs: number, confirmed: boolean): void {
    this.#metrics.observe(MetricNames.IN_PROGRESS_HEARTBEAT_SECONDS, durationMs / 1000);
    if (result.refreshed === "all") this.#tracker.refreshAll(sentAt);
    else for (const i of result.refreshed) this.#tracker.refresh(i, sentAt);
    if (result.released !== undefined) for (const i of result.released) this.#tracker.release(i);
    if (result.refreshed !== "all" || result.released !== undefined) this.#tracker.settle();
    // Every message settled by the work: no more rounds (empty, yet counted towards maxHeartbeats).
    if (result.released !== undefined && this.#tracker.deadline === Number.POSITIVE_INFINITY && this.#beating) this.stopBeating();
    reportRound(result, beat, durationMs, latenessMs, confirmed, this.#reports);
    if (result.failed === 0) return;
    if (result.closed) {
      this.#connectionClosed(this.#scheduler.clock.now());
    } else if (this.#beating && this.#nextBeat !== undefined) {
      // Retry before the lease runs out rather than a full interval later.
      const now = this.#scheduler.clock.now();
      const halfway = now + Math.max(0, (this.#tracker.deadline - now) / 2);
      this.#nextBeat = Math.min(this.#nextBeat, Math.max(now, halfway));
    }
  }

  #limitReached(): void {
    const onLimit = this.#opts.onLimit;
    reportLimit(this.#policy.maxHeartbeats, onLimit, this.#reports);
    this.#beating = false;
    this.#nextBeat = undefined;
    if (onLimit === "abort" && !this.#finishing) this.#run.abort(new HeartbeatLimitError(this.#policy.maxHeartbeats), true);
  }

  /**
   * The connection closed for good while beats went on: no beat and no ACK can reach the server
   * again, so the lease is lost now rather than at its deadline, and the work is told at once (it
   * can skip a commit that would be redelivered anyway). Once the work is over, beats just stop.
   */
  #connectionClosed(now: number): void {
    if (this.#finishing || this.#tracker.deadline === Number.POSITIVE_INFINITY) this.stopBeating();
    else this.#expire(now, true, new ConnectionClosedError());
  }

  /**
   * The lease ran out. `abortWork`: the work still runs and is told (not when it already settled).
   * `closed`: given up before its deadline because the connection closed (overdue 0 until then).
   */
  #expire(now: number, abortWork = true, closed?: ConnectionClosedError): void {
    this.#expired = true;
    this.#beating = false;
    this.#nextBeat = undefined;
    this.#seat?.leave();
    this.#thread?.stop();
    const overdueMs = closed === undefined ? now - this.#tracker.deadline : Math.max(0, now - this.#tracker.deadline);
    reportLeaseExpired(overdueMs, this.beats, this.#reports);
    this.#scheduler.cancel(this);
    // The work goes on: it decides what a lost lease means (usually: do not commit).
    if (abortWork) this.#run.abort(new LeaseExpiredError(overdueMs, closed && { cause: closed }), false);
  }

  // --- beats from the heartbeat thread -------------------------------------------------------

  /** Hands the batch to the heartbeat thread; a thread that cannot take it leaves it to this one. */
  #startThread(now: number): void {
    const confirm = this.#opts.confirm;
    const started = ThreadBeats.start(this.#msgs, this.#opts.thread!, {
      intervalMs: this.#policy.intervalMs,
      maxHeartbeats: this.#policy.maxHeartbeats,
      firstDueInMs: (this.#nextBeat ?? now) - now,
      requireProgress: this.#opts.requireProgress,
      confirmTimeoutMs: confirm === undefined ? undefined : (confirm.timeoutMs ?? this.#confirmTimeoutMs()),
    });
    if (started instanceof ThreadBeats) {
      this.#thread = started;
      return;
    }
    // Beats come from this thread instead: counted as a failure so the fallback is seen (beat 0).
    this.#threadFailed(errorName(started), false);
  }

  /** A main-thread tick in thread mode: read what the thread did, watch the deadline. */
  #runThreaded(now: number): void {
    this.#syncThread(now);
    // Left a thread that closed: the caller beats from this thread from now on.
    if (this.#thread === undefined || this.#finished || this.#expired) return;
    const deadline = this.#tracker.deadline + this.#confirmGraceMs();
    if (now >= deadline) {
      this.#expire(now);
      return;
    }
    if (this.#watchable()) {
      this.#joinWatch(now);
      return;
    }
    this.#seat?.leave();
    // Look again one interval on (the thread's next round), or at the deadline.
    const next = this.#beating ? Math.min(deadline, now + this.#policy.intervalMs) : deadline;
    if (next === Number.POSITIVE_INFINITY) this.#unwatch();
    else this.#scheduler.schedule(this, next, now);
  }

  /** Every message was settled by the work: no lease left to keep or to lose, no timer. */
  #unwatch(): void {
    this.#seat?.leave();
    this.#scheduler.cancel(this);
    this.#stallWatch.leave(this.#stall, this.#scheduler.clock.now());
  }

  /** The thread beats the batch no more; a round sent since the last reading is counted too (a confirmed one once answered). */
  #stopThread(thread: ThreadBeats, now: number): void {
    if (!this.#expired) this.#syncThread(now);
    this.#thread?.stop();
    if (thread === this.#thread && !this.#expired) this.beats = countLastThreadRounds(thread, this.beats, this.#reports, this.#opts.confirm && this.#confirmGraceMs());
  }

  /** Brings the books up to what the thread did: counts, events, the lease, settled messages, the limit. */
  #syncThread(now: number): void {
    const thread = this.#thread;
    if (thread === undefined) return;
    const first = this.beats;
    const r = thread.read();
    this.beats = r.beats;
    reportThreadReading(r, first, this.#opts.confirm !== undefined, this.#reports);
    if (r.lastBeatAgoMs !== undefined) this.#refreshFrom(now - r.lastBeatAgoMs);
    // Messages the work settled itself need no beat (the thread cannot see a settle).
    if (thread.releaseSettled(this.#msgs, this.#tracker)) {
      this.#tracker.settle();
      if (this.#tracker.deadline === Number.POSITIVE_INFINITY && this.#beating) this.stopBeating();
    }
    if (r.limit && this.#beating) this.#limitReached();
    if (this.#beating && batchConnectionClosed(this.#msgs, this.#opts.connection)) {
      this.#connectionClosed(now);
      if (this.#expired) return;
    }
    if (thread.closed) this.#leaveThread(now);
  }

  /**
   * The thread is gone for good (a login refused while the batch waited for it to start, a
   * connection closed): the rest of the batch is beaten from this thread, the first round at
   * once, rather than its lease running out with the host's connection still up.
   */
  #leaveThread(now: number): void {
    const thread = this.#thread!;
    this.#seat?.leave();
    this.#thread = undefined;
    this.#stall.threaded = false;
    // Stops and gives the handle back; nothing to flush on a thread that is gone.
    void thread.quiet();
    this.#threadFailed("HeartbeatThreadError", false);
    if (this.#beating && !this.#finishing) this.#nextBeat = now;
  }

  #refreshFrom(at: number): void {
    if (at > this.#lastThreadBeat) this.#tracker.refreshAll((this.#lastThreadBeat = at));
  }

  /** Heartbeats so far; read from the thread while the watch keeps the books (they lag until its next look). */
  get heartbeatsNow(): number {
    return this.#seat?.joined === true ? Math.max(this.beats, this.#thread?.beatsNow ?? 0) : this.beats;
  }

  /** Brings the lease's deadline up to the thread's last beat while the watch keeps the books. */
  freshen(): void {
    const ago = this.#seat?.joined === true ? this.#thread?.lastBeatAgoMs() : undefined;
    if (ago !== undefined) this.#refreshFrom(this.#scheduler.clock.now() - ago);
  }

  /** Thread mode: whether the watch may look after it (it counts the rounds for metrics): not while a trace, confirmed or conditional beats, or per-message windows read its books per beat. */
  #watchable(): boolean {
    return this.#thread !== undefined && this.#beating && !this.#finishing && this.#slackMs !== undefined && this.#opts.confirm === undefined &&
      !this.#opts.requireProgress && !this.#trace.active;
  }

  #joinWatch(now: number): void {
    this.#scheduler.cancel(this);
    // A look of its own (it may leave), and a settle the work made: released on the thread.
    const thread = this.#thread!;
    this.#seat ??= new WatchSeat(this.#policy.intervalMs, this.#slackMs!, this.#msgs, closerOf(this.#opts.connection, this.#msgs), thread.registration, thread.firstDueAt,
      (n) => (this.run(n, n), this.#seat!.joined ? this.#tracker.deadline : Number.POSITIVE_INFINITY),
      (n) => void (this.#syncThread(n), this.#seat!.joined && !this.#watchable() && this.#reschedule(n)),
      this.#metrics.enabled ? () => void (this.#thread && (this.beats = countThreadRounds(this.#thread, this.beats, this.#reports))) : undefined);
    this.#seat.join(this.#scheduler, thread.control, now, this.#tracker.deadline);
  }

  /** Confirmed beats: how long a round's replies may take, the wait before a deadline counts as passed. */
  #confirmGraceMs(): number {
    const confirm = this.#opts.confirm;
    return this.#thread === undefined || confirm === undefined ? 0 : (confirm.timeoutMs ?? this.#confirmTimeoutMs());
  }

  #confirmTimeoutMs(): number {
    return Math.min(MAX_CONFIRM_TIMEOUT_MS, Math.max(1, Math.floor(this.#policy.intervalMs / 2)));
  }

  #reschedule(now?: number): void {
    if (this.#finished || this.#expired) return;
    if (this.#thread !== undefined) {
      // From its start, when nothing reads its books per beat: the watch looks after it.
      if (this.#watchable()) return this.#joinWatch(now ?? this.#scheduler.clock.now());
      this.#seat?.leave();
      // Thread mode: the next look is at the thread's next round, or the deadline.
      const t = now ?? this.#scheduler.clock.now();
      const deadline = this.#tracker.deadline + this.#confirmGraceMs();
      const next = this.#beating ? Math.min(deadline, Math.max(t, (this.#nextBeat ?? t) + COALESCE_MS)) : deadline;
      if (next === Number.POSITIVE_INFINITY) this.#unwatch();
      else this.#scheduler.schedule(this, next, now);
      return;
    }
    const lease = this.#tracker.deadline;
    let due = this.#nextBeat !== undefined && this.#beating ? Math.min(this.#nextBeat, lease) : lease;
    // While a confirmed round is in flight past the deadline, its reply decides; look again shortly.
    if (this.#inFlight > 0 && due <= this.#scheduler.clock.now()) due = this.#scheduler.clock.now() + 10;
    // Nothing left to watch (every message settled by the work, no beat due): no timer.
    if (due === Number.POSITIVE_INFINITY) this.#unwatch();
    else this.#scheduler.schedule(this, due, now);
  }
}
