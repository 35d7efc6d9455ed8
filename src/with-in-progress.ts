/**
 * withInProgress: run the host's work and, while it runs, tell JetStream the messages are
 * still being worked on — bounded, stopped on every path, never an ack.
 */
import type { JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { errorName, nextBatchId, publishEvent } from "./diagnostics.js";
import { HeartbeatLimitError, InProgressPolicyError, LeaseExpiredError } from "./errors.js";
import { DEFAULT_IN_PROGRESS_POLICY, isVerifiedPolicy, type DisabledInProgressPolicy, type VerifiedInProgressPolicy } from "./guardrails.js";
import {
  sendConfirmedRound,
  sendRound,
  type ClosableConnection,
  type RequestConnection,
  type RoundResult,
} from "./heartbeat.js";
import { LeaseTracker, windowFor, windowIsShared } from "./lease.js";
import { deliveryCount } from "./message-access.js";
import { MetricNames, MetricsRecorder, type MetricsSink } from "./metrics.js";
import { sharedScheduler, type Scheduler, type ScheduledTask, type SchedulerEntry } from "./scheduler.js";

/**
 * The batch's redelivery deadline, as the library knows it: the last accepted heartbeat (or
 * the delivery) plus the effective window, for the message closest to its deadline.
 *
 * @example
 * ```ts
 * await withInProgress(msgs, async (ctx) => {
 *   if (ctx.lease && ctx.lease.remainingMs() < 2_000) return; // too close to commit safely
 *   await sink.commit();
 * }, policy);
 * ```
 */
export interface Lease {
  /** The earliest redelivery deadline of the batch, as epoch milliseconds (`Date.now()` scale). */
  readonly deadline: number;
  /** Milliseconds until the deadline; negative once it has passed. */
  remainingMs(): number;
  /** True once the deadline passed without an accepted heartbeat. */
  readonly expired: boolean;
}

/**
 * What `work` receives.
 *
 * @example
 * ```ts
 * await withInProgress(msgs, async (ctx) => {
 *   for (const chunk of chunks) {
 *     ctx.signal.throwIfAborted();
 *     await sink.write(chunk, { signal: ctx.signal });
 *     ctx.progress();
 *   }
 * }, policy, { requireProgress: true });
 * ```
 */
export interface WorkContext {
  /**
   * Aborted when the host's `options.signal` aborts (with its reason), when the lease expires
   * ({@link LeaseExpiredError}), or when `maxHeartbeats` is reached with `onLimit: "abort"`
   * ({@link HeartbeatLimitError}).
   */
  readonly signal: AbortSignal;
  /** Heartbeat rounds sent so far. */
  readonly heartbeats: number;
  /** The batch lease; `undefined` when heartbeats are disabled (no AckWait is known then). */
  readonly lease: Lease | undefined;
  /** Reports progress; with `requireProgress`, a beat is sent only if this was called since the previous one. */
  progress(): void;
}

/**
 * Server-confirmed heartbeats: each `+WPI` is a request the server answers, so success means
 * "the server received it", and its latency is measured.
 *
 * @example
 * ```ts
 * await withInProgress(msgs, work, policy, { confirm: { connection: nc, timeoutMs: 2_000 } });
 * ```
 */
export interface HeartbeatConfirmation {
  /** The connection the messages arrived on (or any connection to the same account). */
  readonly connection: Pick<NatsConnection, "request">;
  /** Reply timeout per beat; default half the interval, at most 5000 ms. */
  readonly timeoutMs?: number;
}

/**
 * Options of {@link withInProgress}.
 *
 * @example
 * ```ts
 * const options: WithInProgressOptions = { signal: shutdown.signal, metrics, receivedAt: Date.now() };
 * ```
 */
export interface WithInProgressOptions {
  /** Cancels the work: `ctx.signal` aborts with the same reason and beats stop at once. */
  readonly signal?: AbortSignal;
  /** Where the heartbeat metrics go. */
  readonly metrics?: MetricsSink;
  /**
   * When the messages were received (epoch ms or a Date), or a function giving it per message.
   * JetStream counts the deadline from delivery, so time spent in a buffer brings the first
   * beat forward. Default: now.
   */
  readonly receivedAt?: number | Date | ((msg: JsMsg, index: number) => number | Date | undefined);
  /** What to do when `maxHeartbeats` is reached: let the work go on (default) or abort `ctx.signal`. */
  readonly onLimit?: "continue" | "abort";
  /** Opt-in server-confirmed heartbeats. Without it, success means "handed to the client". */
  readonly confirm?: HeartbeatConfirmation;
  /** The messages' connection, so a closed connection ends supervision at once. */
  readonly connection?: Pick<NatsConnection, "isClosed">;
  /** Send a beat only if the work called `ctx.progress()` since the previous one (stuck is not slow). */
  readonly requireProgress?: boolean;
}

const MAX_CONFIRM_TIMEOUT_MS = 5000;

/**
 * Runs `work` and, while it runs, sends bounded InProgress (`+WPI`) heartbeats for `msgs`.
 *
 * - A disabled policy runs `work` with no heartbeat at all. An enabled policy must come from
 *   {@link verifyInProgressPolicy}; anything else is refused before `work` starts.
 * - The first beat comes `intervalMs` after delivery (brought forward by `receivedAt`), then
 *   every `intervalMs`, at most `maxHeartbeats` rounds; one round sends `+WPI` for every message.
 * - Beats stop before the returned promise settles, on every path; the work's result or error
 *   passes through unchanged. Nothing here ever acknowledges, naks or terminates a message.
 * - On abort `ctx.signal` aborts; if the work does not finish within `shutdownTimeoutMs`, the
 *   promise rejects with the abort reason and the late result is discarded.
 * - A failed beat is counted, never fatal to the work and never success; a closed connection
 *   ends supervision.
 *
 * All batches share one unref'd timer per process.
 *
 * @param msgs - one message or a batch, as delivered by a durable consumer with explicit acks.
 * @param work - the host's write; it receives a {@link WorkContext}.
 * @param policy - a verified policy, or `{ enabled: false }`.
 * @param options - see {@link WithInProgressOptions}.
 * @returns what `work` returned.
 * @throws {@link InProgressPolicyError} for an enabled policy that was not verified;
 *   `TypeError` for malformed arguments; the abort reason after an abort and the shutdown bound.
 *
 * @example
 * ```ts
 * const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 10_000 }, consumerTimingFromConfig(info));
 * const batch = [];
 * for await (const m of await consumer.fetch({ max_messages: 100, expires: 1_000 })) batch.push(m);
 * await withInProgress(batch, (ctx) => db.insertMany(batch.map((m) => m.json()), { signal: ctx.signal }), policy, {
 *   receivedAt: Date.now(),
 * });
 * for (const m of batch) m.ack(); // only after the write resolved
 * ```
 */
export function withInProgress<T>(
  msgs: JsMsg | readonly JsMsg[],
  work: (ctx: WorkContext) => Promise<T> | T,
  policy: VerifiedInProgressPolicy | DisabledInProgressPolicy,
  options: WithInProgressOptions = {},
): Promise<T> {
  // superviseWork is async: every error, even an argument error, arrives as a rejection.
  return superviseWork(msgs, work, policy, options, sharedScheduler());
}

/**
 * {@link withInProgress} with an explicit scheduler (tests drive it with a fake clock) and,
 * for `CommitThenAck`, the batch number its diagnostics events already use, so the heartbeat
 * events and the settled event of one batch carry the same `batchId`.
 *
 * @internal
 */
export async function superviseWork<T>(
  msgs: JsMsg | readonly JsMsg[],
  work: (ctx: WorkContext) => Promise<T> | T,
  policy: VerifiedInProgressPolicy | DisabledInProgressPolicy,
  options: WithInProgressOptions,
  scheduler: Scheduler,
  batchId?: number,
): Promise<T> {
  if (typeof work !== "function") throw new TypeError(`work must be a function, got ${typeof work}`);
  const list = toList(msgs);
  const verified = readPolicy(policy);
  const opts = readOptions(options);
  const enabled = verified?.enabled === true && list.length > 0;
  if (enabled) assertMessages(list);

  const outer = opts.signal;
  outer?.throwIfAborted();

  const run = new WorkRun(verified?.shutdownTimeoutMs ?? DEFAULT_IN_PROGRESS_POLICY.shutdownTimeoutMs);
  const supervision = enabled ? new Supervision(list, verified, opts, scheduler, MetricsRecorder.for(opts.metrics), run, batchId ?? nextBatchId()) : undefined;
  run.supervision = supervision;
  const ctx = new SupervisedContext(run, supervision);
  const onOuterAbort = outer === undefined ? undefined : (): void => run.abort(outer.reason);
  if (onOuterAbort !== undefined) outer?.addEventListener("abort", onOuterAbort, { once: true });

  supervision?.start();
  try {
    // Without supervision and without a signal nothing can abort the work: no bound to race.
    if (supervision === undefined && outer === undefined) return await work(ctx);
    return await run.race(work, ctx);
  } finally {
    supervision?.finish();
    run.close();
    if (onOuterAbort !== undefined) outer?.removeEventListener("abort", onOuterAbort);
  }
}

/**
 * The abort state of one call. `ctx.signal` costs microseconds to create in Node.js, so its
 * controller exists only once the work reads the signal or the call is aborted; until then
 * nothing can tell the difference.
 */
class WorkRun {
  supervision: Supervision | undefined;
  readonly #shutdownTimeoutMs: number;
  #controller: AbortController | undefined;
  #aborted = false;
  #shutdownTimer: ReturnType<typeof setTimeout> | undefined;
  #abandon: ((reason: unknown) => void) | undefined;

  constructor(shutdownTimeoutMs: number) {
    this.#shutdownTimeoutMs = shutdownTimeoutMs;
  }

  get signal(): AbortSignal {
    this.#controller ??= new AbortController();
    return this.#controller.signal;
  }

  /** The abort reason, or `undefined` while not aborted (without creating the signal). */
  get reason(): unknown {
    return this.#aborted ? this.signal.reason : undefined;
  }

  /**
   * Aborts once: beats stop and the shutdown bound starts first, then `ctx.signal` aborts with
   * `reason` (its own listeners run after the library's, as they always did).
   */
  abort(reason: unknown): void {
    if (this.#aborted) return;
    this.#aborted = true;
    this.supervision?.stopBeating();
    const controller = (this.#controller ??= new AbortController());
    this.#shutdownTimer = setTimeout(() => this.#abandon?.(controller.signal.reason), this.#shutdownTimeoutMs);
    this.#shutdownTimer.unref?.();
    controller.abort(reason);
  }

  /** Runs the work; settles with its outcome, or with the abort reason once the shutdown bound passed. */
  race<T>(work: (ctx: WorkContext) => Promise<T> | T, ctx: WorkContext): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.#abandon = reject;
      let result: Promise<T> | T;
      try {
        result = work(ctx);
      } catch (err) {
        reject(err);
        return;
      }
      // Once abandoned, the work's late outcome lands on a settled promise: never unhandled.
      Promise.resolve(result).then(resolve, reject);
    });
  }

  close(): void {
    if (this.#shutdownTimer !== undefined) clearTimeout(this.#shutdownTimer);
  }
}

const noProgress = (): void => undefined;

/** The {@link WorkContext} a call hands to its work. */
class SupervisedContext implements WorkContext {
  readonly #run: WorkRun;
  readonly #supervision: Supervision | undefined;
  readonly progress: () => void;

  constructor(run: WorkRun, supervision: Supervision | undefined) {
    this.#run = run;
    this.#supervision = supervision;
    // An own function, so `const { progress } = ctx` keeps working.
    this.progress = supervision === undefined ? noProgress : () => supervision.progress();
  }

  get signal(): AbortSignal {
    return this.#run.signal;
  }

  get heartbeats(): number {
    return this.#supervision?.beats ?? 0;
  }

  get lease(): Lease | undefined {
    return this.#supervision?.lease;
  }

  static abortReason(ctx: WorkContext): unknown {
    return #run in ctx ? ctx.#run.reason : ctx.signal.reason;
  }
}

/**
 * The abort reason of `ctx.signal` (`undefined` when not aborted), read without creating the
 * signal of a context made by {@link withInProgress}.
 *
 * @internal
 */
export function abortReasonOf(ctx: WorkContext): unknown {
  return SupervisedContext.abortReason(ctx);
}

interface ReadOptions {
  readonly signal: AbortSignal | undefined;
  readonly metrics: MetricsSink | undefined;
  readonly receivedAt: WithInProgressOptions["receivedAt"];
  readonly onLimit: "continue" | "abort";
  readonly confirm: { readonly connection: RequestConnection; readonly timeoutMs: number | undefined } | undefined;
  readonly connection: ClosableConnection | undefined;
  readonly requireProgress: boolean;
}

function readOptions(options: unknown): ReadOptions {
  if (options === undefined || options === null) options = {};
  if (typeof options !== "object") throw new TypeError(`options must be an object, got ${typeof options}`);
  const o = options as WithInProgressOptions;
  const signal = o.signal;
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw new TypeError("options.signal must be an AbortSignal (for example AbortSignal.timeout(ms) or controller.signal)");
  }
  const onLimit = o.onLimit ?? "continue";
  if (onLimit !== "continue" && onLimit !== "abort") {
    throw new TypeError(`options.onLimit must be "continue" or "abort", got ${JSON.stringify(onLimit)}`);
  }
  const receivedAt = o.receivedAt;
  if (receivedAt !== undefined && typeof receivedAt !== "function") epochMs(receivedAt, "options.receivedAt");
  let confirm: ReadOptions["confirm"];
  if (o.confirm !== undefined) {
    const c = o.confirm as Partial<HeartbeatConfirmation> | null;
    if (!c || typeof c !== "object" || !c.connection || typeof c.connection.request !== "function") {
      throw new TypeError("options.confirm.connection must be a NatsConnection (it sends each +WPI as a request)");
    }
    const t = c.timeoutMs;
    if (t !== undefined && !(Number.isInteger(t) && t >= 1 && t <= 60_000)) {
      throw new TypeError(`options.confirm.timeoutMs must be an integer in 1 ..= 60000, got ${String(t)}: use for example 2000`);
    }
    confirm = { connection: c.connection, timeoutMs: t };
  }
  const connection = o.connection;
  if (connection !== undefined && (connection === null || typeof connection.isClosed !== "function")) {
    throw new TypeError("options.connection must be a NatsConnection (its isClosed() ends supervision)");
  }
  const requireProgress = o.requireProgress ?? false;
  if (typeof requireProgress !== "boolean") throw new TypeError("options.requireProgress must be a boolean");
  return { signal, metrics: o.metrics, receivedAt, onLimit, confirm, connection, requireProgress };
}

