/**
 * The errors of the guardrails and of the consumer checks, and the stable codes they carry.
 */
import { recognise } from "./error-kind.js";

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
 * Why a durable consumer was refused by `CommitThenAck.forConsumer`, or what a loop reports
 * about it to `onError` (stable strings).
 *
 * - `consumer_not_found`: the stream or the consumer does not exist.
 * - `consumer_unreadable`: its info could not be read (permissions, timeout, server down).
 * - `not_durable`: the consumer is ephemeral; workers cannot share it.
 * - `ack_policy_not_explicit`: the consumer does not use explicit acks, so commit-then-ack cannot hold.
 * - `policy_violation`: the effective AckWait/BackOff does not fit the InProgress policy (see `violations`).
 * - `ack_wait_drift`: the AckWait the host configured differs from the server's.
 * - `max_deliver_backoff`: BackOff-aware mode, and MaxDeliver does not cover the BackOff steps
 *   under the connected server's rules.
 * - `inactive_threshold_too_short`: heartbeats are on, the consumer has an `inactive_threshold`
 *   that is not above the interval with the 80% margin, and the server is older than 2.11.7 (or
 *   of unknown version), where a write's `+WPI` frames are the consumer's only activity: the
 *   server would delete it between two beats. Thrown by `forConsumer` and by the loops at start.
 * - `dead_letter_loop`: the source stream itself captures the dead-letter subject.
 * - `dead_letter_uncaptured`: no stream captures the dead-letter subject.
 * - `priority_group_required`: the consumer has priority groups (nats-server 2.11+) and the
 *   loop's `pull.group` names none of them (or names one the consumer does not have).
 * - `max_ack_pending_below_capacity`: reported by the loops at start: the consumer's
 *   `max_ack_pending` is below what the loop could hold at once.
 * - `link_too_slow`: thrown by the loops before their first pull: the heartbeat interval plus
 *   twice the round trip to the server (measured then) reaches the consumer's redelivery
 *   window (beats would arrive after the lease ended) — on the heartbeat thread's own
 *   connection too, with `heartbeat: { thread }` — or, for a consumer object without
 *   `consume()` that the loop must fetch from, the round trip is a third or more of the pull
 *   expiry (the client would end fetches the server still delivers into).
 * - Reported by the loops to `onError`, not thrown: `pull_expiry_clamped` (`expiresMs` is above
 *   the lease bound, so pulls expire at the bound; a pull is never cut short),
 *   `consumer_paused` (nothing is delivered until it resumes; the loop waits) and
 *   `consumer_unavailable` (the loop's subscription says the consumer was deleted or cannot deliver).
 * - `max_deliver_unknown`: a `settleError`, not thrown: the consumer's MaxDeliver could not be
 *   read, so a temporary failure was left for redelivery instead of NAKed.
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
  | "inactive_threshold_too_short"
  | "dead_letter_loop"
  | "dead_letter_uncaptured"
  | "priority_group_required"
  | "max_ack_pending_below_capacity"
  | "link_too_slow"
  | "pull_expiry_clamped"
  | "consumer_paused"
  | "consumer_unavailable"
  | "max_deliver_unknown";

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

recognise(InProgressPolicyError, "InProgressPolicyError");
recognise(ConsumerPolicyError, "ConsumerPolicyError");
