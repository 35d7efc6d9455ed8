/**
 * One batch from write to frames: the host's write under the heartbeat policy, then the settle
 * table. A write still running at its shutdown bound is abandoned: its outcome is unknown, so
 * its messages get no frame while it runs (an ACK could precede a failed commit, a NAK or a
 * dead-letter copy could follow a commit); the runner keeps watching it and settles its late
 * outcome by the same table when it comes.
 */
import type { AckingDeliveries, StoredIds } from "../settle/acking-deliveries.js";
import type { JsMsg } from "@nats-io/jetstream";
import { errorName, HeartbeatThreadError, InProgressPolicyError, LeaseExpiredError, PermanentSinkError } from "../errors.js";
import { sharedScheduler } from "../lease/scheduler.js";
import type { WorkContext, WithInProgressOptions } from "../lease/work-context.js";
import { abortReasonOf } from "../lease/work-run.js";
import { HeartbeatThread } from "../lease/heartbeat-thread.js";
import { threadConnectionFor } from "../lease/heartbeat-thread-options.js";
import { assertMessage, superviseWork } from "../lease/with-in-progress.js";
import { nextTurn } from "../nats/next-turn.js";
import { deliveringConnection } from "../nats/connection-state.js";
import { deliveryInfo } from "../nats/message-access.js";
import type { DisabledInProgressPolicy, VerifiedInProgressPolicy } from "../policy/in-progress-policy.js";
import { isVerifiedPolicy } from "../policy/verified-policies.js";
import { retryBudgetMs, retryInPlaceDelayMs } from "../settle/retry-in-place.js";
import type { BatchResult, BatchWrite, MessageResult } from "../settle/batch-result.js";
import { settleBatch, type WriteEnd, type WriteOutcome } from "../settle/settle-batch.js";
import { ShutdownBudget, UNBOUNDED } from "../settle/settle-budget.js";
import { publishBatchSettled } from "../settle/settle-events.js";
import type { LoopConfirmation, Settler } from "../settle/settler.js";
import { emptyResult, summarize } from "../settle/summarize.js";
import { readReport } from "../settle/write-report.js";
import { nextBatchId } from "../telemetry/diagnostics.js";
import { MetricNames } from "../telemetry/metric-names.js";
import type { MetricsRecorder } from "../telemetry/metrics-recorder.js";
import type { MetricsSink } from "../telemetry/metrics-sink.js";
import { TraceRecorder, type TracedBatch, type Tracing } from "../telemetry/tracing.js";
import { threadRttMs } from "./link-check.js";

/** What the runner needs of its instance. */
export interface RunnerConfig {
  readonly policy: VerifiedInProgressPolicy | DisabledInProgressPolicy;
  readonly heartbeat: Pick<WithInProgressOptions, "onLimit" | "confirm" | "requireProgress" | "thread"> | undefined;
  readonly metricsSink: MetricsSink | undefined;
  readonly metrics: MetricsRecorder;
  readonly settler: Settler;
  readonly connection: (WithInProgressOptions["connection"] & { isClosed?: () => unknown }) | undefined;
  readonly tracing: Tracing | undefined;
  /** The bound consumer's names, for traces of batches whose messages do not say. */
  readonly names: () => { readonly stream: string | undefined; readonly consumer: string | undefined };
  readonly shutdownTimeoutMs: number;
  /** The consumer's shortest redelivery window, when the instance knows it (retries with heartbeats off). */
  readonly windowMs: number | undefined;
  /** Whether a write that threw is tried again in place while the lease holds. */
  readonly retryInPlace: boolean;
}

/** What a loop adds to settling one of its batches. */
export interface LoopSettle {
  /**
   * The loop's write slot is free: the write committed the whole batch (its ACKs go out next),
   * or every frame went out (confirmations may still be awaited). Called at most twice.
   */
  readonly onSent?: (() => void) | undefined;
  /** The loop's confirmed ACKs, when the host set no `confirmAck`. */
  readonly confirm?: LoopConfirmation | undefined;
  /** The loop's messages whose ACK is on its way. */
  readonly acking?: AckingDeliveries | undefined;
  /** The stream sequences and timestamps of the batch's messages, in order, read by the loop at arrival. */
  readonly ids?: StoredIds | undefined;
}

/** How long a loop's start waits for the heartbeat thread's connection. */
const THREAD_READY_MS = 5000;
const NO_RELEASE = (): void => undefined;

/** The heartbeat thread as a loop holds it: its release, and its link's round trip when measured. */
export interface HeldThread {
  release(): void;
  readonly rttMs: number | undefined;
}

const NOT_HELD: HeldThread = Object.freeze({ release: NO_RELEASE, rttMs: undefined });