function readPolicy(policy: unknown): VerifiedInProgressPolicy | undefined {
  if (isVerifiedPolicy(policy)) return policy;
  if (typeof policy === "object" && policy !== null && (policy as { enabled?: unknown }).enabled === false) return undefined;
  throw new InProgressPolicyError([
    {
      code: "policy_not_verified",
      field: "policy",
      message:
        "withInProgress needs a policy returned by verifyInProgressPolicy (or { enabled: false }): an unverified policy could beat against an unknown AckWait",
    },
  ]);
}

function toList(msgs: unknown): readonly JsMsg[] {
  if (Array.isArray(msgs)) return msgs as readonly JsMsg[];
  if (typeof msgs === "object" && msgs !== null) return [msgs as JsMsg];
  throw new TypeError(`msgs must be a JsMsg or an array of them, got ${msgs === null ? "null" : typeof msgs}`);
}

function assertMessages(list: readonly unknown[]): void {
  for (let i = 0; i < list.length; i++) {
    const m = list[i];
    if (typeof m !== "object" || m === null || typeof (m as JsMsg).working !== "function") {
      throw new TypeError(`msgs[${i}] is not a JetStream message (it has no working() method)`);
    }
  }
}

function isEpochMs(value: unknown): value is number {
  return typeof value === "number" && Number.isFinite(value) && value >= 0;
}

