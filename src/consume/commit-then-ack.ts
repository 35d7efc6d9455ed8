/**
 * CommitThenAck: what a host wires between its JetStream consumer and its sink, the facade over
 * the stages. The write runs under withInProgress; nothing is acknowledged before the write
 * resolved, and every failure path leaves the message redeliverable, dead-lettered or
 * terminated — never lost.
 */
import type { JetStreamManager, JsMsg } from "@nats-io/jetstream";
import { ConsumerPolicyError } from "../errors.js";
import type { WorkContext } from "../lease/work-context.js";
import type { JetStreamManagerLike, JsMsgLike, PullConsumerLike } from "../nats/client-types.js";
import { connectionOfConsumer, serverVersionOf } from "../nats/connection-state.js";
import { DEFAULT_IN_PROGRESS_POLICY, type DisabledInProgressPolicy, type VerifiedInProgressPolicy } from "../policy/in-progress-policy.js";
import { readOptionKeys } from "../policy/option-keys.js";
import { isVerifiedPolicy } from "../policy/verified-policies.js";
import type { BatchResult, BatchWrite } from "../settle/batch-result.js";
import { DeliveryLimits } from "../settle/delivery-limits.js";
import { Settler } from "../settle/settler.js";
import type { WriteReportCheck } from "../settle/write-check.js";
import { MetricsRecorder } from "../telemetry/metrics-recorder.js";
import { BatchRunner } from "./batch-runner.js";
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
import { shortestWindowMs } from "./intake-plan.js";
import { threadLinkProblem } from "./link-check.js";
import { setUpLoop, type LoopConsumer, type LoopInputs, type LoopSetup } from "./loop-setup.js";
import { runEachMessage } from "./run-each.js";
import { runBatches } from "./run-loop.js";
import {
  callGuarded,
  checkPullAgainstBinding,
  validateRunEachOptions,
  validateRunOptions,
  type LoopSettings,
  type RunEachOptions,
  type RunOptions,
} from "./run-options.js";
import { SignalFanout } from "./signal-fanout.js";

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
  readonly #runner: BatchRunner;
  /** Each consumer's MaxDeliver: the host's, bound, learnt by a loop, or read once from the server. */
  readonly #limits: DeliveryLimits;
  /** The instance's signal, handed to each call through one listener. */
  readonly #signal: SignalFanout;
  #binding: ConsumerBinding | undefined;

  /**
   * @param options - see {@link CommitThenAckOptions}; validated at once, unknown keys refused.
   * @throws `TypeError` naming the option, the value and the fix.
   */
  constructor(options: CommitThenAckOptions = {}) {
    this.#options = validateOptions(options);
    this.#policy = this.#options.inProgress ?? { enabled: false };
    this.#metrics = MetricsRecorder.for(this.#options.metrics);
    this.#signal = new SignalFanout(this.#options.signal);
    const verified = isVerifiedPolicy(this.#policy) ? this.#policy : undefined;
    const mode = this.#options.backOff ?? verified?.backOff ?? "reject";
    const timing = this.#options.timing ?? verified?.timing;
    const nakBackOff = mode === "aware" && timing?.backOffMs && timing.backOffMs.length > 0 ? timing.backOffMs : undefined;
    const settler = new Settler({
      connection: this.#options.connection,
      confirmAck: this.#options.confirmAck === false ? undefined : this.#options.confirmAck,
      onTemporaryFailure: this.#options.onTemporaryFailure ?? { action: "nak" },
      deadLetter: this.#options.deadLetter,
      nakBackOff,
      limits: (this.#limits = new DeliveryLimits(this.#options.maxDeliver ?? timing?.maxDeliver, this.#options.connection)),
      metrics: this.#metrics,
      random: Math.random,
    });
    this.#runner = new BatchRunner({
      policy: this.#policy,
      heartbeat: this.#options.heartbeat,
      metricsSink: this.#options.metrics,
      metrics: this.#metrics,
      settler,
      connection: this.#options.connection,
      tracing: this.#options.tracing,
      names: () => ({ stream: this.#binding?.stream, consumer: this.#binding?.consumer }),
      shutdownTimeoutMs: this.#shutdownTimeoutMs,
      windowMs: shortestWindowMs(timing?.ackWaitMs, timing?.backOffMs),
      retryInPlace: this.#options.onTemporaryFailure?.retryInPlace !== false,
    });
    // heartbeat.thread: true copies the host's connection now, so a connection that cannot be
    // copied is refused here rather than at the first batch.
    this.#runner.learnThreadSource(this.#options.connection);
  }

  /**
   * Bind-only setup for least-privilege services: reads the durable consumer's info (create
   * the manager with `jetstreamManager(nc, { checkAPI: false })` if the identity may not read
   * account info), verifies the policy against its effective AckWait and BackOff, and fails
   * closed before anything is fetched. With `deadLetter` it also looks up which stream captures
   * the dead-letter subject (`streams.find`, skipped after 2 s or without the permission).
   *
   * @param jsm - a JetStream manager (`await jetstreamManager(nc)`, or `await
   *   nc.jetstreamManager()` with `nats` 2.x): `consumers.info` is called, and `streams.find`
   *   with `deadLetter`.
   * @param stream - the stream name.
   * @param consumer - the durable consumer's name.
   * @param options - instance options plus the policy to verify and the expected AckWait.
   * @returns a ready instance.
   * @throws {@link ConsumerPolicyError} when the consumer is missing, unreadable, not durable,
   *   not explicit-ack, its AckWait drifted or does not fit the interval, it has a BackOff
   *   (unless `backOff: "aware"`), its `inactive_threshold` would let a server before 2.11.7
   *   delete it between two beats (`inactive_threshold_too_short`), or the dead-letter subject
   *   is captured by the source stream (`dead_letter_loop`) or by no stream (`dead_letter_uncaptured`).
   * @throws `TypeError` for bad arguments, `jsm` not being a JetStream manager included.
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
    jsm: JetStreamManagerLike,
    stream: string,
    consumer: string,
    options: ForConsumerOptions = {},
  ): Promise<CommitThenAck> {
    if (typeof stream !== "string" || stream === "") throw new TypeError("stream must be a non-empty stream name");
    if (typeof consumer !== "string" || consumer === "") throw new TypeError("consumer must be a non-empty durable consumer name");
    if (typeof (jsm as Partial<JetStreamManager> | null | undefined)?.consumers?.info !== "function") {
      // A JetStream client (jetstream(nc)) or a core connection has no consumers.info: say so, not "grant permission".
      throw new TypeError("jsm must be a JetStream manager (await jetstreamManager(nc)), not a JetStream client or a connection");
    }
    const { inProgress, ackWaitMs, ...rest } = readOptionKeys("forConsumer options", options, FOR_CONSUMER_KEYS, "forConsumer") as ForConsumerOptions;
    // Every option is checked before the first request: a typo fails at once, not after I/O.
    validateOptions(rest);
    if (ackWaitMs !== undefined && !(typeof ackWaitMs === "number" && Number.isFinite(ackWaitMs) && ackWaitMs > 0)) {
      throw new TypeError(`options.ackWaitMs must be the AckWait the host expects, in milliseconds above 0, got ${String(ackWaitMs)}`);
    }
    // The manager's connection tells the server version; it is not taken as the messages'
    // connection, which may be another one (a setup connection closed later).
    const backOffMode = rest.backOff ?? (isVerifiedPolicy(inProgress) ? inProgress.backOff : undefined);
    const serverVersion = serverVersionOf(rest.connection) ?? serverVersionOf((jsm as { nc?: unknown } | null)?.nc);
    const inspection = await inspectConsumer(jsm, stream, consumer, {
      ...(inProgress !== undefined ? { inProgress } : {}),
      // As in the constructor: a policy verified in BackOff-aware mode brings its mode along.
      ...(backOffMode !== undefined ? { backOff: backOffMode } : {}),
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
   * @typeParam M - the client's message type, inferred from `msgs`: `write` and the result
   *   see the same messages.
   * @typeParam R - what `write` returns; a value with a `failed` key must be a
   *   {@link WriteReport} (see {@link WriteReportCheck}), or the call does not compile.
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
  process<M extends JsMsgLike, R>(msgs: readonly M[], write: (msgs: readonly M[], ctx: WorkContext) => R & WriteReportCheck<R>, options?: ProcessOptions<M>): Promise<BatchResult<M>>;
  async process(msgs: readonly JsMsg[], write: BatchWrite, options: ProcessOptions = {}): Promise<BatchResult> {
    if (!Array.isArray(msgs)) throw new TypeError("msgs must be an array of JsMsg (a fetched batch)");
    if (typeof write !== "function") throw new TypeError("write must be a function (msgs, ctx) => Promise<void>");
    const o = validateProcessOptions(options);
    const base = this.#signal.child();
    try {
      return await this.#runner.process([...msgs], write, combineSignals(base.signal, o.signal), o.receivedAt, "process");
    } finally {
      base.release();
    }
  }

  /**
   * Writes whose shutdown bound passed while they were still running (see
   * `MessageResult.action` `abandoned`) and whose outcome is still awaited.
   */
  get abandoned(): number {
    return this.#runner.abandoned;
  }

  /**
   * Resolves once every write this instance abandoned at its shutdown bound has ended and was
   * settled: a late commit ACKed, a late failure settled by the decision table. Call it before
   * closing the connection, or the late frames cannot be sent (the messages are then
   * redelivered after AckWait). Bounded by `signal`.
   *
   * @param signal - stops waiting (the writes are still settled if the connection lives).
   *
   * @example
   * ```ts
   * await ack.run(consumer, write, { signal: shutdown.signal });
   * await ack.drain(AbortSignal.timeout(10_000)); // late commits of abandoned writes get their ACK
   * await nc.drain();
   * ```
   */
  async drain(signal?: AbortSignal): Promise<void> {
    if (signal !== undefined && !(signal instanceof AbortSignal)) throw new TypeError("drain(signal): signal must be an AbortSignal");
    await this.#runner.drain(signal);
  }

  /** How long work and settling may take after a shutdown began. */
  get #shutdownTimeoutMs(): number {
    return isVerifiedPolicy(this.#policy) ? this.#policy.shutdownTimeoutMs : DEFAULT_IN_PROGRESS_POLICY.shutdownTimeoutMs;
  }

  /**
   * A consumer loop for services that want one: one pull at a time for what the loop can start
   * (at most `concurrency × batchSize` messages held, and the consumer's `max_ack_pending`), a
   * batch when that pull ends by itself — full, or at its expiry — and up to `concurrency`
   * batches written at once, each under the heartbeat policy and settled by the decision table.
   * A pull is never cut short: the server may be delivering into it, and a message it hands to
   * a subscription that is gone is lost on that delivery. So the pull's expiry is what bounds a
   * partial batch's wait: `expiresMs`, clamped to the heartbeat interval (heartbeats on) or a
   * quarter of the consumer's AckWait (off; learnt from the consumer when the instance was not
   * made by `forConsumer`), never below the client's 1 s. Messages waiting for their batch are
   * heartbeated from their arrival; a batch's `maxHeartbeats` budget counts from its write's
   * start. One delivery per stream sequence goes into a batch. Pull errors are retried with a
   * bounded backoff and reported to `onError` (a deleted or paused consumer included); every
   * settled batch goes to `onBatch`.
   *
   * On abort it sends no new pull; the open one ends by itself (within its expiry) and what it
   * brought is written, not handed back (that would spend a delivery — the last one, for some).
   * Writes in flight are told through their `ctx.signal` and keep their lease while they drain
   * (beats go on, never past `maxHeartbeats`). A write still running `shutdownTimeoutMs` after
   * the abort is abandoned: its messages get no frame while it may still commit, and the
   * instance settles its late outcome when it ends (see {@link CommitThenAck.drain}). Writes of
   * what the open pull brought (however late the server delivered it) get until
   * `shutdownTimeoutMs` after that pull ended before their signal aborts, and as much again
   * before they are abandoned. So `run` resolves at most the pull expiry (plus up to a second
   * for a subscription's last refill to end) plus `2 × shutdownTimeoutMs` after the abort, even
   * if a write never settles, and then flushes the frames it owes (waiting for the server at
   * most `shutdownTimeoutMs`, at least a second). It rejects only for bad arguments (before the
   * first pull, pull options the client itself refuses at the first pull, or a delivered
   * message the library cannot supervise, such as one without `working()` from an untyped
   * wrapper: the loop stops pulling, lets the other writes settle, and rejects with that
   * `TypeError`; nothing was sent for the message, which stays redeliverable) or when the
   * connection is closed for good (or draining: it refuses every pull until it closes).
   *
   * A consumer with priority groups (nats-server 2.11+) is pulled through `pull.group`; with
   * `forConsumer`, a pull that names none of its groups is refused before the first pull. A
   * `pinned_client` consumer is read through one long-lived subscription that keeps the pin
   * (a new pull would carry none), whose refills ask only for what the loop can start.
   *
   * @typeParam M - the client's message type, inferred from the consumer.
   * @typeParam R - what `write` returns; a value with a `failed` key must be a
   *   {@link WriteReport} (see {@link WriteReportCheck}), or the call does not compile.
   * @param consumer - a pull consumer (`js.consumers.get(stream, durable)`).
   * @param write - the host's write for one batch.
   * @param options - batch size, pull expiry, concurrency, signal, callbacks, pull options.
   * @returns a promise that resolves after a graceful stop.
   * @throws `TypeError` for bad options; {@link ConsumerPolicyError} (`priority_group_required`;
   *   `inactive_threshold_too_short` and `link_too_slow` before the first pull).
   *
   * @example
   * ```ts
   * const shutdown = new AbortController();
   * process.once("SIGTERM", () => shutdown.abort());
   * await ack.run(await js.consumers.get("ORDERS", "writer"), write, {
   *   batchSize: 100,
   *   concurrency: 4,
   *   signal: shutdown.signal,
   *   onError: (err, ctx) => log.warn({ during: ctx.during, name: (err as Error).name }),
   * });
   * ```
   */
  run<M extends JsMsgLike, R>(consumer: PullConsumerLike<M>, write: (msgs: readonly M[], ctx: WorkContext) => R & WriteReportCheck<R>, options?: RunOptions<M>): Promise<void>;
  async run(consumer: LoopConsumer, write: BatchWrite, options: RunOptions = {}): Promise<void> {
    if (!consumer || typeof consumer.fetch !== "function") throw new TypeError("consumer must be a pull consumer (js.consumers.get(stream, durable))");
    if (typeof write !== "function") throw new TypeError("write must be a function (msgs, ctx) => Promise<void>");
    const settings = validateRunOptions(options);
    const loop = await this.#setUpLoop(consumer, settings, "batch");
    try {
      await runBatches(loop.setup.settings, {
        ...loop.setup.base,
        intake: loop.setup.intake(),
        process: (msgs, receivedAt, signal, onSent, ids) =>
          this.#runner.process(msgs, write, signal, receivedAt, "run", { onSent, confirm: loop.setup.base.confirm, acking: loop.setup.base.acking, ids }),
      });
    } finally {
      loop.release();
    }
  }

  /**
   * A per-message consumer loop: `handle(msg, ctx)` for every message, at most `concurrency`
   * at once. It pulls only for free handlers, so every message starts its handler the moment
   * it arrives — none waits in a queue of the loop's own, spending its lease and heartbeat
   * budget there — and while one pull is open another goes out once half a pull's worth of
   * handlers is free. Each message is supervised on its own lease (heartbeats for every message
   * in flight share the one scheduler timer) and settled by the decision table as a batch of
   * one when its handler settles: in the next turn of the event loop, together with every
   * message whose handler ended in the same turn, so their frames share one socket write (at
   * once with beats from the heartbeat thread). A handler's return value means success (only a
   * thrown error is a failure); throw {@link TemporarySinkError} or {@link PermanentSinkError} to
   * choose the settle path. Pull expiry, shutdown, abandoned handlers, errors and priority
   * groups as for {@link CommitThenAck.run}; every settled message goes to `onResult`.
   *
   * @typeParam M - the client's message type, inferred from the consumer.
   * @param consumer - a pull consumer (`js.consumers.get(stream, durable)`).
   * @param handle - the host's work for one message; what it returns is not read.
   * @param options - concurrency, pull size and expiry, signal, callbacks, pull options.
   * @returns a promise that resolves after a graceful stop.
   * @throws `TypeError` for bad options; {@link ConsumerPolicyError} (`priority_group_required`;
   *   `inactive_threshold_too_short` and `link_too_slow` before the first pull).
   *
   * @example
   * ```ts
   * await ack.runEach(await js.consumers.get("ORDERS", "notifier"), async (msg, ctx) => {
   *   const res = await fetch("http://mailer.internal/send", { method: "POST", body: msg.data, signal: ctx.signal });
   *   if (res.status >= 500) throw new TemporarySinkError(`mailer answered ${res.status}`);
   *   if (!res.ok) throw new PermanentSinkError(`mailer refused the message (${res.status})`);
   * }, { concurrency: 32, signal: shutdown.signal });
   * ```
   */
  runEach<M extends JsMsgLike>(consumer: PullConsumerLike<M>, handle: (msg: M, ctx: WorkContext) => unknown, options?: RunEachOptions<M>): Promise<void>;
  async runEach(consumer: LoopConsumer, handle: (msg: JsMsgLike, ctx: WorkContext) => unknown, options: RunEachOptions = {}): Promise<void> {
    if (!consumer || typeof consumer.fetch !== "function") throw new TypeError("consumer must be a pull consumer (js.consumers.get(stream, durable))");
    if (typeof handle !== "function") throw new TypeError("handle must be a function (msg, ctx) => Promise<unknown>");
    const settings = validateRunEachOptions(options);
    const loop = await this.#setUpLoop(consumer, settings, "each");
    try {
      await runEachMessage(loop.setup.settings, {
        ...loop.setup.base,
        processOne: (m, receivedAt, signal, handled) =>
          this.#runner.process(
            [m],
            async (msgs, ctx) => {
              // A handler's value is never a report: only a thrown error fails its message.
              await handle(msgs[0]!, ctx);
              // Its slot is free now, while the message is acked; a failed one keeps its slot
              // until settled (it may be tried again in place).
              handled();
            },
            signal,
            receivedAt,
            "runEach",
            { confirm: loop.setup.base.confirm, acking: loop.setup.base.acking },
          ),
      });
    } finally {
      loop.release();
    }
  }

  /** What both loops share: the checks before the first pull, the combined signal, the consumer's facts. */
  async #setUpLoop(consumer: LoopConsumer, settings: LoopSettings, mode: "batch" | "each"): Promise<{ setup: LoopSetup; release(): void }> {
    checkPullAgainstBinding(settings.pull, this.#binding);
    // heartbeat.thread: true without `connection` copies the consumer's, before the first pull.
    this.#runner.learnThreadSource(connectionOfConsumer(consumer));
    // The loop holds one child of the instance's signal for its whole life; released when it ends.
    const child = this.#signal.child();
    const intervalMs = isVerifiedPolicy(this.#policy) && this.#policy.enabled ? this.#policy.intervalMs : undefined;
    try {
      const setup = await setUpLoop(
        consumer,
        { ...settings, signal: combineSignals(child.signal, settings.signal) },
        {
          binding: this.#binding,
          intervalMs,
          metrics: this.#metrics,
          connection: this.#options.connection as LoopInputs["connection"],
          shutdownTimeoutMs: this.#shutdownTimeoutMs,
          sinkDown: () => this.#runner.retrying > 0,
          confirmAck: this.#options.confirmAck,
          onRecovered: (l) => this.#runner.onRecovered(l),
        },
        mode,
      );
      const { stream, consumer: name, maxDeliver, ackWaitMs, backOffMs } = setup.facts;
      // What the consumer object already knew: no read at settle time.
      if (stream !== undefined && name !== undefined && maxDeliver !== undefined) this.#limits.learn(stream, name, maxDeliver);
      this.#runner.learnWindow(shortestWindowMs(ackWaitMs, backOffMs));
      const thread = await this.#runner.holdThread((err) => void callGuarded(settings.onError, err, Object.freeze({ during: "start" as const })));
      // The beats leave on the thread's own link: it must fit the lease as the host's must.
      const slow = thread.rttMs === undefined ? undefined : threadLinkProblem(thread.rttMs, intervalMs, shortestWindowMs(ackWaitMs, backOffMs));
      if (slow !== undefined) {
        thread.release();
        throw new ConsumerPolicyError("link_too_slow", { stream: stream ?? "?", consumer: name ?? "?", message: slow });
      }
      return {
        setup,
        release: () => {
          thread.release();
          child.release();
        },
      };
    } catch (err) {
      child.release();
      throw err;
    }
  }
}

function combineSignals(a: AbortSignal | undefined, b: AbortSignal | undefined): AbortSignal | undefined {
  if (a && b) return AbortSignal.any([a, b]);
  return a ?? b;
}
