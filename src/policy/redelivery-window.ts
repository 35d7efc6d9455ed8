/**
 * The redelivery window of a message: AckWait, or with BackOff `BackOff[min(n-1, len-1)]` for
 * delivery n (the server overwrites AckWait with `BackOff[0]`).
 */
import type { VerifiedInProgressPolicy } from "./in-progress-policy.js";
import { MAX_BACKOFF_STEPS } from "./timing-limits.js";
import { isPositiveFinite } from "./untrusted.js";

/**
 * The redelivery window (ms) of a message at delivery `n` under a verified policy. An unknown
 * (or unusable: not a number, below 1) delivery count takes the smallest BackOff step, the
 * conservative choice. Never throws: a policy that cannot be read gives 0, a lease that is
 * already lost.
 */
export function windowFor(policy: VerifiedInProgressPolicy, n: number | undefined): number {
  try {
    const timing = policy.timing;
    const backOff = policy.backOff === "aware" ? timing?.backOffMs : undefined;
    const length = stepCount(backOff);
    if (backOff !== undefined && length > 0) {
      // Called per message: the step of a known delivery is one read, the scan only a fallback.
      if (typeof n !== "number" || !(n >= 1)) return smallestStep(backOff, length);
      const step = backOff[Math.min(Math.floor(n) - 1, length - 1)];
      return isPositiveFinite(step) ? step : smallestStep(backOff, length);
    }
    const ackWait = timing?.ackWaitMs;
    return isPositiveFinite(ackWait) ? ackWait : 0;
  } catch {
    return 0;
  }
}

/**
 * Whether every message gets the same window under `policy`, whatever its delivery count:
 * true unless a BackOff list is in effect (BackOff-aware mode with a non-empty list). A
 * policy that cannot be read counts as shared (its window is then the smallest one).
 */
export function windowIsShared(policy: VerifiedInProgressPolicy): boolean {
  try {
    if (policy.backOff !== "aware") return true;
    return stepCount(policy.timing?.backOffMs) === 0;
  } catch {
    return true;
  }
}

/** The number of steps to look at (0 for no list), never more than the guardrails accept. */
function stepCount(backOff: readonly number[] | undefined): number {
  if (backOff === undefined || backOff === null) return 0;
  const length: unknown = backOff.length;
  return typeof length === "number" && length > 0 ? Math.min(Math.floor(length), MAX_BACKOFF_STEPS) : 0;
}

/** The smallest usable step, in one loop (a spread into Math.min overflows on long lists); 0 when none is usable. */
function smallestStep(backOff: readonly number[], length: number): number {
  let smallest = Number.POSITIVE_INFINITY;
  for (let i = 0; i < length; i++) {
    const step = backOff[i];
    if (isPositiveFinite(step) && step < smallest) smallest = step;
  }
  return smallest === Number.POSITIVE_INFINITY ? 0 : smallest;
}