function epochMs(value: unknown, field: string): number {
  const ms = value instanceof Date ? value.getTime() : value;
  if (!isEpochMs(ms)) {
    throw new TypeError(`${field} must be epoch milliseconds (Date.now()) or a valid Date, got ${String(value)}`);
  }
  return ms;
}

/** The heartbeat supervision of one batch: a task of the shared scheduler. */
class Supervision implements ScheduledTask {
  beats = 0;
  schedulerEntry: SchedulerEntry | undefined = undefined;

  readonly #msgs: readonly JsMsg[];
  readonly #policy: VerifiedInProgressPolicy;
  readonly #opts: ReadOptions;
  readonly #scheduler: Scheduler;
  readonly #metrics: MetricsRecorder;
  readonly #run: Pick<WorkRun, "abort">;
  readonly #tracker: LeaseTracker;
  readonly #batchId: number;
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
    opts: ReadOptions,
    scheduler: Scheduler,
    metrics: MetricsRecorder,
    run: Pick<WorkRun, "abort">,
    batchId: number,
  ) {
    this.#batchId = batchId;
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
          const v = receivedAt(m, i);
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
    } else if (this.#beating && this.#nextBeat !== undefined && now + 1 >= this.#nextBeat) {
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
    else if (result.refreshed.length > 0) {
      for (const i of result.refreshed) this.#tracker.refresh(i, sentAt);
      this.#tracker.settle();
    }
    if (result.failed === 0) {
      this.#metrics.count(MetricNames.IN_PROGRESS_SUCCESSES_TOTAL);
      publishEvent("heartbeatSent", () => ({
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
    publishEvent("heartbeatFailed", () => ({
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
    publishEvent("heartbeatLimit", () => ({
      batchId: this.#batchId,
      batchSize: this.#msgs.length,
      maxHeartbeats: this.#policy.maxHeartbeats,
      onLimit,
    }));
    this.#beating = false;
    this.#nextBeat = undefined;
    if (onLimit === "abort") this.#run.abort(new HeartbeatLimitError(this.#policy.maxHeartbeats));
  }

  #expire(now: number): void {
    this.#expired = true;
    this.#beating = false;
    this.#nextBeat = undefined;
    const overdueMs = now - this.#tracker.deadline;
    this.#metrics.count(MetricNames.IN_PROGRESS_LEASE_EXPIRED_TOTAL);
    publishEvent("leaseExpired", () => ({
      batchId: this.#batchId,
      batchSize: this.#msgs.length,
      overdueMs,
      beats: this.beats,
    }));
    this.#scheduler.cancel(this);
    this.#run.abort(new LeaseExpiredError(overdueMs));
  }

  #reschedule(now?: number): void {
    if (this.#finished || this.#expired) return;
    const lease = this.#tracker.deadline;
    let due = this.#nextBeat !== undefined && this.#beating ? Math.min(this.#nextBeat, lease) : lease;
    // While a confirmed round is in flight past the deadline, its reply decides; look again shortly.
    if (this.#inFlight > 0 && due <= this.#scheduler.clock.now()) due = this.#scheduler.clock.now() + 10;
    this.#scheduler.schedule(this, due, now);
  }
}
