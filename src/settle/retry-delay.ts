/**
 * The default wait before a temporarily failed message comes back: it grows with the delivery
 * count, so a sink that is down never turns into a hot loop of rewrites. Pure: the caller
 * passes the randomness.
 */

/** The wait after a first delivery fails. */
export const DEFAULT_NAK_DELAY_BASE_MS = 1000;
/** The longest default wait. */
export const DEFAULT_NAK_DELAY_MAX_MS = 60_000;
/** Jitter only ever lengthens the wait, by up to this share, so retries never come early. */
export const DEFAULT_NAK_DELAY_JITTER = 0.2;

/**
 * The default NAK delay for a message at delivery `n` (unknown: the first):
 * `min(max, base × 2^(n−1)) × (1 + jitter × random)`, in whole milliseconds.
 *
 * @param random - a number in [0, 1), `Math.random()` in production.
 */
export function defaultNakDelayMs(n: number | undefined, random: number): number {
  const attempt = n !== undefined && Number.isInteger(n) && n >= 1 ? n : 1;
  // 2^6 × 1 s already passes the cap; the exponent is bounded so the product stays finite.
  const grown = Math.min(DEFAULT_NAK_DELAY_MAX_MS, DEFAULT_NAK_DELAY_BASE_MS * 2 ** Math.min(attempt - 1, 16));
  const r = Number.isFinite(random) ? Math.min(Math.max(random, 0), 1) : 0;
  return Math.round(grown * (1 + DEFAULT_NAK_DELAY_JITTER * r));
}
