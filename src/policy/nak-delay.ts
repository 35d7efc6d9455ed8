/**
 * NAK delays under BackOff. The server stores a NAK'd message as if delivered at
 * `now - AckWait + delay`, and with BackOff it expires after `BackOff[min(n-1, len-1)]`, so the
 * real wait is `delay + BackOff[idx] - AckWait` (AckWait being BackOff[0]). This module turns a
 * requested wait into the delay to send.
 */

/** The delay to send and the wait the server will really apply. */
export interface NakDelay {
  /** Milliseconds to put in the NAK (0: a bare NAK, redelivered at once). */
  readonly sendMs: number;
  /** Milliseconds the server will wait before redelivering. */
  readonly effectiveMs: number;
  /** True when the requested wait could not be met exactly. */
  readonly adjusted: boolean;
}

/**
 * Computes the NAK delay for a message at delivery `n`.
 *
 * Without BackOff (or without BackOff-aware mode) the requested delay is sent as is. With
 * BackOff, the BackOff excess `BackOff[idx] - BackOff[0]` is subtracted; when the request is
 * shorter than that excess, the smallest positive delay (1 ms) is sent and the real wait
 * reported. A request of 0 stays a bare NAK: immediate redelivery on every server.
 */
export function nakDelay(requestedMs: number, n: number | undefined, backOffMs: readonly number[] | undefined): NakDelay {
  const requested = Math.max(0, Math.round(requestedMs));
  if (requested === 0) return { sendMs: 0, effectiveMs: 0, adjusted: false };
  if (!backOffMs || backOffMs.length === 0) return { sendMs: requested, effectiveMs: requested, adjusted: false };
  const first = backOffMs[0]!;
  // An unknown delivery count takes the largest step: the real wait is then at most what is reported.
  const idx = n === undefined ? backOffMs.length - 1 : Math.min(Math.max(n, 1) - 1, backOffMs.length - 1);
  // Negative when a later step is shorter than the first: the server then waits less than the
  // delay sent, so the delay must grow rather than be clamped.
  const excess = backOffMs[idx]! - first;
  const send = requested - excess;
  if (send >= 1) return { sendMs: Math.round(send), effectiveMs: requested, adjusted: false };
  return { sendMs: 1, effectiveMs: excess + 1, adjusted: true };
}
