/**
 * The options of `CommitThenAck`, checked once at construction.
 */
import { checkHeartbeatThreadOption } from "../lease/heartbeat-thread-options.js";
import type { WithInProgressOptions } from "../lease/work-context.js";
import type { JsMsgLike, NatsConnectionLike } from "../nats/client-types.js";
import type { BackOffMode, ConsumerTiming, DisabledInProgressPolicy, InProgressPolicy, VerifiedInProgressPolicy } from "../policy/in-progress-policy.js";
import { readOptionKeys } from "../policy/option-keys.js";
import { isIntegerIn } from "../policy/untrusted.js";
import { isVerifiedPolicy } from "../policy/verified-policies.js";
import type { TemporaryFailureAction } from "../settle/batch-result.js";
import type { DeadLetterTarget } from "../settle/dead-letter.js";
import type { ConfirmAckOptions } from "../settle/frames.js";
import { checkMetricsOption } from "../telemetry/metrics-recorder.js";
import type { MetricsSink } from "../telemetry/metrics-sink.js";
import type { Tracing } from "../telemetry/tracing.js";

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
  /**
   * The InProgress heartbeat policy: one returned by `verifyInProgressPolicy` (checked against
   * the consumer's AckWait), or `{ enabled: false }`. Default disabled: no `+WPI` is ever sent.
   * `CommitThenAck.forConsumer` takes the plain fields and verifies them for you.
   */
  readonly inProgress?: VerifiedInProgressPolicy | DisabledInProgressPolicy;
  /**
   * Where the metrics go (`MetricNames`): `new InMemoryMetrics()`, `prometheusMetrics()` or
   * `openTelemetryMetrics()`, or a `MetricsSink` of your own. A sink that throws never breaks
   * a write. Default: none recorded.
   */
  readonly metrics?: MetricsSink;
  /**
   * Where traces go: one span per batch (per message under `runEach`), for example
   * `openTelemetryTracing()` from `jetstream-inprogress/opentelemetry`.
   */
  readonly tracing?: Tracing;
  /**
   * Temporary failures while deliveries are left: `{ action: "nak" }` (default: a delay that
   * grows with the delivery count), `{ action: "nak", delayMs }` (a fixed delay; `0` is a bare
   * NAK) or `{ action: "leave" }`. See {@link TemporaryFailureAction}.
   */
  readonly onTemporaryFailure?: TemporaryFailureAction;
  /**
   * Where failures go that cannot be retried: permanent ones, and temporary ones on their last
   * allowed delivery. Without it permanent failures are terminated and temporary ones on their
   * last delivery are reported as exhausted.
   */
  readonly deadLetter?: DeadLetterTarget;
  /**
   * The consumer's MaxDeliver (`-1` or `0`: unlimited), so the last allowed delivery is known.
   * `forConsumer` and the loops read it from the server; otherwise, on a message's first
   * failure, it is read once per consumer (consumer info, through `connection` or the message's
   * own connection). It is never guessed: when it cannot be read, a failed message is left for
   * redelivery and the failure reported as `ConsumerPolicyError` `max_deliver_unknown`.
   */
  readonly maxDeliver?: number;
  /**
   * Shuts down everything this instance runs: the loops stop pulling, writes in flight see
   * `ctx.signal` abort and get up to the policy's `shutdownTimeoutMs` to finish. Combined with
   * each call's own `signal`.
   */
  readonly signal?: AbortSignal;
  /**
   * Confirmed ACKs: the server is asked to confirm the `+ACK`s, and what it does not confirm is
   * sent again (`{ timeoutMs, retries }`), so an ACK lost in a leader election
   * does not turn into a duplicate write. Default: `process` sends plain ACKs; `run` and
   * `runEach` confirm theirs (one reply inbox per batch, timeout an eighth of AckWait within
   * 200–2,000 ms, 6 retries, and up to a minute while the server answers "no responders" or
   * the client is between connections; ACKs of writes that committed while it was between
   * connections are held until the reconnect and then confirmed the same way, as is a
   * dead-lettered original's).
   * A batch's first attempt asks one reply of its last `+ACK` to each consumer: the server
   * takes a connection's ACKs in order, so that reply answers for the ones before it; a retry
   * asks one of every ACK still unconfirmed. While a loop's ACK is on its way, another delivery
   * of the same message is acked, not written again.
   * Given here, the window is `timeoutMs × (retries + 1)` everywhere. `false` turns
   * confirmation off everywhere. On a connection the host is draining no answer can come back:
   * a loop's own confirmation then sends plain `+ACK`s (`confirmed: false`), and a host's
   * explicit one reports them unconfirmed (`AckNotConfirmedError`).
   */
  readonly confirmAck?: ConfirmAckOptions | false;
  /**
   * The connection the messages arrive on. Used to read the server version (Term reasons on
   * 2.10.4+), to send ACK retries and confirmed heartbeats, and to notice a closed connection.
   * Without it, each message's own connection is used.
   */
  readonly connection?: NatsConnectionLike;
  /**
   * Heartbeat fine-tuning, as in `withInProgress`: `onLimit` (`"continue"`, default, or
   * `"abort"` at `maxHeartbeats`), `confirm` (server-confirmed beats), `requireProgress`
   * (beat only after `ctx.progress()`) and `thread` (beats from a worker thread, kept while a
   * synchronous write blocks the event loop; `true` copies `connection`, else the loop's or the
   * messages' connection). The interval and limits belong in `inProgress`.
   */
  readonly heartbeat?: Pick<WithInProgressOptions, "onLimit" | "confirm" | "requireProgress" | "thread">;
  /**
   * The consumer's timing (`consumerTimingFromConfig(info)`), so NAK delays can be corrected
   * for its BackOff and a held ACK knows its AckWait. `forConsumer` reads it from the server.
   */
  readonly timing?: ConsumerTiming;
  /**
   * BackOff handling: `"aware"` corrects NAK delays for the consumer's BackOff, `"reject"`
   * sends them as asked. Default the verified policy's mode, else `"reject"`; with
   * `forConsumer` it is also the mode the policy is verified in.
   */
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
export interface ForConsumerOptions extends Omit<CommitThenAckOptions, "inProgress" | "timing" | "maxDeliver"> {
  /**
   * The InProgress heartbeat policy, verified here against the consumer's effective AckWait and
   * BackOff: `{ enabled: true, intervalMs, maxHeartbeats, shutdownTimeoutMs }`, missing fields
   * taking their defaults; a policy verified earlier is accepted too (checked again against
   * this consumer). Default disabled. An unsafe one fails with `ConsumerPolicyError`
   * (`policy_violation`) before anything is fetched.
   */
  // Partial<InProgressPolicy> alone (a verified policy is one): a union would hide the fields' docs from editors.
  readonly inProgress?: Partial<InProgressPolicy>;
  /**
   * The AckWait the host expects, in milliseconds: when the consumer's differs (someone
   * changed it), `forConsumer` fails closed with `ConsumerPolicyError` (`ack_wait_drift`).
   * Default: whatever the consumer has.
   */
  readonly ackWaitMs?: number;
}

