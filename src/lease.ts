/**
 * Deadlines. JetStream counts a message's redelivery deadline from its delivery (or from
 * the last `+WPI` the server received), over a window of AckWait — or, with BackOff, of
 * `BackOff[min(n-1, len-1)]` for delivery n. This module keeps that per message.
 */
import type { VerifiedInProgressPolicy } from "./guardrails.js";

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
 * Per-message refresh times and windows on the monotonic clock; the batch lease is the
 * earliest deadline.
 */
export class LeaseTracker {
  readonly #windows: Float64Array;
  readonly #refreshed: Float64Array;
  #deadline = Number.POSITIVE_INFINITY;

  /**
   * @param windows - each message's window in ms.
   * @param deliveredAt - each message's delivery time (monotonic ms).
   */
  constructor(windows: Float64Array, deliveredAt: Float64Array) {
    this.#windows = windows;
    this.#refreshed = deliveredAt;
    this.#recompute();
  }

  get size(): number {
    return this.#windows.length;
  }

  /** The earliest deadline of the batch (monotonic ms). */
  get deadline(): number {
    return this.#deadline;
  }

  /** The earliest refresh time (monotonic ms): the message that has waited longest. */
  oldestRefresh(): number {
    let oldest = Number.POSITIVE_INFINITY;
    for (const t of this.#refreshed) if (t < oldest) oldest = t;
    return oldest;
  }

  /** Marks message `i` refreshed at `at` (a heartbeat it received was accepted). */
  refresh(i: number, at: number): void {
    if (at > (this.#refreshed[i] ?? Number.POSITIVE_INFINITY)) this.#refreshed[i] = at;
  }

  /** Marks every message refreshed at `at`. */
  refreshAll(at: number): void {
    this.#refreshed.fill(at);
    let smallest = Number.POSITIVE_INFINITY;
    for (const w of this.#windows) if (w < smallest) smallest = w;
    this.#deadline = at + smallest;
  }

  /** Recomputes the batch deadline after individual refreshes. */
  settle(): void {
    this.#recompute();
  }

  #recompute(): void {
    let d = Number.POSITIVE_INFINITY;
    for (let i = 0; i < this.#windows.length; i++) {
      const t = (this.#refreshed[i] ?? 0) + (this.#windows[i] ?? 0);
      if (t < d) d = t;
    }
    this.#deadline = d;
  }
}
