/**
 * withInProgress: run the host's work and, while it runs, tell JetStream the messages are
 * still being worked on — bounded, stopped on every path, never an ack.
 */
import type { JsMsg } from "@nats-io/jetstream";
import { InProgressPolicyError } from "../errors.js";
import type { JsMsgLike } from "../nats/client-types.js";
import { DEFAULT_IN_PROGRESS_POLICY, type DisabledInProgressPolicy, type VerifiedInProgressPolicy } from "../policy/in-progress-policy.js";
import { readOptionKeys } from "../policy/option-keys.js";
import { isVerifiedPolicy } from "../policy/verified-policies.js";
import { deliveringConnection } from "../nats/connection-state.js";
import { checkHeartbeatThreadOption, threadConnectionFor } from "./heartbeat-thread-options.js";
import { nextBatchId } from "../telemetry/diagnostics.js";
import { MetricsRecorder, checkMetricsOption } from "../telemetry/metrics-recorder.js";
import { TraceRecorder } from "../telemetry/tracing.js";
import { epochMs } from "./received-at.js";
import { sharedScheduler, type Scheduler } from "./scheduler.js";
import { Supervision, type SupervisionOptions } from "./supervision.js";
import type { HeartbeatConfirmation, WithInProgressOptions, WorkContext } from "./work-context.js";
import { SupervisedContext, WorkRun } from "./work-run.js";

/**
 * Runs `work` and, while it runs, sends bounded InProgress (`+WPI`) heartbeats for `msgs`.
 *
 * - A disabled policy runs `work` with no heartbeat at all. An enabled policy must come from
 *   {@link verifyInProgressPolicy}; anything else is refused before `work` starts.
 * - The first beat comes `intervalMs` after delivery (brought forward by `receivedAt`), then
 *   every `intervalMs`, at most `maxHeartbeats` rounds; one round sends `+WPI` for every message.
 * - Beats stop before the returned promise settles, on every path; the work's result or error
 *   passes through unchanged. Nothing here ever acknowledges, naks or terminates a message.
 * - When `options.signal` aborts, or `maxHeartbeats` is reached with `onLimit: "abort"`,
 *   `ctx.signal` aborts; if the work does not finish within `shutdownTimeoutMs`, the promise
 *   rejects with the abort reason and the late result is discarded. A host abort keeps the
 *   lease meanwhile: beats go on while the work drains (never past `maxHeartbeats`). A lost
 *   lease aborts `ctx.signal` with {@link LeaseExpiredError} too (unless something aborted it
 *   first; `ctx.lease.expired` says so either way), but the call then waits for the work,
 *   however long it takes, and returns what it returns.
 * - A failed beat is counted, never fatal to the work and never success; a beat that finds the
 *   connection closed ends supervision and the lease with it (`LeaseExpiredError`, its `cause` a
 *   `ConnectionClosedError`): nothing can keep or settle the messages any more.
 *
 * All batches share one unref'd timer per process.
 *
 * @typeParam T - what `work` returns.
 * @typeParam M - the client's message type (`JsMsg` of `@nats-io/jetstream` 3.x or of `nats`
 *   2.x); `options.receivedAt` gets these messages back.
 * @param msgs - one message or a batch, as delivered by a durable consumer with explicit acks
 *   (the first and the last are checked up front; any other element that is not a message
 *   gets failed beats, never a crash).
 * @param work - the host's write; it receives a {@link WorkContext}.
 * @param policy - a verified policy, or `{ enabled: false }`.
 * @param options - see {@link WithInProgressOptions}.
 * @returns what `work` returned.
 * @throws {@link InProgressPolicyError} for an enabled policy that was not verified;
 *   `TypeError` for malformed arguments; the abort reason after a host abort (or `onLimit:
 *   "abort"`) and the shutdown bound.
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
export function withInProgress<T, M extends JsMsgLike = JsMsgLike>(
  msgs: M | readonly M[],
  work: (ctx: WorkContext) => Promise<T> | T,
  policy: VerifiedInProgressPolicy | DisabledInProgressPolicy,
  options?: WithInProgressOptions<M>,
): Promise<T> {
  // superviseWork is async: every error, even an argument error, arrives as a rejection.
  return superviseWork(msgs, work, policy, options, sharedScheduler());
}

/**
 * {@link withInProgress} with an explicit scheduler (tests drive it with a fake clock) and,
 * for `CommitThenAck`, the batch number its diagnostics events already use, so the heartbeat
 * events and the settled event of one batch carry the same `batchId`, the batch's trace,
 * whose span gets an event per heartbeat round and one for a lost lease, and `onAbandon`,
 * which receives the work's promise when the shutdown bound passes with the work still running
 * (its outcome is then unknown: whoever settles its messages must wait for it).
 *
 * @internal
 */