/**
 * Per-call options of {@link CommitThenAck.process}.
 *
 * @typeParam M - the batch's message type (`receivedAt` gets the messages back).
 *
 * @example
 * ```ts
 * await ack.process(msgs, write, { receivedAt: fetchedAt, signal: AbortSignal.timeout(60_000) });
 * ```
 */
export interface ProcessOptions<M extends JsMsgLike = JsMsgLike> {
  /** Cancels this batch (combined with the instance's signal): `ctx.signal` aborts, nothing is acknowledged that did not commit. */
  readonly signal?: AbortSignal;
  /**
   * When the messages were received (epoch ms, a `Date`, or a function per message). JetStream
   * counts AckWait from delivery, so time spent before the write brings the first beat
   * forward. Default: now.
   */
  readonly receivedAt?: WithInProgressOptions<M>["receivedAt"];
}

/** The keys each options object knows; anything else is refused. */
export const COMMIT_THEN_ACK_KEYS = [
  "inProgress", "metrics", "tracing", "onTemporaryFailure", "deadLetter", "maxDeliver", "signal", "confirmAck",
  "connection", "heartbeat", "timing", "backOff",
] as const;
export const FOR_CONSUMER_KEYS = [
  ...COMMIT_THEN_ACK_KEYS.filter((k) => k !== "timing" && k !== "maxDeliver"),
  "ackWaitMs",
] as const;
const PROCESS_KEYS = ["signal", "receivedAt"] as const;

