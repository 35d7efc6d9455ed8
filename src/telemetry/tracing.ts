/**
 * The tracing contract: a tiny interface a tracing adapter implements (the root entry imports
 * no tracing library), and the library's guarded handle on it, so a throwing tracer never
 * reaches the heartbeat, the write or the caller.
 */
import type { JsMsgLike } from "../nats/client-types.js";

/**
 * What the library tells a tracer about one batch (or, under `runEach`, one message) as it
 * starts: where it comes from, who started it, and its messages, whose headers carry their
 * producers' trace context.
 *
 * @example
 * ```ts
 * const tracing: Tracing = {
 *   startBatch: (batch: TracedBatch) => {
 *     console.log(`process ${batch.stream} (${batch.origin}): ${batch.messages.length} messages`);
 *     return undefined; // not traced
 *   },
 * };
 * ```
 */
export interface TracedBatch {
  /**
   * Who started the batch. `process`: the host's own code, so the context active at the call
   * (its fetch loop's span, say) is the batch's parent. `run` or `runEach`: a consumer loop,
   * whose batches have no parent — the context active when the loop was started is inherited
   * by everything it does, but that span (a startup span, long ended) did not cause them; a
   * tracer starts their spans from the root context, linked to the messages' producer contexts.
   */
  readonly origin: "process" | "run" | "runEach";
  /** The stream the messages came from (from their delivery info), when known. */
  readonly stream: string | undefined;
  /** The durable consumer that delivered them, when known. */
  readonly consumer: string | undefined;
  /** The messages, in batch order. Read their headers only for trace context. */
  readonly messages: readonly JsMsgLike[];
}

/**
 * How a batch ended, for its span: the settle outcome and, when the write failed, its error's
 * class name (never its message).
 *
 * @example
 * ```ts
 * const end: TracedOutcome = { outcome: "acked", errorName: undefined, acked: 100, failed: 0 };
 * ```
 */
export interface TracedOutcome {
  /**
   * The batch outcome, as in `BatchResult.outcome`, or `rejected` when `process` threw before
   * the write started (a malformed argument: nothing was settled).
   */
  readonly outcome: string;
  /** The write's error class name when it failed; `undefined` when it committed. */
  readonly errorName: string | undefined;
  /** Messages acknowledged. */
  readonly acked: number;
  /** Messages whose write failed. */
  readonly failed: number;
}

/**
 * The trace of one batch, returned by {@link Tracing.startBatch}.
 *
 * @example
 * ```ts
 * const trace: BatchTrace = {
 *   run: (fn) => fn(),
 *   heartbeat: () => undefined,
 *   leaseLost: () => undefined,
 *   end: (o) => console.log(o.outcome),
 * };
 * ```
 */
export interface BatchTrace {
  /** Runs the host's write inside the batch's trace context (its own spans become children). */
  run<T>(fn: () => T): T;
  /** A heartbeat round went out (`failedMessages` > 0: some beats did not reach the server). */
  heartbeat(round: { readonly beat: number; readonly failedMessages: number }): void;
  /** The batch's lease ran out before the write finished. */
  leaseLost(overdueMs: number): void;
  /** The batch was settled: the span ends. */
  end(outcome: TracedOutcome): void;
}

/**
 * Where the library sends its traces. `jetstream-inprogress/opentelemetry` implements it on
 * `@opentelemetry/api` (`openTelemetryTracing`); implement it to bridge another tracer. The
 * library never lets an exception from a tracer reach the heartbeat, the write or the caller.
 *
 * @example
 * ```ts
 * import { openTelemetryTracing } from "jetstream-inprogress/opentelemetry";
 * const ack = new CommitThenAck({ tracing: openTelemetryTracing() });
 * ```
 */
export interface Tracing {
  /** Starts the trace of one batch; `undefined` when it is not traced. */
  startBatch(batch: TracedBatch): BatchTrace | undefined;
}

/**
 * The library's handle on one batch's trace: every call guarded.
 *
 * @internal
 */
export class TraceRecorder {
  /** The recorder of a batch that is not traced. */
  static readonly NONE = new TraceRecorder(undefined);

  readonly #trace: BatchTrace | undefined;

  private constructor(trace: BatchTrace | undefined) {
    this.#trace = trace;
  }

  /** Starts a batch's trace, or returns {@link TraceRecorder.NONE} when there is no tracer. */
  static start(tracing: Tracing | undefined, batch: TracedBatch): TraceRecorder {
    if (tracing === undefined) return TraceRecorder.NONE;
    let trace: unknown;
    try {
      trace = tracing.startBatch(batch);
    } catch {
      trace = undefined;
    }
    return trace !== null && typeof trace === "object" ? new TraceRecorder(trace as BatchTrace) : TraceRecorder.NONE;
  }

  /** Whether the batch is traced. */
  get active(): boolean {
    return this.#trace !== undefined;
  }

  /**
   * Runs `fn` inside the trace's context, exactly once. A tracer that fails around `fn` never
   * changes its outcome: `fn`'s own value or error is what comes out.
   */
  run<T>(fn: () => T): T {
    const trace = this.#trace;
    if (trace === undefined) return fn();
    let outcome: { readonly ok: true; readonly value: T } | { readonly ok: false; readonly error: unknown } | undefined;
    let called = false;
    // A tracer that calls its callback twice, or later, must not run the host's write twice.
    const wrapped = (): T => {
      if (called) {
        if (outcome?.ok === true) return outcome.value;
        throw outcome?.error;
      }
      called = true;
      try {
        const value = fn();
        outcome = { ok: true, value };
        return value;
      } catch (error) {
        outcome = { ok: false, error };
        throw error;
      }
    };
    try {
      trace.run(wrapped);
    } catch {
      // fn's own outcome decides below.
    }
    // A tracer that never called it, or only scheduled it: run it here (later calls get this outcome).
    if (!called) return wrapped();
    const done = outcome!;
    if (done.ok) return done.value;
    throw done.error;
  }

  heartbeat(beat: number, failedMessages: number): void {
    try {
      this.#trace?.heartbeat({ beat, failedMessages });
    } catch {
      // A tracer must never break the heartbeat.
    }
  }

  leaseLost(overdueMs: number): void {
    try {
      this.#trace?.leaseLost(overdueMs);
    } catch {
      // A tracer must never break supervision.
    }
  }

  end(outcome: TracedOutcome): void {
    try {
      this.#trace?.end(Object.freeze(outcome));
    } catch {
      // A tracer must never break settling.
    }
  }
}