/** Runs batches and settles them, abandoned ones included. */
export class BatchRunner {
  readonly #config: RunnerConfig;
  /** Abandoned writes not yet settled. */
  readonly #late = new Set<Promise<void>>();
  #windowMs: number | undefined;
  /** `heartbeat.thread: true` not yet derived from a connection (no `connection` option). */
  #threadFromHost: boolean;
  #heartbeat: RunnerConfig["heartbeat"];
  readonly #beating: boolean;
  #retrying = 0;
  readonly #recovered = new Set<() => void>();

  constructor(config: RunnerConfig) {
    this.#config = config;
    this.#windowMs = config.windowMs;
    this.#heartbeat = config.heartbeat;
    this.#beating = isVerifiedPolicy(config.policy) && config.policy.enabled;
    // Without heartbeats there is nothing to beat from any thread.
    this.#threadFromHost = config.heartbeat?.thread === true && this.#beating;
  }

  /**
   * `heartbeat.thread: true` copies this connection (a loop's consumer's, or the connection a
   * message arrived on), once: the thread's connection data replace `true` from then on.
   *
   * @throws TypeError when the connection cannot be copied (it authenticates through a function).
   */
  learnThreadSource(source: unknown): void {
    if (!this.#threadFromHost || source === undefined) return;
    const thread = threadConnectionFor(true, [source], "options.heartbeat.thread");
    if (thread !== undefined) this.#heartbeat = { ...this.#heartbeat, thread };
    this.#threadFromHost = false;
  }

  /** Writes whose outcome is still awaited after they were abandoned. */
  get abandoned(): number {
    return this.#late.size;
  }

  /** Resolves once every abandoned write has ended and was settled, or when `signal` aborts. */
  async drain(signal?: AbortSignal): Promise<void> {
    while (this.#late.size > 0 && !signal?.aborted) {
      const aborted = new Promise<void>((resolve) => signal?.addEventListener("abort", () => resolve(), { once: true }));
      await Promise.race([Promise.all(this.#late), aborted]);
    }
  }

  /**
   * A loop holds the heartbeat thread for its whole life, so the thread is connected before the
   * first batch (its first rounds would otherwise fail while it connects) and stays open between
   * batches. A thread that failed to start (a refused login) is reported, and its batches beat
   * from the main thread while it is not started again. One that is not up within
   * {@link THREAD_READY_MS} may never be (the server refuses it more connections, a wrong
   * address): it is reported, let go, and this instance beats from the main thread from then on
   * — the host's connection is up, and a batch handed to a thread that never connects gets no
   * beat at all.
   *
   * @returns the release, for when the loop ends, and the round trip through the thread's
   * connection once it is up (the loop judges that link as it judges the host's).
   */
  async holdThread(report: (err: Error) => void): Promise<HeldThread> {
    const connection = this.#heartbeat?.thread;
    if (connection === undefined || connection === true) return NOT_HELD;
    let handle: HeartbeatThread;
    try {
      handle = HeartbeatThread.acquire(connection);
    } catch (err) {
      report(err as Error);
      return NOT_HELD;
    }
    try {
      await handle.ready(THREAD_READY_MS);
    } catch (err) {
      if (!(err instanceof HeartbeatThreadError && err.reason === "not_ready")) {
        report(err as Error);
        return { release: () => handle.release(), rttMs: undefined };
      }
      handle.release();
      if (this.#heartbeat !== undefined) {
        const { thread: _, ...mainThread } = this.#heartbeat;
        this.#heartbeat = mainThread;
      }
      report(new HeartbeatThreadError("not_ready", `${err.message} (check its servers, TLS and credentials, and the server's or the account's connection limit): this instance's batches beat from the main thread from now on`, { cause: err }));
      return NOT_HELD;
    }
    return { release: () => handle.release(), rttMs: await threadRttMs(handle) };
  }

  /** Runs `write` for `list` under the heartbeat policy, then settles every message. */
  async process(
    list: readonly JsMsg[],
    write: BatchWrite,
    signal: AbortSignal | undefined,
    receivedAt: WithInProgressOptions["receivedAt"],
    origin: TracedBatch["origin"],
    loop?: LoopSettle,
  ): Promise<BatchResult> {
    if (list.length === 0) return emptyResult();
    const c = this.#config;
    if (this.#threadFromHost) this.learnThreadSource(deliveringConnection(list[0]));
    const batchId = nextBatchId();
    const trace = this.#startTrace(list, origin);
    const started = performance.now();
    let ctx: WorkContext | undefined;
    let end: WriteEnd | undefined;
    let late: Promise<unknown> | undefined;
    try {
      // A batch under heartbeats with something else in it is the caller's bug, refused before
      // anything is sent (withInProgress itself only checks the ends). Without heartbeats each
      // message is settled as it can be (one that cannot be read is left).
      if (this.#beating) for (let i = 0; i < list.length; i++) assertMessage(list, i);
      // withInProgress, with this batch's number: its heartbeat events and its settled
      // event carry the same batchId.
      const result = await superviseWork(
        list,
        (x) => {
          ctx = x;
          return trace.run(() => this.#writeRetrying(list, write, x, started));
        },
        c.policy,
        {
          ...this.#heartbeat,
          ...(signal !== undefined ? { signal } : {}),
          ...(c.metricsSink !== undefined ? { metrics: c.metricsSink } : {}),
          ...(receivedAt !== undefined ? { receivedAt } : {}),
          ...(c.connection !== undefined ? { connection: c.connection } : {}),
        },
        sharedScheduler(),
        batchId,
        trace,
        (running) => (late = running),
      );
      const report = readReport(result, list);
      end = { ok: true, report };
      // The whole batch committed: the loop's next pull goes out first, in a socket write of its
      // own (the client writes at the end of this run of microtasks, and the ACKs are built one
      // microtask later), so the server delivers the next batch while this one's ACKs are built.
      if (loop?.onSent !== undefined && signal?.aborted !== true && report.failures.size === 0) {
        loop.onSent();
        await undefined;
      }
    } catch (err) {
      if (late !== undefined) return this.#abandon(list, late, ctx, batchId, trace, started);
      // Rejected before the write started: a malformed argument is the caller's bug, not a sink
      // failure to NAK over and over. Nothing was sent; the messages stay redeliverable.
      // (A signal aborted before the start, whatever its reason, is a cancellation, not a bug.)
      const cancelledEarly = signal?.aborted === true && err === signal.reason;
      if (ctx === undefined && !cancelledEarly && (err instanceof TypeError || err instanceof InProgressPolicyError)) {
        trace.end({ outcome: "rejected", errorName: errorName(err), acked: 0, failed: 0 });
        throw err;
      }
      // A throw after the write resolved (the loop's early pull) does not unmake its commit.
      end ??= { ok: false, error: err };
    }
    const writeMs = performance.now() - started;
    c.metrics.observe(MetricNames.BATCH_WRITE_SECONDS, writeMs / 1000);
    // runEach: handlers that ended in this turn settle together, their frames in one socket
    // write instead of one each. Not with beats from the heartbeat thread: that mode is chosen
    // for a main thread that blocks, and a block later in this turn would hold the frames of a
    // message whose beats just stopped.
    if (origin === "runEach" && !(this.#beating && this.#heartbeat?.thread !== undefined)) await nextTurn();
    const lease = (ctx as WorkContext | undefined)?.lease;
    // After a shutdown began, settling gets the shutdown bound too.
    const budget = new ShutdownBudget(signal, c.shutdownTimeoutMs);
    try {
      return await this.#settle(
        list,
        {
          ...end,
          cancelled: !end.ok && signal?.aborted === true,
          // Any lease lost while the write ran, whatever aborted first (read without creating
          // ctx.signal when the write never asked for it).
          leaseLost: lease?.expired === true || (ctx !== undefined && abortReasonOf(ctx) instanceof LeaseExpiredError),
          heartbeats: (ctx as WorkContext | undefined)?.heartbeats ?? 0,
          writeMs,
        },
        budget,
        batchId,
        trace,
        loop,
      );
    } finally {
      budget.dispose();
    }
  }

  /**
   * The host's write, tried again in place while the whole batch fails temporarily (the sink
   * is down) and the lease bound allows: no delivery is spent on an outage the lease can
   * bridge. Meanwhile the loops pull nothing new (`retrying`).
   */
  async #writeRetrying(list: readonly JsMsg[], write: BatchWrite, ctx: WorkContext, started: number): Promise<unknown> {
    for (let retries = 0; ; retries++) {
      try {
        return await write(list, ctx);
      } catch (err) {
        const wait = retryInPlaceDelayMs(
          {
            temporary: !(err instanceof PermanentSinkError),
            aborted: abortReasonOf(ctx) !== undefined,
            retries,
            elapsedMs: performance.now() - started,
            budgetMs: this.#retryBudgetMs(),
          },
          Math.random(),
        );
        if (wait === undefined) throw err;
        this.#config.metrics.count(MetricNames.WRITE_RETRIES_TOTAL);
        this.#outage(1);
        try {
          await sleepUnless(wait, ctx.signal);
        } finally {
          this.#outage(-1);
        }
        if (ctx.signal.aborted) throw err;
      }
    }
  }

  /** How long a batch may be held by retries in place (see `retryBudgetMs`). */
  #retryBudgetMs(): number | undefined {
    if (!this.#config.retryInPlace) return undefined;
    const p = this.#config.policy;
    return retryBudgetMs(isVerifiedPolicy(p) && p.enabled ? p : undefined, this.#windowMs);
  }

  /** A loop learnt the consumer's shortest redelivery window (for retries with heartbeats off). */
  learnWindow(ms: number | undefined): void {
    if (ms !== undefined) this.#windowMs = ms;
  }

  /** Batches being retried in place right now: while any is, the loops pull nothing new. */
  get retrying(): number {
    return this.#retrying;
  }

  /** Calls `listener` whenever no batch is retried in place any more; returns its remover. */
  onRecovered(listener: () => void): () => void {
    this.#recovered.add(listener);
    return () => void this.#recovered.delete(listener);
  }

  #outage(delta: number): void {
    this.#retrying += delta;
    if (this.#retrying === 0) for (const l of this.#recovered) l();
  }

  async #settle(
    list: readonly JsMsg[],
    outcome: WriteOutcome,
    budget: ShutdownBudget | typeof UNBOUNDED,
    batchId: number,
    trace: TraceRecorder,
    loop?: LoopSettle,
  ): Promise<BatchResult> {
    const c = this.#config;
    const settled = await settleBatch(list, outcome, { settler: c.settler, metrics: c.metrics, connection: c.connection, budget, batchId, onSent: loop?.onSent, confirm: loop?.confirm, acking: loop?.acking, ids: loop?.ids });
    if (trace.active) {
      const failed = settled.messages.reduce((n, m) => (m.error !== undefined ? n + 1 : n), 0);
      trace.end({ outcome: settled.outcome, errorName: settled.error === undefined ? undefined : errorName(settled.error), acked: settled.acked, failed });
    }
    return settled;
  }

  /**
   * The write outlived its shutdown bound: nothing is sent now, and its late outcome is settled
   * by the table when it comes (a late commit is ACKed — the server ignores an ACK for a
   * delivery it no longer holds; a late failure with its lease gone gets no NAK).
   */
  #abandon(list: readonly JsMsg[], running: Promise<unknown>, ctx: WorkContext | undefined, batchId: number, trace: TraceRecorder, started: number): BatchResult {
    const c = this.#config;
    const heartbeats = ctx?.heartbeats ?? 0;
    c.metrics.count(MetricNames.MESSAGES_ABANDONED_TOTAL, list.length);
    const leaseLost = ctx?.lease?.expired === true;
    const messages = list.map((msg): MessageResult => (leaseLost ? { msg, action: "abandoned", leaseLost } : { msg, action: "abandoned" }));
    const result = summarize(messages, {
      cancelled: false,
      error: undefined,
      heartbeats,
      writeMs: performance.now() - started,
      leaseLost,
      reportError: undefined,
    });
    publishBatchSettled(() => ({
      batchId,
      batchSize: list.length,
      outcome: result.outcome,
      acked: 0,
      nacked: 0,
      termed: 0,
      deadLettered: 0,
      left: 0,
      exhausted: 0,
      abandoned: list.length,
      heartbeats,
      writeMs: result.writeMs,
    }));
    const lateSettle = running
      .then(
        (value): WriteEnd => ({ ok: true, report: readReport(value, list) }),
        (error: unknown): WriteEnd => ({ ok: false, error }),
      )
      .then(async (o) => {
        const lease = ctx?.lease;
        const writeMs = performance.now() - started;
        c.metrics.observe(MetricNames.BATCH_WRITE_SECONDS, writeMs / 1000);
        await this.#settle(
          list,
          {
            ...o,
            cancelled: !o.ok,
            // No beat went out since the bound: unless its deadline is still ahead, another
            // worker may hold the messages now.
            leaseLost: lease === undefined || lease.expired || lease.remainingMs() <= 0,
            heartbeats,
            writeMs,
          },
          UNBOUNDED,
          batchId,
          trace,
        );
      })
      .catch(() => undefined)
      .finally(() => this.#late.delete(lateSettle));
    this.#late.add(lateSettle);
    return result;
  }

  /** The trace of one batch, named after the stream and consumer its messages came from. */
  #startTrace(list: readonly JsMsg[], origin: TracedBatch["origin"]): TraceRecorder {
    const tracing = this.#config.tracing;
    if (tracing === undefined) return TraceRecorder.NONE;
    const info = deliveryInfo(list[0]!);
    const names = this.#config.names();
    return TraceRecorder.start(tracing, {
      stream: info?.stream ?? names.stream,
      consumer: info?.consumer ?? names.consumer,
      messages: list,
      origin,
    });
  }
}

/** Waits `ms`, or less when `signal` aborts. Not unref'd: the batch awaits it, within its budget. */
function sleepUnless(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) {
      resolve();
      return;
    }
    const done = (): void => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}
