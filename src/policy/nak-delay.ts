/**
 * NAK delays under BackOff. The server stores a NAK'd message as if delivered at
 * `now - AckWait + delay`, and with BackOff it expires after `BackOff[min(n-1, len-1)]`, so the
 * real wait is `delay + BackOff[idx] - AckWait` (AckWait being BackOff[0]). This module turns a
 * requested wait into the delay to send.
 */
import { isPositiveFinite } from "./untrusted.js";

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
 * The longest delay sent (ms): one year. The server reads the delay as a Go duration
 * (int64 nanoseconds) and adds it to the current time in nanoseconds; a delay that does not
 * fit fails to parse or overflows, and the server then redelivers at once, the opposite of
 * what was asked.
 */
export const MAX_NAK_DELAY_MS = 365 * 86_400_000;

/**
 * Computes the NAK delay for a message at delivery `n`.
 *
 * Without BackOff (or without BackOff-aware mode) the requested delay is sent as is. With
 * BackOff, the BackOff excess `BackOff[idx] - BackOff[0]` is subtracted; when the request is
 * shorter than that excess, the smallest positive delay (1 ms) is sent and the real wait
 * reported. A request of 0 stays a bare NAK: immediate redelivery on every server.
 *
 * Never throws. A request that is not a number above 0 (NaN included) is a bare NAK; one
 * above {@link MAX_NAK_DELAY_MS} (Infinity included) is sent as that limit and reported as
 * adjusted. An unusable delivery count is treated as unknown, and a BackOff list that cannot
 * be read as none.
 */
export function nakDelay(requestedMs: number, n: number | undefined, backOffMs: readonly number[] | undefined): NakDelay {
  const asked = typeof requestedMs === "number" && requestedMs > 0 ? Math.round(requestedMs) : 0;
  if (asked === 0) return { sendMs: 0, effectiveMs: 0, adjusted: false };
  const requested = Math.min(asked, MAX_NAK_DELAY_MS);
  const excess = backOffExcess(n, backOffMs);
  if (excess === undefined) return { sendMs: requested, effectiveMs: requested, adjusted: requested !== asked };
  // Negative when a later step is shorter than the first: the server then waits less than the
  // delay sent, so the delay must grow rather than be clamped.
  const send = Math.min(Math.ceil(requested - excess), MAX_NAK_DELAY_MS);
  if (send >= 1) {
    const effectiveMs = send + excess;
    return { sendMs: send, effectiveMs, adjusted: effectiveMs !== asked };
  }
  return { sendMs: 1, effectiveMs: excess + 1, adjusted: true };
}

/** `BackOff[idx] - BackOff[0]` for delivery `n`, or `undefined` with no usable BackOff. */
function backOffExcess(n: number | undefined, backOffMs: readonly number[] | undefined): number | undefined {
  try {
    if (backOffMs === undefined || backOffMs === null) return undefined;
    const length: unknown = backOffMs.length;
    if (typeof length !== "number" || !(length >= 1)) return undefined;
    const last = Math.floor(Math.min(length, Number.MAX_SAFE_INTEGER)) - 1;
    // An unknown delivery count takes the largest step: the real wait is then at most what is reported.
    const idx = typeof n === "number" && n >= 1 ? Math.min(Math.floor(n) - 1, last) : last;
    const first = backOffMs[0];
    const step = backOffMs[idx];
    if (!isPositiveFinite(first) || !isPositiveFinite(step)) return undefined;
    return step - first;
  } catch {
    return undefined;
  }
}
