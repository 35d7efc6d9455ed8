/**
 * The heartbeat thread's error. It lives beside the thread rather than in `errors.ts`, which
 * is at the file-size limit; it moves there when the option becomes public.
 */

/**
 * Why the heartbeat thread could not do what was asked (stable strings).
 *
 * - `not_flushed`: a stop-and-flush got no answer from the server within its bound (the
 *   thread's connection is down or slow): a `+WPI` it sent earlier may still reach the server
 *   after the next frame. Do not send a NAK with a delay now (a late `+WPI` would wipe it).
 * - `closed`: the thread is gone (released, its connection closed for good, or it failed to
 *   start); nothing is beaten by it any more.
 * - `not_ready`: the thread's connection did not come up within the bound asked for.
 *
 * @example
 * ```ts
 * const retryLater: HeartbeatThreadFailure[] = ["not_flushed", "not_ready"];
 * ```
 */
export type HeartbeatThreadFailure = "not_flushed" | "closed" | "not_ready";

/**
 * The heartbeat thread (the worker thread that sends `+WPI` for supervised batches while the
 * main thread may be blocked) could not confirm what was asked: `reason` says what.
 *
 * @example
 * ```ts
 * try {
 *   await lease.stopAndFlush();
 *   msg.nak(30_000);
 * } catch (err) {
 *   if (err instanceof HeartbeatThreadError) leaveForRedelivery(msg); // a late +WPI could wipe the delay
 * }
 * ```
 */
export class HeartbeatThreadError extends Error {
  /** Always `"HeartbeatThreadError"`. */
  override readonly name = "HeartbeatThreadError";
  /** What failed. */
  readonly reason: HeartbeatThreadFailure;

  /**
   * @param reason - what failed.
   * @param message - what happened, for a person (no subjects, no credentials).
   * @param options - standard error options (`cause`).
   */
  constructor(reason: HeartbeatThreadFailure, message: string, options?: ErrorOptions) {
    super(message, options);
    this.reason = reason;
  }
}
