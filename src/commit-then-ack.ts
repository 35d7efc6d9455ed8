/**
 * CommitThenAck: what a host wires between its JetStream consumer and its sink. The write runs
 * under withInProgress; nothing is acknowledged before the write resolved, and every failure
 * path leaves the message redeliverable, dead-lettered or terminated — never lost.
 */
import type { Consumer, JetStreamManager, JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { publishDeadLetter, type DeadLetterTarget } from "./dead-letter.js";
import { errorName, nextBatchId, publishEvent } from "./diagnostics.js";
import { InProgressPolicyError, LeaseExpiredError, PermanentSinkError } from "./errors.js";
import {
  isVerifiedPolicy,
  type BackOffMode,
  type ConsumerTiming,
  type DisabledInProgressPolicy,
  type InProgressPolicy,
  type VerifiedInProgressPolicy,
} from "./guardrails.js";
import { ConnectionClosedError, DisconnectedError } from "./heartbeat.js";
import { inspectConsumer } from "./inspect.js";
import { batchConnectionClosed, connectionDown, serverVersionOf } from "./message-access.js";
import { MetricNames, MetricsRecorder, type MetricsSink } from "./metrics.js";
import { runLoop, type RunOptions } from "./run-loop.js";
import { ackConfirmed, ackNow, nakWithDelay, termWithReason, type AckOutcome, type ConfirmAckOptions } from "./settle.js";
import { sharedScheduler } from "./scheduler.js";
import { abortReasonOf, superviseWork, type WithInProgressOptions, type WorkContext } from "./with-in-progress.js";

/**
 * What to do with a message whose write failed temporarily (a {@link TemporarySinkError}, or
 * any error the host did not classify): NAK it with an optional delay (default), or leave it
 * and let AckWait and MaxDeliver decide.
 *
 * @example
 * ```ts
 * const retryIn30s: TemporaryFailureAction = { action: "nak", delayMs: 30_000 };
 * ```
 */
export type TemporaryFailureAction =
  | {
      /** Send `-NAK`, so the server redelivers after `delayMs` (at once without a delay). */
      readonly action: "nak";
      /** The wait before redelivery, in milliseconds. */
      readonly delayMs?: number;
    }
  | {
      /** Send nothing; the message is redelivered after its AckWait. */
      readonly action: "leave";
    };

/**
 * A write may report that some messages of the batch failed; the rest are acknowledged and
 * the failures settled by the class of their error.
 *
 * @example
 * ```ts
 * await ack.process(msgs, async (batch) => {
 *   const failed = [];
 *   for (const m of batch) {
 *     try { await db.insert(m.json()); } catch (error) { failed.push({ msg: m, error }); }
 *   }
 *   return { failed };
 * });
 * ```
 */
export interface WriteReport {
  /** The messages that were not written, each with its error. */
  readonly failed: readonly FailedMessage[];
}

/**
 * One message a write could not commit.
 *
 * @example
 * ```ts
 * const f: FailedMessage = { msg, error: new TemporarySinkError("row locked") };
 * ```
 */
export interface FailedMessage {
  /** A message of the batch. */
  readonly msg: JsMsg;
  /** Why it failed; its class decides how it is settled. */
  readonly error: unknown;
}

/**
 * The host's write for one batch. Resolve only once the batch is durable; throw
 * {@link TemporarySinkError} or {@link PermanentSinkError} (or anything else, treated as
 * temporary) when it is not.
 *
 * @example
 * ```ts
 * const write: BatchWrite = async (msgs, ctx) => {
 *   await db.tx((t) => t.upsertMany(msgs.map(toRow)), { signal: ctx.signal });
 * };
 * ```
 */
export type BatchWrite = (msgs: readonly JsMsg[], ctx: WorkContext) => Promise<void | WriteReport> | void | WriteReport;

/**
 * Options of {@link CommitThenAck}, one readonly object.
 *
 * @example
 * ```ts
 * const options: CommitThenAckOptions = {
 *   inProgress: verifyInProgressPolicy({ enabled: true, intervalMs: 10_000 }, timing),
 *   onTemporaryFailure: { action: "nak", delayMs: 5_000 },
 *   deadLetter: { js, subject: "dlq.orders" },
 * };
 * ```
 */
export interface CommitThenAckOptions {
  /** The heartbeat policy (verified), or `{ enabled: false }`; default disabled. */
  readonly inProgress?: VerifiedInProgressPolicy | DisabledInProgressPolicy;
  /** Where metrics go. */
  readonly metrics?: MetricsSink;
  /** Temporary failures: `{ action: "nak", delayMs }` (default, bare NAK) or `{ action: "leave" }`. */
  readonly onTemporaryFailure?: TemporaryFailureAction;
  /** Dead-letter target for permanent failures; without it they are terminated. */
  readonly deadLetter?: DeadLetterTarget;
  /** Cancels everything this instance runs (shutdown). */
  readonly signal?: AbortSignal;
  /** Opt-in confirmed ACKs (waits for the server, retries on timeout; retries need `connection`). */
  readonly confirmAck?: ConfirmAckOptions;
  /**
   * The connection the messages arrive on. Used to read the server version (Term reasons on
   * 2.10.4+), to send ACK retries and confirmed heartbeats, and to notice a closed connection.
   */
  readonly connection?: Pick<NatsConnection, "request" | "isClosed" | "info">;
  /** Heartbeat fine-tuning passed to `withInProgress`. */
  readonly heartbeat?: Pick<WithInProgressOptions, "onLimit" | "confirm" | "requireProgress">;
  /** The consumer's timing, for BackOff-correct NAK delays (set by `forConsumer`). */
  readonly timing?: ConsumerTiming;
  /** BackOff handling of NAK delays; default the policy's mode, else `reject` (delays sent as is). */
  readonly backOff?: BackOffMode;
}

/**
 * Options of {@link CommitThenAck.forConsumer}: the instance options, with the InProgress policy
 * as plain (partial) input that is verified against the inspected consumer.
 *
 * @example
 * ```ts
 * const options: ForConsumerOptions = { inProgress: { enabled: true, intervalMs: 10_000 }, ackWaitMs: 30_000 };
 * ```
 */
export interface ForConsumerOptions extends Omit<CommitThenAckOptions, "inProgress" | "timing"> {
  /** The policy to verify against the consumer's effective AckWait and BackOff; default disabled. */
  readonly inProgress?: Partial<InProgressPolicy>;
  /** The AckWait the host expects; a different server value fails closed (drift). */
  readonly ackWaitMs?: number;
}

/**
 * What happened to one message.
 *
 * @example
 * ```ts
 * for (const r of result.messages) if (r.action === "left") console.warn("will be redelivered");
 * ```
 */
export interface MessageResult {
  /** The message. */
  readonly msg: JsMsg;
  /** The frame it got: `acked`, `nacked`, `termed`, `dead_lettered` (then acked), or `left` (nothing sent). */
  readonly action: "acked" | "nacked" | "termed" | "dead_lettered" | "left";
  /** The write's error for this message, when it failed. */
  readonly error?: unknown;
  /**
   * Set when settling failed or could not be confirmed (the message stays redeliverable unless
   * acked). An unconfirmed ACK is an error named `AckNotConfirmedError` (attempts and the kind of
   * the last failure, never the ack subject); a closed connection one named
   * `ClosedConnectionError`; a failed dead-letter publish is the JetStream client's error. An
   * `acked` message with a `DisconnectedError` here had its `+ACK` handed to a client that was
   * between connections: the client drops such frames, so expect a redelivery (`confirmAck`
   * retries after the reconnect instead).
   */
  readonly settleError?: unknown;
  /** With confirmed ACKs: whether the server confirmed. */
  readonly confirmed?: boolean;
  /** For NAKs: the wait asked for. */
  readonly requestedDelayMs?: number;
  /** For NAKs: the wait the server will really apply (differs under BackOff when it cannot be met). */
  readonly effectiveDelayMs?: number;
}

/**
 * The batch outcome: the action every message got, `partial` when they differ, `cancelled`
 * when an abort left the batch for redelivery, `empty` for an empty batch.
 *
 * @example
 * ```ts
 * const ok: BatchOutcome[] = ["acked"];
 * ```
 */
export type BatchOutcome = "acked" | "nacked" | "termed" | "dead_lettered" | "left" | "cancelled" | "partial" | "empty";

/**
 * What {@link CommitThenAck.process} did with a batch.
 *
 * @example
 * ```ts
 * const result = await ack.process(msgs, write);
 * if (result.outcome !== "acked") log.warn({ outcome: result.outcome, error: result.error });
 * ```
 */
export interface BatchResult {
  /** The batch outcome. */
  readonly outcome: BatchOutcome;
  /** Messages acknowledged (after a durable write). */
  readonly acked: number;
  /** Messages negatively acknowledged. */
  readonly nacked: number;
  /** Messages terminated. */
  readonly termed: number;
  /** Messages dead-lettered and then acknowledged. */
  readonly deadLettered: number;
  /** Messages left for redelivery (no frame sent). */
  readonly left: number;
  /** The write's error, when it failed (for partial results: the first failure's). */
  readonly error?: unknown;
  /** Heartbeat rounds sent while the write ran. */
  readonly heartbeats: number;
  /** Duration of the write in milliseconds. */
  readonly writeMs: number;
  /** Per-message detail, in batch order. */
  readonly messages: readonly MessageResult[];
}

/**
 * Per-call options of {@link CommitThenAck.process}.
 *
 * @example
 * ```ts
 * await ack.process(msgs, write, { receivedAt: fetchedAt, signal: AbortSignal.timeout(60_000) });
 * ```
 */
export interface ProcessOptions {
  /** Cancels this batch (combined with the instance's signal). */
  readonly signal?: AbortSignal;
  /** When the messages were received; see `WithInProgressOptions.receivedAt`. */
  readonly receivedAt?: WithInProgressOptions["receivedAt"];
}

/**
 * Commit-then-ack for a JetStream consumer: runs the host's write under bounded InProgress
 * heartbeats, then settles every message by what the write reported.
 *
 * - success: ACK (optionally confirmed, with retries);
 * - {@link TemporarySinkError} or an unclassified error: NAK with a delay, or leave;
 * - {@link PermanentSinkError}: publish to the dead-letter subject and ACK only after JetStream
 *   confirmed it (a failed publish leaves the original redeliverable), or Term without a target;
 * - abort: nothing is sent; the message is redelivered after AckWait.
 *
 * @example
 * ```ts
 * const ack = await CommitThenAck.forConsumer(jsm, "ORDERS", "writer", {
 *   inProgress: { enabled: true, intervalMs: 10_000, maxHeartbeats: 30 },
 *   deadLetter: { js, subject: "dlq.orders" },
 * });
 * const consumer = await js.consumers.get("ORDERS", "writer");
 * await ack.run(consumer, (msgs, ctx) => db.insertBatch(msgs, { signal: ctx.signal }), { signal: shutdown.signal });
 * ```
 */
export class CommitThenAck {
  readonly #options: CommitThenAckOptions;
  readonly #policy: VerifiedInProgressPolicy | DisabledInProgressPolicy;
  readonly #metrics: MetricsRecorder;
  readonly #nakBackOff: readonly number[] | undefined;

  /**
   * @param options - see {@link CommitThenAckOptions}; validated at once.
   * @throws `TypeError` naming the option, the value and the fix.
   */
  constructor(options: CommitThenAckOptions = {}) {
    this.#options = validateOptions(options);
    this.#policy = this.#options.inProgress ?? { enabled: false };
    this.#metrics = MetricsRecorder.for(this.#options.metrics);
    const verified = isVerifiedPolicy(this.#policy) ? this.#policy : undefined;
    const mode = this.#options.backOff ?? verified?.backOff ?? "reject";
    const timing = this.#options.timing ?? verified?.timing;
    this.#nakBackOff = mode === "aware" && timing?.backOffMs && timing.backOffMs.length > 0 ? timing.backOffMs : undefined;
  }

  /**
   * Bind-only setup for least-privilege services: reads the durable consumer's info (nothing
   * else; create the manager with `jetstreamManager(nc, { checkAPI: false })` if the identity
   * may not read account info), verifies the policy against its effective AckWait and BackOff,
   * and fails closed before anything is fetched.
   *
   * @param jsm - a JetStream manager; only `consumers.info` is called.
   * @param stream - the stream name.
   * @param consumer - the durable consumer's name.
   * @param options - instance options plus the policy to verify and the expected AckWait.
   * @returns a ready instance.
   * @throws {@link ConsumerPolicyError} when the consumer is missing, unreadable, not durable,
   *   not explicit-ack, its AckWait drifted or does not fit the interval, or it has a BackOff
   *   (unless `backOff: "aware"`).
   *
   * @example
   * ```ts
   * const jsm = await jetstreamManager(nc, { checkAPI: false });
   * const ack = await CommitThenAck.forConsumer(jsm, "ORDERS", "writer", {
   *   inProgress: { enabled: true, intervalMs: 10_000 },
   *   connection: nc,
   * });
   * ```
   */
  static async forConsumer(
    jsm: Pick<JetStreamManager, "consumers">,
    stream: string,
    consumer: string,
    options: ForConsumerOptions = {},
  ): Promise<CommitThenAck> {
    if (typeof stream !== "string" || stream === "") throw new TypeError("stream must be a non-empty stream name");
    if (typeof consumer !== "string" || consumer === "") throw new TypeError("consumer must be a non-empty durable consumer name");
    const { inProgress, ackWaitMs, ...rest } = options;
    const connection = rest.connection ?? managerConnection(jsm);
    const serverVersion = serverVersionOf(connection);
    const inspection = await inspectConsumer(jsm, stream, consumer, {
      ...(inProgress !== undefined ? { inProgress } : {}),
      ...(rest.backOff !== undefined ? { backOff: rest.backOff } : {}),
      ...(ackWaitMs !== undefined ? { ackWaitMs } : {}),
      ...(serverVersion !== undefined ? { serverVersion } : {}),
    });
    return new CommitThenAck({
      ...rest,
      ...(connection !== undefined ? { connection } : {}),
      inProgress: inspection.policy,
      timing: inspection.timing,
    });
  }

  /** The verified heartbeat policy in use (or `{ enabled: false }`). */
  get policy(): VerifiedInProgressPolicy | DisabledInProgressPolicy {
    return this.#policy;
  }

  /**
   * Runs `write` for a batch under the heartbeat policy, then settles every message. Never
   * rejects for a failed write or a failed settle: the result says what happened.
   *
   * @param msgs - the batch, as fetched.
   * @param write - the host's write; resolve only when durable.
   * @param options - per-batch signal and receive time.
   * @returns what happened to each message.
   * @throws `TypeError` for malformed arguments (before anything runs).
   *
   * @example
   * ```ts
   * const msgs = [];
   * for await (const m of await consumer.fetch({ max_messages: 100, expires: 1_000 })) msgs.push(m);
   * const result = await ack.process(msgs, (batch) => db.insertMany(batch.map((m) => m.json())));
   * console.log(result.outcome, result.acked);
   * ```
   */
  async process(msgs: readonly JsMsg[], write: BatchWrite, options: ProcessOptions = {}): Promise<BatchResult> {
    if (!Array.isArray(msgs)) throw new TypeError("msgs must be an array of JsMsg (a fetched batch)");
    if (typeof write !== "function") throw new TypeError("write must be a function (msgs, ctx) => Promise<void>");
    const list: readonly JsMsg[] = [...msgs];
    if (list.length === 0) return emptyResult();
    const batchId = nextBatchId();

    const signal = combineSignals(this.#options.signal, options.signal);
    const started = performance.now();
    let ctx: WorkContext | undefined;
    let report: void | WriteReport = undefined;
    let writeError: unknown;
    let writeOk = false;
    try {
      // withInProgress, with this batch's number: its heartbeat events and its settled
      // event carry the same batchId.
      report = await superviseWork(
        list,
        (c) => {
          ctx = c;
          return write(list, c);
        },
        this.#policy,
        {
          ...this.#options.heartbeat,
          ...(signal !== undefined ? { signal } : {}),
          ...(this.#options.metrics !== undefined ? { metrics: this.#options.metrics } : {}),
          ...(options.receivedAt !== undefined ? { receivedAt: options.receivedAt } : {}),
          ...(this.#options.connection !== undefined ? { connection: this.#options.connection } : {}),
        },
        sharedScheduler(),
        batchId,
      );
      writeOk = true;
    } catch (err) {
      // Rejected before the write started: a malformed argument is the caller's bug, not a sink
      // failure to NAK over and over. Nothing was sent; the messages stay redeliverable.
      if (ctx === undefined && (err instanceof TypeError || err instanceof InProgressPolicyError)) throw err;
      writeError = err;
    }
    const writeMs = performance.now() - started;
    this.#metrics.observe(MetricNames.BATCH_WRITE_SECONDS, writeMs / 1000);
    const heartbeats = ctx?.heartbeats ?? 0;

    // Classify: which messages committed, which failed and why.
    let failures: Map<JsMsg, unknown>;
    if (writeOk) {
      failures = readReport(report, list);
    } else {
      failures = new Map(list.map((m) => [m, writeError]));
    }
    const cancelled = !writeOk && signal?.aborted === true;
    // Read without creating ctx.signal when the write never asked for it.
    const leaseLost = ctx !== undefined && abortReasonOf(ctx) instanceof LeaseExpiredError;
    if (failures.size > 0) this.#metrics.count(MetricNames.MESSAGES_FAILED_TOTAL, failures.size);

    const closed = batchConnectionClosed(list, this.#options.connection);
    const confirmAck = this.#options.confirmAck !== undefined;
    let pending = false;
    const settling = list.map((m): Promise<MessageResult> | MessageResult => {
      if (!failures.has(m)) {
        if (!confirmAck) return this.#settleSuccessNow(m, closed);
        pending = true;
        return this.#settleSuccess(m, closed);
      }
      const error = failures.get(m);
      // Shutdown: send nothing, the message comes back after AckWait.
      if (cancelled) return { msg: m, action: "left", error };
      if (closed) return { msg: m, action: "left", error, settleError: new ConnectionClosedError() };
      if (error instanceof PermanentSinkError) {
        pending = true;
        return this.#settlePermanent(m, error);
      }
      // After a lost lease another worker may hold the message: a NAK would disturb it.
      return this.#settleTemporary(m, error, leaseLost);
    });
    // Every frame above went out in batch order; only confirmed ACKs and dead letters are awaited.
    const results = pending ? await Promise.all(settling) : (settling as MessageResult[]);

    const result = summarize(results, cancelled, writeOk ? firstError(results) : writeError, heartbeats, writeMs);
    this.#record(result);
    publishEvent("batchSettled", () => ({
      batchId,
      batchSize: list.length,
      outcome: result.outcome,
      acked: result.acked,
      nacked: result.nacked,
      termed: result.termed,
      deadLettered: result.deadLettered,
      left: result.left,
      heartbeats,
      writeMs,
      ...(result.error !== undefined ? { errorName: errorName(result.error) } : {}),
    }));
    return result;
  }

  /**
   * A fetch loop for services that want one: fetches bounded batches, processes each one as
   * soon as its fetch returns (passing each message's receive time on), and retries fetch
   * errors with a bounded backoff. On abort it stops fetching, lets the in-flight batch finish
   * within `shutdownTimeoutMs`, settles it, and resolves. It rejects only when the connection
   * is closed for good.
   *
   * @param consumer - a pull consumer (`js.consumers.get(stream, durable)`).
   * @param write - the host's write.
   * @param options - batch size, fetch expiry, signal, error callback.
   * @returns a promise that resolves after a graceful stop.
   *
   * @example
   * ```ts
   * const shutdown = new AbortController();
   * process.once("SIGTERM", () => shutdown.abort());
   * await ack.run(await js.consumers.get("ORDERS", "writer"), write, { batchSize: 50, signal: shutdown.signal });
   * ```
   */
  async run(consumer: Pick<Consumer, "fetch">, write: BatchWrite, options: RunOptions = {}): Promise<void> {
    if (!consumer || typeof consumer.fetch !== "function") throw new TypeError("consumer must be a pull consumer (js.consumers.get(stream, durable))");
    if (typeof write !== "function") throw new TypeError("write must be a function (msgs, ctx) => Promise<void>");
    const signal = combineSignals(this.#options.signal, options.signal);
    await runLoop(consumer, {
      ...options,
      ...(signal !== undefined ? { signal } : {}),
      metrics: this.#metrics,
      connection: this.#options.connection,
      process: (msgs, receivedAt) => this.process(msgs, write, { ...(signal !== undefined ? { signal } : {}), receivedAt }),
    });
  }

  /**
   * A plain ACK, sent now. A client between connections drops frames without an error, so the
   * result says so (the message will most likely be redelivered; confirmed ACKs retry after the
   * reconnect instead).
   */
  #settleSuccessNow(m: JsMsg, closed: boolean): MessageResult {
    if (closed) return { msg: m, action: "left", settleError: new ConnectionClosedError() };
    const down = connectionDown(m) === true;
    try {
      ackNow(m);
    } catch (settleError) {
      return { msg: m, action: "acked", settleError };
    }
    return down ? { msg: m, action: "acked", settleError: new DisconnectedError() } : { msg: m, action: "acked" };
  }

  /** An ACK by the configured mode: confirmed (awaited, retried) or plain. */
  async #settleSuccess(m: JsMsg, closed: boolean): Promise<MessageResult> {
    const confirmAck = this.#options.confirmAck;
    if (confirmAck === undefined) return this.#settleSuccessNow(m, closed);
    if (closed) return { msg: m, action: "left", settleError: new ConnectionClosedError() };
    let outcome: AckOutcome;
    try {
      outcome = await ackConfirmed(m, confirmAck, this.#options.connection);
    } catch (err) {
      outcome = { confirmed: false, error: err };
    }
    return { msg: m, action: "acked", confirmed: outcome.confirmed, ...(outcome.error !== undefined ? { settleError: outcome.error } : {}) };
  }

  #settleTemporary(m: JsMsg, error: unknown, leaseLost: boolean): MessageResult {
    const policy = this.#options.onTemporaryFailure ?? { action: "nak" };
    if (policy.action === "leave" || leaseLost) return { msg: m, action: "left", error };
    try {
      const d = nakWithDelay(m, policy.delayMs, this.#nakBackOff);
      return { msg: m, action: "nacked", error, requestedDelayMs: policy.delayMs ?? 0, effectiveDelayMs: d.effectiveMs };
    } catch (settleError) {
      return { msg: m, action: "left", error, settleError };
    }
  }

  async #settlePermanent(m: JsMsg, error: unknown): Promise<MessageResult> {
    const target = this.#options.deadLetter;
    if (!target) {
      try {
        termWithReason(m, `permanent failure: ${errorName(error)}`, this.#options.connection);
        return { msg: m, action: "termed", error };
      } catch (settleError) {
        return { msg: m, action: "left", error, settleError };
      }
    }
    try {
      await publishDeadLetter(m, target, errorName(error));
    } catch (settleError) {
      // The copy is not confirmed: keep the original redeliverable.
      const retry = this.#settleTemporary(m, error, false);
      return { ...retry, settleError };
    }
    const acked = await this.#settleSuccess(m, false);
    return { ...acked, action: "dead_lettered", error };
  }

  #record(r: BatchResult): void {
    const m = this.#metrics;
    m.count(MetricNames.MESSAGES_ACKED_TOTAL, r.acked);
    m.count(MetricNames.MESSAGES_NACKED_TOTAL, r.nacked);
    m.count(MetricNames.MESSAGES_TERMED_TOTAL, r.termed);
    m.count(MetricNames.MESSAGES_DEAD_LETTERED_TOTAL, r.deadLettered);
    m.count(MetricNames.MESSAGES_LEFT_TOTAL, r.left);
    let settleFailures = 0;
    for (const x of r.messages) {
      if (x.settleError !== undefined) settleFailures += 1;
      if (x.effectiveDelayMs !== undefined) m.observe(MetricNames.NAK_DELAY_SECONDS, x.effectiveDelayMs / 1000);
    }
    m.count(MetricNames.SETTLE_FAILURES_TOTAL, settleFailures);
  }
}

function validateOptions(options: unknown): CommitThenAckOptions {
  if (options === null || typeof options !== "object") throw new TypeError("options must be an object");
  const o = options as CommitThenAckOptions;
  const ip = o.inProgress as unknown;
  if (ip !== undefined && !isVerifiedPolicy(ip) && !(typeof ip === "object" && ip !== null && (ip as { enabled?: unknown }).enabled === false)) {
    throw new TypeError(
      "options.inProgress must come from verifyInProgressPolicy (or be { enabled: false }); CommitThenAck.forConsumer verifies it against the consumer for you",
    );
  }
  const t = o.onTemporaryFailure as unknown;
  if (t !== undefined) {
    const a = t as { action?: unknown; delayMs?: unknown };
    if (!a || typeof a !== "object" || (a.action !== "nak" && a.action !== "leave")) {
      throw new TypeError(`options.onTemporaryFailure.action must be "nak" or "leave", got ${JSON.stringify(a?.action)}`);
    }
    if (a.action === "nak" && a.delayMs !== undefined && !(Number.isInteger(a.delayMs) && (a.delayMs as number) >= 0 && (a.delayMs as number) <= 86_400_000)) {
      throw new TypeError(`options.onTemporaryFailure.delayMs must be an integer in 0 ..= 86400000 (a day), got ${String(a.delayMs)}`);
    }
  }
  const dl = o.deadLetter as unknown;
  if (dl !== undefined) {
    const d = dl as { js?: { publish?: unknown }; subject?: unknown };
    if (!d || typeof d !== "object" || !d.js || typeof d.js.publish !== "function") {
      throw new TypeError("options.deadLetter.js must be a JetStream client (jetstream(nc)): its publish waits for the stream's ack");
    }
    if (typeof d.subject !== "string" || d.subject === "" || /[\s*>]/.test(d.subject)) {
      throw new TypeError(`options.deadLetter.subject must be a literal subject (no spaces or wildcards), got ${JSON.stringify(d.subject)}`);
    }
  }
  if (o.signal !== undefined && !(o.signal instanceof AbortSignal)) throw new TypeError("options.signal must be an AbortSignal");
  const ca = o.confirmAck as unknown;
  if (ca !== undefined) {
    const c = ca as { timeoutMs?: unknown; retries?: unknown };
    if (!c || typeof c !== "object") throw new TypeError("options.confirmAck must be an object { timeoutMs?, retries? }");
    if (c.timeoutMs !== undefined && !(Number.isInteger(c.timeoutMs) && (c.timeoutMs as number) >= 1 && (c.timeoutMs as number) <= 60_000)) {
      throw new TypeError(`options.confirmAck.timeoutMs must be an integer in 1 ..= 60000, got ${String(c.timeoutMs)}`);
    }
    if (c.retries !== undefined && !(Number.isInteger(c.retries) && (c.retries as number) >= 0 && (c.retries as number) <= 10)) {
      throw new TypeError(`options.confirmAck.retries must be an integer in 0 ..= 10, got ${String(c.retries)}`);
    }
    if ((c.retries ?? 2) !== 0 && (!o.connection || typeof o.connection.request !== "function")) {
      throw new TypeError("options.confirmAck retries publish +ACK requests themselves and need options.connection (the NatsConnection); set retries: 0 to go without");
    }
  }
  const conn = o.connection as unknown;
  if (conn !== undefined && (conn === null || typeof conn !== "object" || typeof (conn as { isClosed?: unknown }).isClosed !== "function")) {
    throw new TypeError("options.connection must be the NatsConnection the messages arrive on (nc from connect())");
  }
  if (o.backOff !== undefined && o.backOff !== "reject" && o.backOff !== "aware") {
    throw new TypeError(`options.backOff must be "reject" or "aware", got ${JSON.stringify(o.backOff)}`);
  }
  return o;
}

function readReport(report: unknown, list: readonly JsMsg[]): Map<JsMsg, unknown> {
  const failures = new Map<JsMsg, unknown>();
  if (report === undefined || report === null) return failures;
  const failed = (report as WriteReport).failed;
  const members = new Set(list);
  const malformed =
    typeof report !== "object" ||
    !Array.isArray(failed) ||
    failed.some((f) => !f || typeof f !== "object" || !members.has(f.msg));
  if (malformed) {
    // A report the library cannot read must not turn into an ACK: nothing counts as committed.
    const error = new TypeError("the write returned a malformed report: expected { failed: [{ msg, error }] } with messages of this batch");
    for (const m of list) failures.set(m, error);
    return failures;
  }
  for (const f of failed) failures.set(f.msg, f.error);
  return failures;
}

function summarize(
  results: readonly MessageResult[],
  cancelled: boolean,
  error: unknown,
  heartbeats: number,
  writeMs: number,
): BatchResult & { readonly outcome: Exclude<BatchOutcome, "empty"> } {
  // One pass: the count of each action, and whether every message got the same one.
  const counts = { acked: 0, nacked: 0, termed: 0, dead_lettered: 0, left: 0 };
  const first = results[0]?.action;
  let same = first !== undefined;
  for (const r of results) {
    counts[r.action] += 1;
    if (r.action !== first) same = false;
  }
  const outcome: Exclude<BatchOutcome, "empty"> = cancelled ? "cancelled" : same && first !== undefined ? first : "partial";
  return {
    outcome,
    acked: counts.acked,
    nacked: counts.nacked,
    termed: counts.termed,
    deadLettered: counts.dead_lettered,
    left: counts.left,
    ...(error !== undefined ? { error } : {}),
    heartbeats,
    writeMs,
    messages: Object.freeze(results),
  };
}

function firstError(results: readonly MessageResult[]): unknown {
  return results.find((r) => r.error !== undefined)?.error;
}

function emptyResult(): BatchResult {
  return { outcome: "empty", acked: 0, nacked: 0, termed: 0, deadLettered: 0, left: 0, heartbeats: 0, writeMs: 0, messages: [] };
}

function combineSignals(a: AbortSignal | undefined, b: AbortSignal | undefined): AbortSignal | undefined {
  if (a && b) return AbortSignal.any([a, b]);
  return a ?? b;
}

/** The manager's own connection, when the client exposes it (nats.js keeps it as `nc`). */
function managerConnection(jsm: unknown): CommitThenAckOptions["connection"] {
  const nc = (jsm as { nc?: unknown } | null)?.nc as CommitThenAckOptions["connection"] | undefined;
  return nc && typeof nc.request === "function" && typeof nc.isClosed === "function" ? nc : undefined;
}
