/**
 * The error classes of the library, and the types their fields use. The ground floor: this
 * file imports nothing of the library, so every stage can take its errors from here.
 *
 * Every class is recognised by `instanceof` across copies of the library in one process (the
 * ESM and CommonJS builds side by side, two installed versions): its prototype carries a kind
 * under a registered symbol, and the class's `Symbol.hasInstance` accepts an object of that
 * kind. A host's own subclass keeps the ordinary `instanceof`.
 */

const ERROR_KIND = Symbol.for("jetstream-inprogress.error-kind");

/** The kind of a library error from any copy of the library, or `undefined`. */
export function errorKind(value: unknown): string | undefined {
  try {
    if (typeof value !== "object" || value === null) return undefined;
    const kind: unknown = (value as Record<symbol, unknown>)[ERROR_KIND];
    return typeof kind === "string" ? kind : undefined;
  } catch {
    return undefined;
  }
}

function recognise(cls: abstract new (...args: never[]) => Error, kind: string): void {
  Object.defineProperty(cls.prototype, ERROR_KIND, { value: kind });
  Object.defineProperty(cls, Symbol.hasInstance, {
    value(this: unknown, value: unknown): boolean {
      if (typeof this === "function" && Function.prototype[Symbol.hasInstance].call(this, value)) return true;
      // Only the class itself accepts copies; a host's subclass keeps the ordinary check.
      return this === cls && errorKind(value) === kind;
    },
  });
}

/**
 * Stable violation codes; see the table in docs/api-guide.md.
 *
 * @example
 * ```ts
 * const fatal: ViolationCode[] = ["ack_wait_unknown", "backoff_not_supported"];
 * ```
 */
export type ViolationCode =
  | "invalid_policy"
  | "unknown_field"
  | "invalid_enabled"
  | "invalid_interval"
  | "invalid_max_heartbeats"
  | "invalid_shutdown_timeout"
  | "invalid_backoff_mode"
  | "ack_wait_unknown"
  | "ack_wait_invalid"
  | "ack_wait_too_long"
  | "ack_wait_backoff_mismatch"
  | "interval_too_close_to_ack_wait"
  | "backoff_not_supported"
  | "backoff_invalid"
  | "interval_too_close_to_backoff"
  | "policy_not_verified";

/**
 * One problem found by the guardrails.
 *
 * @example
 * ```ts
 * const v: PolicyViolation = { code: "invalid_interval", field: "intervalMs", message: "..." };
 * ```
 */
export interface PolicyViolation {
  /** Stable code, safe to match on. */
  readonly code: ViolationCode;
  /** The field at fault, for example `intervalMs` or `timing.ackWaitMs`. */
  readonly field: string;
  /** The field, the value, the limit and the way out, for a person. */
  readonly message: string;
}

/**
 * Thrown by {@link verifyInProgressPolicy} (and by `withInProgress` when it is handed an
 * enabled policy that never went through verification) when a policy is unsafe or malformed.
 *
 * `violations` lists every problem found, not just the first, so a host can fix its
 * configuration in one pass.
 *
 * @example
 * ```ts
 * try {
 *   verifyInProgressPolicy({ enabled: true, intervalMs: 24_000 }, { ackWaitMs: 30_000, source: "configured" });
 * } catch (err) {
 *   if (err instanceof InProgressPolicyError) {
 *     for (const v of err.violations) console.error(v.code, v.field, v.message);
 *   }
 * }
 * ```
 */
export class InProgressPolicyError extends Error {
  /** Always `"InProgressPolicyError"`. */
  override readonly name = "InProgressPolicyError";
  /** Every violation found, in a stable order (policy fields first, then consumer timing). */
  readonly violations: readonly PolicyViolation[];

  /**
   * @param violations - the violations found; at least one.
   * @param options - standard error options (`cause`).
   */
  constructor(violations: readonly PolicyViolation[], options?: ErrorOptions) {
    const list = violations.map((v, i) => `  ${i + 1}. [${v.code}] ${v.message}`).join("\n");
    const n = violations.length;
    super(`unsafe InProgress policy (${n} violation${n === 1 ? "" : "s"}):\n${list}`, options);
    this.violations = Object.freeze([...violations]);
  }
}

