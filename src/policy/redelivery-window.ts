/**
 * The redelivery window of a message: AckWait, or with BackOff `BackOff[min(n-1, len-1)]` for
 * delivery n (the server overwrites AckWait with `BackOff[0]`).
 */
import type { VerifiedInProgressPolicy } from "./in-progress-policy.js";

/**
 * The redelivery window (ms) of a message at delivery `n` under a verified policy. An unknown
 * delivery count takes the smallest BackOff step (the conservative choice).
 */
export function windowFor(policy: VerifiedInProgressPolicy, n: number | undefined): number {
  const timing = policy.timing;
  const backOff = policy.backOff === "aware" ? timing?.backOffMs : undefined;
  if (backOff && backOff.length > 0) {
    if (n === undefined) return Math.min(...backOff);
    return backOff[Math.min(n - 1, backOff.length - 1)] ?? Math.min(...backOff);
  }
  // A verified enabled policy always has one or the other.
  return timing?.ackWaitMs ?? Math.min(...(backOff ?? [Number.NaN]));
}

/**
 * Whether every message gets the same window under `policy`, whatever its delivery count:
 * true unless a BackOff list is in effect (BackOff-aware mode with a non-empty list).
 */
export function windowIsShared(policy: VerifiedInProgressPolicy): boolean {
  if (policy.backOff !== "aware") return true;
  const backOff = policy.timing?.backOffMs;
  return !backOff || backOff.length === 0;
}
