/**
 * The intake's decisions, pure: how long a pull may stay open, how many messages it may ask
 * for, and which deliveries a batch keeps. No I/O and no clock, so they are tested like the
 * settle table; the pulls themselves are in `pull-source.ts` and `intake.ts`.
 *
 * The rules they encode:
 * - a pull is never cut short (the server may be delivering into it), so a partial batch starts
 *   when its pull ends by itself: the pull's expiry is what bounds a batch's wait;
 * - the loop never holds more than it can start: held messages plus what open pulls may still
 *   bring stay within the capacity.
 */

/** The shortest pull expiry the NATS client accepts (nats.js refuses less). */
export const MIN_PULL_EXPIRY_MS = 1000;

/** What bounds a pull's expiry, and why. */
export interface ExpiryBound {
  /** The longest a pull may stay open, in milliseconds. */
  readonly ms: number;
  /**
   * - `interval`: heartbeats are on; held messages are beaten from their arrival, and a partial
   *   batch waits at most one interval (or the client's minimum);
   * - `ack_wait`: heartbeats are off; a quarter of the shortest redelivery window (AckWait or
   *   the shortest BackOff step), or the client's minimum when that is longer;
   * - `unknown`: heartbeats are off and the window is unknown: the client's minimum.
   */
  readonly basis: "interval" | "ack_wait" | "unknown";
}

/** A partial batch waits at most this share of the redelivery window when nothing beats it. */
export const UNBEATEN_WAIT_SHARE = 0.25;

/**
 * The longest a pull may stay open: with heartbeats, the heartbeat interval; without, a quarter
 * of the shortest redelivery window; never below the client's minimum.
 */
export function expiryBound(heartbeatIntervalMs: number | undefined, windowMs: number | undefined): ExpiryBound {
  if (heartbeatIntervalMs !== undefined) return { ms: Math.max(MIN_PULL_EXPIRY_MS, heartbeatIntervalMs), basis: "interval" };
  if (windowMs !== undefined && Number.isFinite(windowMs) && windowMs > 0) {
    return { ms: Math.max(MIN_PULL_EXPIRY_MS, Math.floor(windowMs * UNBEATEN_WAIT_SHARE)), basis: "ack_wait" };
  }
  return { ms: MIN_PULL_EXPIRY_MS, basis: "unknown" };
}

/** The shortest redelivery window of a consumer: its AckWait, or its shortest BackOff step. */
export function shortestWindowMs(ackWaitMs: number | undefined, backOffMs: readonly number[] | undefined): number | undefined {
  let window = ackWaitMs !== undefined && Number.isFinite(ackWaitMs) && ackWaitMs > 0 ? ackWaitMs : undefined;
  for (const step of backOffMs ?? []) if (Number.isFinite(step) && step > 0 && (window === undefined || step < window)) window = step;
  return window;
}

/** The expiry a pull uses: the host's, clamped to the bound (never honoured by cutting a pull). */
export function pullExpiryMs(requestedMs: number, bound: ExpiryBound): { readonly ms: number; readonly clamped: boolean } {
  return requestedMs > bound.ms ? { ms: bound.ms, clamped: true } : { ms: requestedMs, clamped: false };
}

/** What the intake knows when it decides whether to pull. */
export interface IntakeState {
  /** The most messages the loop may hold at once (already capped by `max_ack_pending`). */
  readonly capacity: number;
  /** Messages held: arrived and not yet settled (waiting for their write, or being written). */
  readonly held: number;
  /** Messages open pulls may still bring. */
  readonly requested: number;
  /** Pulls open now. */
  readonly openPulls: number;
  /** Messages per pull. */
  readonly batchSize: number;
  /** Writes running now (`run`: batches). */
  readonly writing: number;
  /** Writes that may run at once. */
  readonly concurrency: number;
  /** The last pull came back full: messages are waiting on the server. */
  readonly backlog?: boolean;
}

/**
 * How many messages the next pull asks for; 0: no pull now.
 *
 * - `batch` (`run`): each pull a future batch, so pulls and writes together stay within
 *   `concurrency`; while messages trickle in, one pull at a time (two would split a trickle
 *   into smaller batches), and with a backlog (the last pull came back full) as many as there
 *   are free writes, as one hand-written fetch loop per write would;
 * - `each` (`runEach`): a pull for free handlers; while one is open, another goes out only once
 *   half a pull's worth of handlers is free (no one-message pulls under load, no idle handlers).
 *
 * Either way `held + requested` never exceeds `capacity`.
 */
export function pullSize(s: IntakeState, mode: "batch" | "each"): number {
  const free = s.capacity - s.held - s.requested;
  if (free <= 0) return 0;
  const size = Math.min(s.batchSize, free);
  if (mode === "batch") {
    if (s.openPulls + s.writing >= s.concurrency) return 0;
    return s.openPulls === 0 || s.backlog === true ? size : 0;
  }
  if (s.openPulls === 0) return size;
  return free >= Math.ceil(Math.min(s.batchSize, s.capacity) / 2) ? size : 0;
}

/** A delivery as far as deduplication cares. */
export interface DeliveryKey {
  readonly streamSequence: number | undefined;
  readonly deliveryCount: number | undefined;
}

/**
 * The positions a batch keeps: one delivery per stream sequence, the latest (a message the
 * server redelivered into the same pull appears twice; both frames would reach the same
 * message, and writing it twice is a duplicate). Deliveries without a readable sequence are
 * all kept. Order is preserved.
 */
export function keptPositions(keys: readonly DeliveryKey[]): number[] {
  const latest = new Map<number, number>();
  for (let i = 0; i < keys.length; i++) {
    const seq = keys[i]!.streamSequence;
    if (seq === undefined) continue;
    const j = latest.get(seq);
    if (j === undefined || (keys[i]!.deliveryCount ?? 0) >= (keys[j]!.deliveryCount ?? 0)) latest.set(seq, i);
  }
  const kept: number[] = [];
  for (let i = 0; i < keys.length; i++) {
    const seq = keys[i]!.streamSequence;
    if (seq === undefined || latest.get(seq) === i) kept.push(i);
  }
  return kept;
}