/**
 * Why a durable consumer was refused by `CommitThenAck.forConsumer` (stable strings).
 *
 * - `consumer_not_found`: the stream or the consumer does not exist.
 * - `consumer_unreadable`: its info could not be read (permissions, timeout, server down).
 * - `not_durable`: the consumer is ephemeral; workers cannot share it.
 * - `ack_policy_not_explicit`: the consumer does not use explicit acks, so commit-then-ack cannot hold.
 * - `policy_violation`: the effective AckWait/BackOff does not fit the InProgress policy (see `violations`).
 * - `ack_wait_drift`: the AckWait the host configured differs from the server's.
 * - `max_deliver_backoff`: BackOff-aware mode, and MaxDeliver does not cover the BackOff steps
 *   under the connected server's rules.
 * - `dead_letter_loop`: the source stream itself captures the dead-letter subject.
 * - `dead_letter_uncaptured`: no stream captures the dead-letter subject.
 * - `priority_group_required`: the consumer has priority groups (nats-server 2.11+) and the
 *   loop's `pull.group` names none of them (or names one the consumer does not have).
 * - `max_ack_pending_below_capacity`: reported by `run`/`runEach` to `onError` at start, not
 *   thrown: the consumer's `max_ack_pending` is below what the loop could hold at once.
 *
 * @example
 * ```ts
 * const retryable: ConsumerPolicyReason[] = ["consumer_unreadable"];
 * if (err instanceof ConsumerPolicyError && retryable.includes(err.reason)) scheduleRetry();
 * ```
 */
export type ConsumerPolicyReason =
  | "consumer_not_found"
  | "consumer_unreadable"
  | "not_durable"
  | "ack_policy_not_explicit"
  | "policy_violation"
  | "ack_wait_drift"
  | "max_deliver_backoff"
  | "dead_letter_loop"
  | "dead_letter_uncaptured"
  | "priority_group_required"
  | "max_ack_pending_below_capacity";

/**
 * A durable consumer could not be inspected, or is unsuitable for commit-then-ack with the
 * requested InProgress policy. Raised before anything is fetched (fail closed).
 *
 * @example
 * ```ts
 * try {
 *   await CommitThenAck.forConsumer(jsm, "ORDERS", "writer", { inProgress: { enabled: true } });
 * } catch (err) {
 *   if (err instanceof ConsumerPolicyError) console.error(err.reason, err.message);
 * }
 * ```
 */
export class ConsumerPolicyError extends Error {
  /** Always `"ConsumerPolicyError"`. */
  override readonly name = "ConsumerPolicyError";
  /** The stable reason code. */
  readonly reason: ConsumerPolicyReason;
  /** The stream the consumer belongs to. */
  readonly stream: string;
  /** The durable consumer's name. */
  readonly consumer: string;
  /** Policy violations, when `reason` is `policy_violation`; otherwise empty. */
  readonly violations: readonly PolicyViolation[];

  /**
   * @param reason - the stable reason code.
   * @param details - the stream, the consumer, a human message and optional violations.
   * @param options - standard error options (`cause`).
   */
  constructor(
    reason: ConsumerPolicyReason,
    details: {
      readonly stream: string;
      readonly consumer: string;
      readonly message: string;
      readonly violations?: readonly PolicyViolation[];
    },
    options?: ErrorOptions,
  ) {
    super(`consumer ${details.stream} > ${details.consumer}: ${details.message}`, options);
    this.reason = reason;
    this.stream = details.stream;
    this.consumer = details.consumer;
    this.violations = Object.freeze([...(details.violations ?? [])]);
  }
}

