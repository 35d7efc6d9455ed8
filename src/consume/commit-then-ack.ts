/**
 * CommitThenAck: what a host wires between its JetStream consumer and its sink, the facade over
 * the stages. The write runs under withInProgress; nothing is acknowledged before the write
 * resolved, and every failure path leaves the message redeliverable, dead-lettered or
 * terminated — never lost.
 */
import type { Consumer, JetStreamManager, JsMsg } from "@nats-io/jetstream";
import { InProgressPolicyError, LeaseExpiredError } from "../errors.js";
import { sharedScheduler } from "../lease/scheduler.js";
import type { WorkContext } from "../lease/work-context.js";
import { abortReasonOf } from "../lease/work-run.js";
import { superviseWork } from "../lease/with-in-progress.js";
import { serverVersionOf } from "../nats/connection-state.js";
import { DEFAULT_IN_PROGRESS_POLICY, type DisabledInProgressPolicy, type VerifiedInProgressPolicy } from "../policy/in-progress-policy.js";
import { readOptionKeys } from "../policy/option-keys.js";
import { isVerifiedPolicy } from "../policy/verified-policies.js";
import type { BatchResult, BatchWrite } from "../settle/batch-result.js";
import { settleBatch } from "../settle/settle-batch.js";
import { ShutdownBudget } from "../settle/settle-budget.js";
import { Settler } from "../settle/settler.js";
import { emptyResult } from "../settle/summarize.js";
import { nextBatchId } from "../telemetry/diagnostics.js";
import { MetricNames } from "../telemetry/metric-names.js";
import { MetricsRecorder } from "../telemetry/metrics-recorder.js";
import {
  FOR_CONSUMER_KEYS,
  validateOptions,
  validateProcessOptions,
  type CommitThenAckOptions,
  type ForConsumerOptions,
  type ProcessOptions,
} from "./commit-then-ack-options.js";
import { readBinding, type ConsumerBinding } from "./consumer-binding.js";
import { checkDeadLetterSubject } from "./dead-letter-check.js";
import { inspectConsumer } from "./inspect.js";
import { runLoop, validateRunOptions, type RunOptions } from "./run-loop.js";

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
  readonly #settler: Settler;
  #binding: ConsumerBinding | undefined;

  /**
   * @param options - see {@link CommitThenAckOptions}; validated at once, unknown keys refused.
   * @throws `TypeError` naming the option, the value and the fix.
   */
  constructor(options: CommitThenAckOptions = {}) {
    this.#options = validateOptions(options);
    this.#policy = this.#options.inProgress ?? { enabled: false };
    this.#metrics = MetricsRecorder.for(this.#options.metrics);
    const verified = isVerifiedPolicy(this.#policy) ? this.#policy : undefined;
    const mode = this.#options.backOff ?? verified?.backOff ?? "reject";
    const timing = this.#options.timing ?? verified?.timing;
    const nakBackOff = mode === "aware" && timing?.backOffMs && timing.backOffMs.length > 0 ? timing.backOffMs : undefined;
    this.#settler = new Settler({
      connection: this.#options.connection,
      confirmAck: this.#options.confirmAck,
      onTemporaryFailure: this.#options.onTemporaryFailure ?? { action: "nak" },
      deadLetter: this.#options.deadLetter,
      nakBackOff,
      maxDeliver: this.#options.maxDeliver ?? timing?.maxDeliver,
      ackWaitMs: timing?.ackWaitMs,
      metrics: this.#metrics,
      random: Math.random,
    });
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
    const { inProgress, ackWaitMs, ...rest } = readOptionKeys("forConsumer options", options, FOR_CONSUMER_KEYS) as ForConsumerOptions;
    // Every option is checked before the first request: a typo fails at once, not after I/O.
    validateOptions(rest);
    if (ackWaitMs !== undefined && !(typeof ackWaitMs === "number" && Number.isFinite(ackWaitMs) && ackWaitMs > 0)) {
      throw new TypeError(`options.ackWaitMs must be the AckWait the host expects, in milliseconds above 0, got ${String(ackWaitMs)}`);
    }
    // The manager's connection tells the server version; it is not taken as the messages'
    // connection, which may be another one (a setup connection closed later).
    const serverVersion = serverVersionOf(rest.connection) ?? serverVersionOf((jsm as { nc?: unknown } | null)?.nc);
    const inspection = await inspectConsumer(jsm, stream, consumer, {
      ...(inProgress !== undefined ? { inProgress } : {}),
      ...(rest.backOff !== undefined ? { backOff: rest.backOff } : {}),
      ...(ackWaitMs !== undefined ? { ackWaitMs } : {}),
      ...(serverVersion !== undefined ? { serverVersion } : {}),
    });
    if (rest.deadLetter !== undefined) await checkDeadLetterSubject(jsm, stream, consumer, rest.deadLetter.subject);
    const instance = new CommitThenAck({ ...rest, inProgress: inspection.policy, timing: inspection.timing });
    instance.#binding = readBinding(stream, consumer, inspection.info, inspection.timing);
    return instance;
  }

  /**
   * The durable consumer this instance was bound to by {@link CommitThenAck.forConsumer} (its
   * limits, whether it is paused, its priority groups); `undefined` for an instance made with
   * `new`.
   */
  get consumer(): ConsumerBinding | undefined {
    return this.#binding;
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
    const o = validateProcessOptions(options);
    return await this.#process([...msgs], write, combineSignals(this.#options.signal, o.signal), o.receivedAt);
  }

  async #process(list: readonly JsMsg[], write: BatchWrite, signal: AbortSignal | undefined, receivedAt: ProcessOptions["receivedAt"]): Promise<BatchResult> {
    if (list.length === 0) return emptyResult();
    const batchId = nextBatchId();
    const started = performance.now();
    let ctx: WorkContext | undefined;
    let result: unknown;
    let writeError: unknown;
    let writeOk = false;
    try {
      // withInProgress, with this batch's number: its heartbeat events and its settled
      // event carry the same batchId.
      result = await superviseWork(
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
          ...(receivedAt !== undefined ? { receivedAt } : {}),
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
    const lease = (ctx as WorkContext | undefined)?.lease;
    // After a shutdown began, settling gets the shutdown bound too.
    const budget = new ShutdownBudget(signal, this.#shutdownTimeoutMs);
    try {
      return await settleBatch(
        list,
        {
          ok: writeOk,
          result,
          error: writeError,
          cancelled: !writeOk && signal?.aborted === true,
          // Read without creating ctx.signal when the write never asked for it.
          leaseLost: ctx !== undefined && abortReasonOf(ctx) instanceof LeaseExpiredError,
          leaseDeadline: lease === undefined ? undefined : performance.now() + lease.remainingMs(),
          heartbeats: (ctx as WorkContext | undefined)?.heartbeats ?? 0,
          writeMs,
        },
        { settler: this.#settler, metrics: this.#metrics, connection: this.#options.connection, budget, batchId },
      );
    } finally {
      budget.dispose();
    }
  }

  /** How long work and settling may take after a shutdown began. */
  get #shutdownTimeoutMs(): number {
    return isVerifiedPolicy(this.#policy) ? this.#policy.shutdownTimeoutMs : DEFAULT_IN_PROGRESS_POLICY.shutdownTimeoutMs;
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
    const o = validateRunOptions(options);
    const signal = combineSignals(this.#options.signal, o.signal);
    await runLoop(consumer, {
      ...o,
      ...(signal !== undefined ? { signal } : {}),
      metrics: this.#metrics,
      connection: this.#options.connection,
      shutdownTimeoutMs: this.#shutdownTimeoutMs,
      process: (msgs, receivedAt, batchSignal) => this.#process(msgs, write, batchSignal, receivedAt),
    });
  }
}

function combineSignals(a: AbortSignal | undefined, b: AbortSignal | undefined): AbortSignal | undefined {
  if (a && b) return AbortSignal.any([a, b]);
  return a ?? b;
}