/** Checks the options of a `CommitThenAck`; throws a `TypeError` naming the option and the fix. */
export function validateOptions(options: unknown): CommitThenAckOptions {
  const o = readOptionKeys("CommitThenAck options", options, COMMIT_THEN_ACK_KEYS, "constructor") as CommitThenAckOptions;
  const ip = o.inProgress as unknown;
  if (ip !== undefined && !isVerifiedPolicy(ip) && !(typeof ip === "object" && ip !== null && (ip as { enabled?: unknown }).enabled === false)) {
    throw new TypeError(
      "options.inProgress must come from verifyInProgressPolicy (or be { enabled: false }); CommitThenAck.forConsumer verifies it against the consumer for you",
    );
  }
  if (o.onTemporaryFailure !== undefined) {
    const a = readOptionKeys("options.onTemporaryFailure", o.onTemporaryFailure, ["action", "delayMs", "retryInPlace"]) as { action?: unknown; delayMs?: unknown; retryInPlace?: unknown };
    if (a.retryInPlace !== undefined && typeof a.retryInPlace !== "boolean") {
      throw new TypeError(`options.onTemporaryFailure.retryInPlace must be a boolean, got ${JSON.stringify(a.retryInPlace)}: false settles a failed write at once instead of trying it again while the lease holds`);
    }
    if (a.action !== "nak" && a.action !== "leave") {
      throw new TypeError(`options.onTemporaryFailure.action must be "nak" or "leave", got ${JSON.stringify(a.action)}`);
    }
    if (a.action === "leave" && a.delayMs !== undefined) {
      throw new TypeError('options.onTemporaryFailure.delayMs only applies to { action: "nak" }: remove it, or use action "nak"');
    }
    if (a.delayMs !== undefined && !isIntegerIn(a.delayMs, 0, 86_400_000)) {
      throw new TypeError(`options.onTemporaryFailure.delayMs must be an integer in 0 ..= 86400000 (a day), got ${String(a.delayMs)}: leave it out for a delay that grows with the delivery count`);
    }
  }
  if (o.deadLetter !== undefined) validateDeadLetter(o.deadLetter);
  const tracing = o.tracing as { startBatch?: unknown } | null | undefined;
  if (tracing !== undefined && (tracing === null || typeof tracing !== "object" || typeof tracing.startBatch !== "function")) {
    throw new TypeError("options.tracing must implement Tracing (startBatch): pass openTelemetryTracing() from jetstream-inprogress/opentelemetry");
  }
  if (o.maxDeliver !== undefined && !isIntegerIn(o.maxDeliver, -1, Number.MAX_SAFE_INTEGER)) {
    throw new TypeError(`options.maxDeliver must be the consumer's max_deliver (an integer, -1 for unlimited), got ${String(o.maxDeliver)}`);
  }
  if (o.signal !== undefined && !(o.signal instanceof AbortSignal)) throw new TypeError("options.signal must be an AbortSignal");
  if ((o.confirmAck as unknown) === null) {
    // readOptionKeys takes null for "no options": here that would keep a null that settling reads.
    throw new TypeError("options.confirmAck must be { timeoutMs?, retries? } or false, got null: leave it out for the default, or pass false for plain ACKs");
  }
  if (o.confirmAck !== undefined && o.confirmAck !== false) {
    const c = readOptionKeys("options.confirmAck", o.confirmAck, ["timeoutMs", "retries"]) as { timeoutMs?: unknown; retries?: unknown };
    if (c.timeoutMs !== undefined && !isIntegerIn(c.timeoutMs, 1, 60_000)) {
      throw new TypeError(`options.confirmAck.timeoutMs must be an integer in 1 ..= 60000, got ${String(c.timeoutMs)}`);
    }
    if (c.retries !== undefined && !isIntegerIn(c.retries, 0, 10)) {
      throw new TypeError(`options.confirmAck.retries must be an integer in 0 ..= 10, got ${String(c.retries)}`);
    }
  }
  checkMetricsOption(o.metrics, "options.metrics");
  const conn = o.connection as unknown;
  if (conn !== undefined && (conn === null || typeof conn !== "object" || typeof (conn as { isClosed?: unknown }).isClosed !== "function")) {
    throw new TypeError("options.connection must be the NatsConnection the messages arrive on (nc from connect())");
  }
  if (conn !== undefined && o.confirmAck !== undefined && o.confirmAck !== false && typeof (conn as { request?: unknown }).request !== "function") {
    // Confirmed ACKs are retried as requests on it: without request() every retry would fail unseen.
    throw new TypeError("options.connection must be a NatsConnection with request() when confirmAck is set (nc from connect())");
  }
  if (o.heartbeat !== undefined) validateHeartbeat(o.heartbeat);
  if (o.backOff !== undefined && o.backOff !== "reject" && o.backOff !== "aware") {
    throw new TypeError(`options.backOff must be "reject" or "aware", got ${JSON.stringify(o.backOff)}`);
  }
  return o;
}