/**
 * Thrown by a host's write to say "this failed, try again later" (NAK or leave for
 * redelivery, by policy). Errors the host does not classify are treated the same way:
 * retrying is safer than losing data.
 *
 * @example
 * ```ts
 * await ack.process(msgs, async (batch) => {
 *   try {
 *     await db.insertMany(batch.map((m) => m.json()));
 *   } catch (err) {
 *     throw new TemporarySinkError("database unavailable", { cause: err });
 *   }
 * });
 * ```
 */
export class TemporarySinkError extends Error {
  /** Always `"TemporarySinkError"`. */
  override readonly name = "TemporarySinkError";

  /**
   * @param message - what failed (keep subjects, payloads and credentials out of it).
   * @param options - standard error options (`cause`).
   */
  constructor(message = "temporary sink failure", options?: ErrorOptions) {
    super(message, options);
  }
}

/**
 * Thrown by a host's write to say "this can never succeed" (a poison message): the message
 * is dead-lettered when a dead-letter target is configured, otherwise terminated.
 *
 * @example
 * ```ts
 * await ack.process(msgs, async (batch) => {
 *   const rows = batch.map((m) => parseOrThrow(m.data));
 *   if (rows.some((r) => r === undefined)) throw new PermanentSinkError("unparseable record");
 *   await db.insertMany(rows);
 * });
 * ```
 */
export class PermanentSinkError extends Error {
  /** Always `"PermanentSinkError"`. */
  override readonly name = "PermanentSinkError";

  /**
   * @param message - what failed (keep subjects, payloads and credentials out of it).
   * @param options - standard error options (`cause`).
   */
  constructor(message = "permanent sink failure", options?: ErrorOptions) {
    super(message, options);
  }
}

/**
 * The abort reason of `ctx.signal` when a batch's lease ran out: the redelivery deadline of
 * at least one message passed without an accepted heartbeat (connection down, event loop
 * blocked, heartbeat limit reached, or no progress reported). JetStream may already have
 * handed the message to another worker, so committing now risks a duplicate.
 *
 * @example
 * ```ts
 * await withInProgress(msgs, async (ctx) => {
 *   await sink.prepare(msgs);
 *   // Throw, never return: a write that resolves counts as committed and is acknowledged.
 *   if (ctx.signal.reason instanceof LeaseExpiredError) throw ctx.signal.reason; // skip a duplicate commit
 *   await sink.commit();
 * }, policy);
 * ```
 */
export class LeaseExpiredError extends Error {
  /** Always `"LeaseExpiredError"`. */
  override readonly name = "LeaseExpiredError";
  /** How far past the deadline the expiry was noticed, in milliseconds. */
  readonly overdueMs: number;

  /**
   * @param overdueMs - how far past the deadline the expiry was noticed.
   * @param options - standard error options (`cause`).
   */
  constructor(overdueMs: number, options?: ErrorOptions) {
    super(
      `InProgress lease expired ${Math.round(overdueMs)} ms ago: the message may already be redelivered to another worker`,
      options,
    );
    this.overdueMs = overdueMs;
  }
}

/**
 * The abort reason of `ctx.signal` when `maxHeartbeats` was reached and the host asked for
 * `onLimit: "abort"`.
 *
 * @example
 * ```ts
 * await withInProgress(msgs, work, policy, { onLimit: "abort" }).catch((err) => {
 *   if (err instanceof HeartbeatLimitError) console.warn("write outlived its heartbeat budget");
 * });
 * ```
 */
export class HeartbeatLimitError extends Error {
  /** Always `"HeartbeatLimitError"`. */
  override readonly name = "HeartbeatLimitError";
  /** The limit that was reached. */
  readonly maxHeartbeats: number;

  /**
   * @param maxHeartbeats - the limit that was reached.
   * @param options - standard error options (`cause`).
   */
  constructor(maxHeartbeats: number, options?: ErrorOptions) {
    super(`InProgress heartbeat limit of ${maxHeartbeats} reached before the work finished`, options);
    this.maxHeartbeats = maxHeartbeats;
  }
}

