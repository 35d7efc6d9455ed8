/**
 * A sink outage must not spend deliveries. When the whole write fails temporarily (it threw:
 * the database is down), NAKing every message spends one delivery per retry — a 15 s outage
 * took messages to their last delivery. Instead the write is tried again in place, with a
 * growing delay, while the lease holds (heartbeats keep it) and the loop pulls nothing new;
 * only past the lease bound does the per-message rule (NAK with a delay, dead-letter on the last
 * delivery) apply. Pure: the caller passes the clock readings and the randomness.
 */

/** The first wait before a write is tried again in place. */
export const RETRY_IN_PLACE_BASE_MS = 250;
/** The longest wait between two tries. */
export const RETRY_IN_PLACE_MAX_MS = 2000;
/** Jitter only lengthens a wait, by up to this share, so workers of one sink do not retry in step. */
export const RETRY_IN_PLACE_JITTER = 0.2;

/** What decides whether a failed write is tried again in place. */
export interface RetryFacts {
  /** The write threw an error that is not permanent (a `PermanentSinkError` is never retried). */
  readonly temporary: boolean;
  /** `ctx.signal` aborted: a shutdown, a lost lease, the heartbeat limit — stop. */
  readonly aborted: boolean;
  /** Tries already made in place after the first (0 after the first failure). */
  readonly retries: number;
  /** Milliseconds since the write first started. */
  readonly elapsedMs: number;
  /** How long the batch may be held by retries, from the write's first start; `undefined`: not at all. */
  readonly budgetMs: number | undefined;
}

/**
 * The wait before the next try in place, or `undefined` when the failure goes to the settle
 * table: a permanent error, an aborted write, no budget, or a wait that would end past it.
 *
 * @param random - a number in [0, 1), `Math.random()` in production.
 */
export function retryInPlaceDelayMs(f: RetryFacts, random: number): number | undefined {
  if (!f.temporary || f.aborted || f.budgetMs === undefined) return undefined;
  const grown = Math.min(RETRY_IN_PLACE_MAX_MS, RETRY_IN_PLACE_BASE_MS * 2 ** Math.min(Math.max(0, f.retries), 16));
  const r = Number.isFinite(random) ? Math.min(Math.max(random, 0), 1) : 0;
  const wait = Math.round(grown * (1 + RETRY_IN_PLACE_JITTER * r));
  return f.elapsedMs + wait < f.budgetMs ? wait : undefined;
}

/**
 * How long a batch may be held by retries: with heartbeats, their whole budget less one
 * interval (so the per-message rule still runs while the lease holds); without, a quarter of
 * the redelivery window; nothing when neither is known.
 */
export function retryBudgetMs(heartbeats: { readonly intervalMs: number; readonly maxHeartbeats: number } | undefined, windowMs: number | undefined): number | undefined {
  if (heartbeats !== undefined) return Math.max(0, (heartbeats.maxHeartbeats - 1) * heartbeats.intervalMs);
  if (windowMs !== undefined && Number.isFinite(windowMs) && windowMs > 0) return windowMs / 4;
  return undefined;
}
