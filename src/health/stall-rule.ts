/**
 * When a flat ack floor means a worker stopped, and when it is only slow. Pure: no I/O, no
 * timers, no clock; every time is passed in.
 *
 * A flat floor with messages in flight is what a healthy slow write looks like under
 * InProgress heartbeats (`+WPI` keeps the delivery alive, nothing is acked until the commit),
 * what a delayed NAK looks like (the message waits for its retry), and what a stopped worker
 * looks like. Consumer info cannot tell them apart by the floor alone, so the floor is only
 * called stalled on evidence that a delivery was given up:
 *
 * - **lease**: the host declared the longest lease a healthy delivery may hold
 *   (`maxLeaseMs`, or an InProgress policy: `intervalMs × maxHeartbeats` + the redelivery
 *   window), and the floor has been flat for longer than that. No heartbeated write lives
 *   that long, so the delivery holding the floor has expired.
 * - **redelivery**: during the flat stretch JetStream redelivered a message, and a full
 *   AckWait (or the declared lease, if longer) after the sample that saw it the floor is still
 *   flat and a redelivered message is still unacknowledged (`num_redelivered > 0`). A
 *   redelivery alone is not enough: a delayed NAK ends in one too, and its retry settles
 *   quickly; a floor that outlives the redelivery by a whole window, with the redelivered
 *   message still out, means the retry is not getting through either. A redelivered message
 *   that was acked (another message's NAK and retry, say) is no evidence against the one
 *   holding the floor.
 *
 * Without a declared lease only the second rule applies: a lone worker that crashed holding a
 * message, with no other worker pulling, is then never called stalled (nothing is redelivered
 * until someone pulls). Declaring the lease closes that gap.
 */
import type { VerifiedInProgressPolicy } from "../policy/in-progress-policy.js";
import { windowFor, windowIsShared } from "../policy/redelivery-window.js";

/**
 * Why a sample was called stalled: `lease` — the floor was flat for longer than the longest
 * declared lease; `redelivery` — a message was redelivered during the flat stretch and the
 * floor stayed flat for a whole window after it.
 *
 * @example
 * ```ts
 * const onSample = (s: ConsumerHealthSample) => {
 *   const why: StallEvidence | undefined = s.stallEvidence;
 *   if (why === "redelivery") console.warn("a redelivered message is not getting through");
 * };
 * ```
 */
export type StallEvidence = "lease" | "redelivery";

/**
 * The longest a delivery can live under a verified policy: the last beat goes out
 * `intervalMs × maxHeartbeats` after delivery, and the delivery lives one redelivery window
 * after it (AckWait, or with BackOff-aware mode the longest BackOff step). A disabled policy
 * sends no beat: its lease is one AckWait, returned as `0` (the caller takes the larger of the
 * lease and the consumer's AckWait).
 *
 * @internal
 */
export function leaseFromPolicy(policy: VerifiedInProgressPolicy): number {
  if (!policy.enabled) return 0;
  let window: number;
  if (windowIsShared(policy)) {
    window = windowFor(policy, undefined);
  } else {
    const steps = policy.timing?.backOffMs?.length ?? 1;
    window = 0;
    for (let n = 1; n <= steps; n++) window = Math.max(window, windowFor(policy, n));
  }
  return policy.intervalMs * policy.maxHeartbeats + (Number.isFinite(window) && window > 0 ? window : 0);
}

/**
 * The lease a flat floor is judged against: the declared lease, never below the consumer's
 * AckWait (a delivery always lives one AckWait without a beat). `undefined` when nothing was
 * declared, or when the result is not a positive number (a disabled policy on a consumer
 * whose AckWait is unknown).
 *
 * @internal
 */
export function effectiveLease(declaredMs: number | undefined, ackWaitMs: number | undefined): number | undefined {
  if (declaredMs === undefined) return undefined;
  const lease = Math.max(declaredMs, ackWaitMs ?? 0);
  return Number.isFinite(lease) && lease > 0 ? lease : undefined;
}

/**
 * What the stall rule looks at in one sample.
 *
 * @internal
 */
export interface StallInput {
  /** Messages in flight (`num_ack_pending`). */
  readonly ackPending: number;
  /** The consumer's AckWait, when known. */
  readonly ackWaitMs: number | undefined;
  /** How long the floor has been flat with messages in flight (0 when not flat). */
  readonly flatMs: number;
  /**
   * Time since the first sample of this flat stretch that counted a redelivery; `undefined`
   * when none did.
   */
  readonly sinceRedeliveryMs: number | undefined;
  /** Redelivered messages not acknowledged yet (`num_redelivered`) in this sample. */
  readonly redeliveredInFlight: number;
  /** The effective lease ({@link effectiveLease}), when declared. */
  readonly leaseMs: number | undefined;
}

/**
 * The stall rule (see the module notes): the evidence that a worker stopped, or `undefined`
 * when the floor shows none. Strict comparisons: a floor flat for exactly the bound is not
 * stalled.
 *
 * @internal
 */
export function stallEvidence(input: StallInput): StallEvidence | undefined {
  if (input.ackPending <= 0) return undefined;
  const { leaseMs, ackWaitMs, sinceRedeliveryMs } = input;
  if (sinceRedeliveryMs !== undefined && input.redeliveredInFlight > 0) {
    const bound = Math.max(ackWaitMs ?? 0, leaseMs ?? 0);
    if (bound > 0 && sinceRedeliveryMs > bound) return "redelivery";
  }
  if (leaseMs !== undefined && input.flatMs > leaseMs) return "lease";
  return undefined;
}
