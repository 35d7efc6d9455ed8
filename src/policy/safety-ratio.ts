/**
 * The 80% rule, compared exactly: an interval must be strictly below `ACK_WAIT_SAFETY_RATIO` of
 * the window it has to beat (AckWait, the smallest BackOff step, or an `inactive_threshold`).
 */

/** Above this, both sides are scaled down before multiplying, so neither overflows. */
const HUGE = 2 ** 1000;

/**
 * `interval < 0.8 × window`, compared exactly (`5·interval < 4·window`): multiplying by 0.8
 * in floating point can round a boundary value up and let it through.
 */
export function belowSafetyRatio(intervalMs: number, windowMs: number): boolean {
  // Scaling by a power of two is exact, and keeps 4·window finite near Number.MAX_VALUE.
  if (windowMs > HUGE || intervalMs > HUGE) return intervalMs * 2 ** -8 * 5 < windowMs * 2 ** -8 * 4;
  return intervalMs * 5 < windowMs * 4;
}

/**
 * The largest whole interval below 80% of `windowMs` (0 when none is, or the window is not a
 * positive finite number). Terminates for every window: past 2^53 a step of 1 is lost to
 * rounding, so each step is at least `n·2^-50`, which rounding cannot swallow.
 */
export function largestSafeInterval(windowMs: number): number {
  if (!(windowMs > 0) || !Number.isFinite(windowMs)) return 0;
  let n = Math.floor(windowMs > HUGE ? (windowMs / 5) * 4 : (windowMs * 4) / 5);
  while (n > 0 && !belowSafetyRatio(n, windowMs)) n = Math.floor(n - Math.max(1, n * 2 ** -50));
  return Math.max(n, 0);
}