/**
 * The messages' connection is closed, so no frame could be sent: a heartbeat round failed for
 * good, or a message was left unsettled (`MessageResult.settleError`). JetStream redelivers it
 * after AckWait. The client's own `working()` and `ack()` raise nothing on a closed connection;
 * the library asks the connection instead.
 *
 * @example
 * ```ts
 * const result = await ack.process(msgs, write);
 * if (result.messages.some((r) => r.settleError instanceof ConnectionClosedError)) await reconnectAndRestart();
 * ```
 */
export class ConnectionClosedError extends Error {
  /** Always `"ConnectionClosedError"`. */
  override readonly name = "ConnectionClosedError";

  /** @param options - standard error options (`cause`). */
  constructor(options?: ErrorOptions) {
    super("closed connection: no frame can be sent", options);
  }
}

/**
 * The messages' connection is open but between connections: the client drops what is
 * published then, without an error. A heartbeat round counts such a beat as failed (the lease
 * is not extended); an ACK of a committed message is held until the reconnect, and carries this
 * error in `MessageResult.settleError` only when the lease, or the bound of a shutdown that
 * began meanwhile, ran out first (expect a redelivery). A held ACK whose connection closes is
 * reported `left` with a {@link ConnectionClosedError}.
 *
 * @example
 * ```ts
 * const unsent = result.messages.filter((r) => r.settleError instanceof DisconnectedError).length;
 * if (unsent > 0) log.warn(`${unsent} committed messages will be redelivered`);
 * ```
 */
export class DisconnectedError extends Error {
  /** Always `"DisconnectedError"`. */
  override readonly name = "DisconnectedError";

  /** @param options - standard error options (`cause`). */
  constructor(options?: ErrorOptions) {
    super("disconnected: frames published before the client reconnects are dropped", options);
  }
}

/**
 * A confirmed ACK (`confirmAck`) got no reply after every attempt: it may or may not have
 * landed. Found in `MessageResult.settleError`. The client's own error is not kept: its message
 * names the ack reply subject, which carries the stream, the consumer and the message's
 * sequences. Only its class and a fixed phrase for the usual causes are.
 *
 * @example
 * ```ts
 * for (const r of result.messages) {
 *   if (r.settleError instanceof AckNotConfirmedError) log.warn({ attempts: r.settleError.attempts, kind: r.settleError.lastFailure });
 * }
 * ```
 */
export class AckNotConfirmedError extends Error {
  /** Always `"AckNotConfirmedError"`. */
  override readonly name = "AckNotConfirmedError";
  /** Requests sent (the first `ackAck` and every retry). */
  readonly attempts: number;
  /** The last failure's kind: `timeout`, `no_responders` (the consumer is gone) or `error`. */
  readonly lastFailure: "timeout" | "no_responders" | "error";
  /** The class name of the last failure (`TimeoutError`, `RequestError`, ...). */
  readonly lastErrorName: string;

  /**
   * @param attempts - requests sent.
   * @param lastError - the last attempt's error (only its class name and kind are kept).
   */
  constructor(attempts: number, lastError: unknown) {
    const kind = failureKind(lastError);
    const name = errorName(lastError);
    super(`the ACK was not confirmed after ${attempts} attempt${attempts === 1 ? "" : "s"}: ${kind.replace("_", " ")} (${name}); it may or may not have landed`);
    this.attempts = attempts;
    this.lastFailure = kind;
    this.lastErrorName = name;
  }
}

function failureKind(err: unknown): AckNotConfirmedError["lastFailure"] {
  // Walk the cause chain by class name only; messages are never read.
  for (let e = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    if (e.name === "TimeoutError") return "timeout";
    if (e.name === "NoResponders" || e.name === "NoRespondersError") return "no_responders";
  }
  return "error";
}

