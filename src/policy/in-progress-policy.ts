/**
 * The InProgress policy contract: the fields a host sets, their defaults, the consumer timing
 * they are checked against, and the shapes a check returns. Types and constants only.
 */
import type { PolicyViolation } from "../errors.js";

/**
 * The InProgress (AckProgress, `+WPI`) heartbeat policy a host asks for. All durations are
 * milliseconds.
 *
 * @example
 * ```ts
 * const policy: Partial<InProgressPolicy> = { enabled: true, intervalMs: 10_000, maxHeartbeats: 30 };
 * ```
 */
export interface InProgressPolicy {
  /** Opt-in switch; heartbeats (`+WPI`) are never sent unless this is `true`. Default `false`. */
  readonly enabled: boolean;
  /**
   * Milliseconds between heartbeats, integer 1 ..= 3,600,000. Must be below 80% of the
   * consumer's effective AckWait (a third of it leaves two beats of slack). Default 5000.
   */
  readonly intervalMs: number;
  /**
   * The most heartbeats one batch gets, integer 1 ..= 10,000: a write may hold its messages
   * for about `intervalMs × maxHeartbeats` plus one AckWait before they are redelivered.
   * Default 12.
   */
  readonly maxHeartbeats: number;
  /**
   * Milliseconds a write gets to stop after a shutdown aborted its `ctx.signal`, integer
   * 0 ..= 60,000; its messages keep their lease meanwhile. Default 5000.
   */
  readonly shutdownTimeoutMs: number;
}

/**
 * The defaults: disabled, 5 s interval, 12 heartbeats, 5 s shutdown bound.
 *
 * @example
 * ```ts
 * const policy = verifyInProgressPolicy({ ...DEFAULT_IN_PROGRESS_POLICY, enabled: true }, timing);
 * ```
 */
export const DEFAULT_IN_PROGRESS_POLICY: Readonly<InProgressPolicy> = Object.freeze({
  enabled: false,
  intervalMs: 5000,
  maxHeartbeats: 12,
  shutdownTimeoutMs: 5000,
});

/**
 * A heartbeat interval must be strictly below this share of the effective redelivery
 * window (AckWait, or the smallest BackOff step), so a beat lands before the deadline even
 * when it is late.
 *
 * @example
 * ```ts
 * const longestSafeIntervalMs = Math.ceil(ACK_WAIT_SAFETY_RATIO * 30_000) - 1; // 23999
 * ```
 */
export const ACK_WAIT_SAFETY_RATIO = 0.8;

/**
 * A consumer's effective ack timing, in milliseconds.
 *
 * @example
 * ```ts
 * const configured: ConsumerTiming = { ackWaitMs: 30_000, source: "configured" };
 * const inspected = consumerTimingFromConfig(await jsm.consumers.info("ORDERS", "writer"));
 * ```
 */
export interface ConsumerTiming {
  /** The consumer's AckWait in milliseconds. */
  readonly ackWaitMs?: number;
  /** The consumer's BackOff steps in milliseconds; absent or empty means no BackOff. */
  readonly backOffMs?: readonly number[];
  /** The consumer's MaxDeliver (`-1` or absent: unlimited), when known. */
  readonly maxDeliver?: number;
  /** `configured`: set by the host; `inspected`: read from the server. */
  readonly source: "configured" | "inspected";
}

/**
 * How BackOff is treated: `reject` (default) refuses any BackOff; `aware` times heartbeats
 * against the BackOff step of each delivery.
 *
 * @example
 * ```ts
 * checkInProgressPolicy(policy, timing, { backOff: "aware" });
 * ```
 */
export type BackOffMode = "reject" | "aware";

/**
 * Options of {@link checkInProgressPolicy} and {@link verifyInProgressPolicy}.
 *
 * @example
 * ```ts
 * const options: CheckOptions = { backOff: "aware" };
 * ```
 */
export interface CheckOptions {
  /** BackOff handling: `"reject"` (default) refuses any BackOff, `"aware"` checks the interval against its smallest step. */
  readonly backOff?: BackOffMode;
}

declare const verifiedBrand: unique symbol;

/**
 * A policy that passed {@link verifyInProgressPolicy}: frozen, carrying the timing it was
 * checked against. Only such a policy (or a disabled one) is accepted by `withInProgress`.
 *
 * @example
 * ```ts
 * const policy: VerifiedInProgressPolicy = verifyInProgressPolicy({ enabled: true }, { ackWaitMs: 30_000, source: "configured" });
 * ```
 */
export interface VerifiedInProgressPolicy extends InProgressPolicy {
  /** The timing the policy was verified against; `undefined` when disabled. */
  readonly timing: ConsumerTiming | undefined;
  /** The BackOff mode it was verified under. */
  readonly backOff: BackOffMode;
  /** @internal */
  readonly [verifiedBrand]: true;
}

/**
 * A policy that sends no heartbeat; accepted by `withInProgress` and `CommitThenAck` without
 * verification.
 *
 * @example
 * ```ts
 * const off: DisabledInProgressPolicy = { enabled: false };
 * ```
 */
export interface DisabledInProgressPolicy {
  /** Always `false`. */
  readonly enabled: false;
}

/**
 * The result of {@link checkInProgressPolicy}.
 *
 * @example
 * ```ts
 * const check: PolicyCheck = checkInProgressPolicy(raw, timing);
 * if (!check.ok) console.error(check.violations);
 * ```
 */
export type PolicyCheck =
  | {
      /** The policy is safe. */
      readonly ok: true;
      /** The verified, frozen policy, to hand to `withInProgress` or `CommitThenAck`. */
      readonly policy: VerifiedInProgressPolicy;
    }
  | {
      /** The policy is unsafe or malformed. */
      readonly ok: false;
      /** Every violation found (at least one). */
      readonly violations: readonly PolicyViolation[];
    };