export async function superviseWork<T, M extends JsMsgLike = JsMsgLike>(
  msgs: M | readonly M[],
  work: (ctx: WorkContext) => Promise<T> | T,
  policy: VerifiedInProgressPolicy | DisabledInProgressPolicy,
  options: WithInProgressOptions<M> | undefined,
  scheduler: Scheduler,
  batchId?: number,
  trace: TraceRecorder = TraceRecorder.NONE,
  onAbandon?: (late: Promise<T>) => void,
): Promise<T> {
  if (typeof work !== "function") throw new TypeError(`work must be a function, got ${typeof work}`);
  const { list, verified, opts, enabled } = readArguments(msgs, policy, options);

  const outer = opts.signal;
  outer?.throwIfAborted();

  const run = new WorkRun(verified?.shutdownTimeoutMs ?? DEFAULT_IN_PROGRESS_POLICY.shutdownTimeoutMs);
  const supervision = enabled && verified !== undefined ? new Supervision(list, verified, opts, scheduler, MetricsRecorder.for(opts.metrics), run, batchId ?? nextBatchId(), trace) : undefined;
  run.supervision = supervision;
  const ctx = new SupervisedContext(run, supervision);
  const onOuterAbort = outer === undefined ? undefined : (): void => run.abort(outer.reason, true);
  if (onOuterAbort !== undefined) outer?.addEventListener("abort", onOuterAbort, { once: true });

  supervision?.start();
  try {
    // Only a host abort or onLimit "abort" bounds the work (a lost lease waits for it): without
    // either there is no bound to race.
    if (outer === undefined && (supervision === undefined || opts.onLimit !== "abort")) return await work(ctx);
    return await run.race(work, ctx, onAbandon);
  } finally {
    supervision?.finish();
    run.close();
    if (onOuterAbort !== undefined) outer?.removeEventListener("abort", onOuterAbort);
    // Beats from the heartbeat thread: every +WPI it sent has reached the server before the
    // caller sends a final frame (bounded; never throws).
    const quiet = supervision?.quiet();
    if (quiet !== undefined) await quiet;
  }
}

/**
 * The arguments, read once. A throwing getter in them (on an option, the policy or a message)
 * is a malformed argument like any other: a `TypeError`, before the work starts.
 */
function readArguments(
  msgs: unknown,
  policy: unknown,
  options: unknown,
): { list: readonly JsMsg[]; verified: VerifiedInProgressPolicy | undefined; opts: SupervisionOptions; enabled: boolean } {
  try {
    const list = toList(msgs);
    const verified = readPolicy(policy);
    const opts = readOptions(options);
    const enabled = verified?.enabled === true && list.length > 0;
    if (enabled) assertMessages(list);
    const thread = opts.thread;
    if (thread !== undefined) {
      // Heartbeats off: no beat to send, from any thread. `true` copies the host's connection.
      opts.thread = !enabled ? undefined : thread === true ? threadConnectionFor(true, [opts.connection, opts.confirm?.connection, deliveringConnection(list[0])], "options.thread") : thread;
    }
    return { list, verified, opts: opts as SupervisionOptions, enabled };
  } catch (err) {
    if (err instanceof TypeError || err instanceof InProgressPolicyError) throw err;
    throw new TypeError("withInProgress could not read its arguments (a throwing getter): pass messages as delivered, a verified policy and a plain options object", { cause: err });
  }
}

const OPTION_KEYS = ["signal", "metrics", "receivedAt", "onLimit", "confirm", "connection", "requireProgress", "thread"] as const;

/** The options as read; `thread` is still `true` when the host's connection is to be copied. */
type ReadOptions = Omit<SupervisionOptions, "thread"> & { thread: ReturnType<typeof checkHeartbeatThreadOption> };

/** No options: every default, shared (read only). */
const DEFAULT_OPTIONS: ReadOptions = Object.freeze({
  signal: undefined,
  metrics: undefined,
  receivedAt: undefined,
  onLimit: "continue",
  confirm: undefined,
  connection: undefined,
  requireProgress: false,
  thread: undefined,
});

function readOptions(options: unknown): ReadOptions {
  if (options === undefined) return DEFAULT_OPTIONS;
  const o = readOptionKeys("withInProgress options", options, OPTION_KEYS, "withInProgress") as WithInProgressOptions;
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
  let confirm: SupervisionOptions["confirm"];
  if (o.confirm !== undefined) {
    const c = readOptionKeys("options.confirm", o.confirm, ["connection", "timeoutMs"]) as Partial<HeartbeatConfirmation>;
    if (!c.connection || typeof c.connection.request !== "function") {
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
  checkMetricsOption(o.metrics, "options.metrics");
  const requireProgress = o.requireProgress ?? false;
  if (typeof requireProgress !== "boolean") throw new TypeError("options.requireProgress must be a boolean");
  const thread = checkHeartbeatThreadOption(o.thread, "options.thread");
  return { signal, metrics: o.metrics, receivedAt, onLimit, confirm, connection, requireProgress, thread };
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

/**
 * The first and the last message must be JetStream messages: that catches a wrong list (payloads,
 * strings, another array) before the work starts, in constant time — a scan of every message
 * would be most of the call's cost for a large batch. Any other element that is not a message
 * makes its beats fail (counted, reported), never the call.
 */
function assertMessages(list: readonly unknown[]): void {
  assertMessage(list, 0);
  if (list.length > 1) assertMessage(list, list.length - 1);
}

/** Exported for the loops' and `process`'s own full check, where every message is settled anyway. */
export function assertMessage(list: readonly unknown[], i: number): void {
  let ok: boolean;
  try {
    const m = list[i];
    ok = typeof m === "object" && m !== null && typeof (m as JsMsg).working === "function";
  } catch (err) {
    throw new TypeError(`msgs[${i}] could not be read (a throwing getter): pass messages as delivered`, { cause: err });
  }
  if (!ok) throw new TypeError(`msgs[${i}] is not a JetStream message (it has no working() method)`);
}