/**
 * Why a dead-letter copy was not confirmed (stable strings):
 *
 * - `publish_failed`: the publish failed or timed out (its error's class name is kept);
 * - `not_confirmed`: the publish returned no stream acknowledgement with a `stream` and a `seq`
 *   (for example a core connection passed where a JetStream client belongs);
 * - `source_stream`: the stream that acknowledged the copy is the message's own stream, which
 *   would consume it again — the target is then unusable for this instance;
 * - `target_unusable`: the target was marked unusable by an earlier `source_stream`;
 * - `headers_refused`: the copy *was* confirmed and the original acknowledged, but without the
 *   headers of `deadLetter.headers`, which threw or returned some that cannot be set (`cause`).
 *
 * @example
 * ```ts
 * const misconfigured: DeadLetterFailure[] = ["not_confirmed", "source_stream", "target_unusable"];
 * ```
 */
export type DeadLetterFailure = "publish_failed" | "not_confirmed" | "source_stream" | "target_unusable" | "headers_refused";

/**
 * A dead-letter copy was not confirmed by a stream, so the original was not acknowledged: it
 * stays redeliverable, or, on its last allowed delivery, is reported as exhausted — or, with
 * reason `headers_refused`, it went out without the host's headers. In `MessageResult.settleError`.
 *
 * @example
 * ```ts
 * for (const r of result.messages) {
 *   if (r.settleError instanceof DeadLetterError && r.settleError.reason !== "publish_failed") {
 *     alert(`the dead-letter target or its headers hook is misconfigured (${r.settleError.reason})`);
 *   }
 * }
 * ```
 */
export class DeadLetterError extends Error {
  /** Always `"DeadLetterError"`. */
  override readonly name = "DeadLetterError";
  /** The stable reason code. */
  readonly reason: DeadLetterFailure;
  /**
   * For `publish_failed`: the class name of the publish's error (`TimeoutError`,
   * `NoRespondersError`, …). The error itself is not kept: its message may name the subject.
   */
  readonly publishErrorName: string | undefined;

  /**
   * @param reason - why the copy was not confirmed.
   * @param publishError - the publish's own error, for `publish_failed` (only its class name is kept).
   * @param options - standard error options (`cause`).
   */
  constructor(reason: DeadLetterFailure, publishError?: unknown, options?: ErrorOptions) {
    const errorClass = publishError === undefined ? undefined : errorName(publishError);
    super(errorClass === undefined ? DEAD_LETTER_MESSAGES[reason] : `${DEAD_LETTER_MESSAGES[reason]} (${errorClass})`, options);
    this.reason = reason;
    this.publishErrorName = errorClass;
  }
}

const DEAD_LETTER_MESSAGES: Readonly<Record<DeadLetterFailure, string>> = {
  publish_failed: "the dead-letter publish failed: the original stays redeliverable",
  not_confirmed:
    "the dead-letter publish returned no stream acknowledgement (stream and seq): pass a JetStream client (jetstream(nc)), not a core connection, and make sure a stream captures the subject",
  source_stream:
    "the dead-letter copy was stored by the message's own stream, which would consume it again: use a subject that another stream captures",
  target_unusable: "the dead-letter target was found to loop back into the source stream earlier: fix the subject and restart",
  headers_refused: "the dead-letter copy was published with the library's headers only: options.deadLetter.headers threw or returned headers that cannot be set (see cause)",
};

/**
 * An error's class name for events and metrics — never its message, which may carry
 * subjects or payload fragments.
 *
 * @internal
 */
export function errorName(err: unknown): string {
  if (err instanceof Error) return /^[A-Za-z0-9_$.]{1,64}$/.test(err.name) ? err.name : "Error";
  return err === null ? "null" : typeof err;
}

for (const [cls, kind] of [
  [InProgressPolicyError, "InProgressPolicyError"],
  [ConsumerPolicyError, "ConsumerPolicyError"],
  [TemporarySinkError, "TemporarySinkError"],
  [PermanentSinkError, "PermanentSinkError"],
  [LeaseExpiredError, "LeaseExpiredError"],
  [HeartbeatLimitError, "HeartbeatLimitError"],
  [ConnectionClosedError, "ConnectionClosedError"],
  [DisconnectedError, "DisconnectedError"],
  [AckNotConfirmedError, "AckNotConfirmedError"],
  [DeadLetterError, "DeadLetterError"],
] as const) {
  recognise(cls, kind);
}