/** Checks the per-call options of `process`. */
export function validateProcessOptions(options: unknown): ProcessOptions {
  const o = readOptionKeys("process options", options, PROCESS_KEYS, "process") as ProcessOptions;
  if (o.signal !== undefined && !(o.signal instanceof AbortSignal)) throw new TypeError("process options.signal must be an AbortSignal");
  return o;
}

function validateDeadLetter(value: unknown): void {
  const d = readOptionKeys("options.deadLetter", value, ["js", "subject", "timeoutMs", "headers"]) as { js?: unknown; subject?: unknown; timeoutMs?: unknown; headers?: unknown };
  const js = d.js as { publish?: unknown; subscribe?: unknown; flush?: unknown } | null | undefined;
  if (!js || typeof js !== "object" || typeof js.publish !== "function") {
    throw new TypeError("options.deadLetter.js must be a JetStream client (jetstream(nc)): its publish waits for the stream's ack");
  }
  // A core connection also has publish, but it returns nothing: no copy would be confirmed.
  if (typeof js.subscribe === "function" && typeof js.flush === "function") {
    throw new TypeError("options.deadLetter.js is a core NatsConnection: pass jetstream(nc), whose publish waits for the stream to store the copy");
  }
  if (typeof d.subject !== "string" || d.subject === "" || /[\s*>]/.test(d.subject)) {
    throw new TypeError(`options.deadLetter.subject must be a literal subject (no spaces or wildcards), got ${JSON.stringify(d.subject)}`);
  }
  if (d.timeoutMs !== undefined && !isIntegerIn(d.timeoutMs, 1, 60_000)) {
    throw new TypeError(`options.deadLetter.timeoutMs must be an integer in 1 ..= 60000, got ${String(d.timeoutMs)}`);
  }
  if (d.headers !== undefined && typeof d.headers !== "function") {
    throw new TypeError(
      `options.deadLetter.headers must be a function (msg, error) => ({ name: value }), got ${d.headers === null ? "null" : typeof d.headers}: it is called for each copy, so the headers can depend on the message and its error`,
    );
  }
}

function validateHeartbeat(value: unknown): void {
  const h = readOptionKeys("options.heartbeat", value, ["onLimit", "confirm", "requireProgress", "thread"], "heartbeat") as Record<string, unknown>;
  checkHeartbeatThreadOption(h["thread"], "options.heartbeat.thread");
  if (h["onLimit"] !== undefined && h["onLimit"] !== "continue" && h["onLimit"] !== "abort") {
    throw new TypeError(`options.heartbeat.onLimit must be "continue" or "abort", got ${JSON.stringify(h["onLimit"])}`);
  }
  if (h["requireProgress"] !== undefined && typeof h["requireProgress"] !== "boolean") {
    throw new TypeError("options.heartbeat.requireProgress must be a boolean");
  }
  if (h["confirm"] !== undefined) {
    const c = readOptionKeys("options.heartbeat.confirm", h["confirm"], ["connection", "timeoutMs"]) as { connection?: { request?: unknown }; timeoutMs?: unknown };
    if (!c.connection || typeof c.connection.request !== "function") {
      throw new TypeError("options.heartbeat.confirm.connection must be a NatsConnection (it sends each +WPI as a request)");
    }
    if (c.timeoutMs !== undefined && !isIntegerIn(c.timeoutMs, 1, 60_000)) {
      throw new TypeError(`options.heartbeat.confirm.timeoutMs must be an integer in 1 ..= 60000, got ${String(c.timeoutMs)}`);
    }
  }
}
