/**
 * The options of `CommitThenAck`, checked once at construction.
 */
import type { NatsConnection } from "@nats-io/transport-node";
import type { WithInProgressOptions } from "../lease/work-context.js";
import type { BackOffMode, ConsumerTiming, DisabledInProgressPolicy, InProgressPolicy, VerifiedInProgressPolicy } from "../policy/in-progress-policy.js";
import { isVerifiedPolicy } from "../policy/verified-policies.js";
import type { TemporaryFailureAction } from "../settle/batch-result.js";
import type { DeadLetterTarget } from "../settle/dead-letter.js";
import type { ConfirmAckOptions } from "../settle/frames.js";
import type { MetricsSink } from "../telemetry/metrics-sink.js";

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

/** Checks the options of a `CommitThenAck`; throws a `TypeError` naming the option and the fix. */
export function validateOptions(options: unknown): CommitThenAckOptions {
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

