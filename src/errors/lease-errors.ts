/**
 * The errors of a lease: its end (lost, limit reached), the connection under it, and the
 * heartbeat thread.
 */
import { recognise } from "./error-kind.js";

/**
 * The abort reason of `ctx.signal` when a batch's lease ran out: the redelivery deadline of
 * at least one message passed without an accepted heartbeat (connection down, event loop
 * blocked, heartbeat limit reached, or no progress reported). JetStream may already have
 * handed the message to another worker, so committing now risks a duplicate.
 *
 * A beat that finds the messages' connection closed for good ends the lease at once, before
 * its deadline: no heartbeat and no ACK can reach the server any more, so a commit now would
 * only be redelivered and written again. Then `cause` is a {@link ConnectionClosedError} and
 * `overdueMs` is 0.
 *
 * @example
 * ```ts
 * await withInProgress(msgs, async (ctx) => {
 *   await sink.prepare(msgs);
 *   // Throw, never return: a write that resolves counts as committed and is acknowledged.
 *   if (ctx.signal.reason instanceof LeaseExpiredError) throw ctx.signal.reason; // skip a duplicate commit
 *   await sink.commit();
 * }, policy);
 * ```
 */
export class LeaseExpiredError extends Error {
  /** Always `"LeaseExpiredError"`. */
  override readonly name = "LeaseExpiredError";
  /** How far past the deadline the expiry was noticed, in milliseconds (0 when the connection closed first). */
  readonly overdueMs: number;

  /**
   * @param overdueMs - how far past the deadline the expiry was noticed.
   * @param options - standard error options (`cause`; a {@link ConnectionClosedError} when the
   *   lease ended because the connection closed).
   */
  constructor(overdueMs: number, options?: ErrorOptions) {
    super(
      options?.cause instanceof ConnectionClosedError
        ? "InProgress lease lost: the connection is closed, so no heartbeat or ACK can reach the server; JetStream redelivers the message after AckWait"
        : `InProgress lease expired ${Math.round(overdueMs)} ms ago: the message may already be redelivered to another worker`,
      options,
    );
    this.overdueMs = overdueMs;
  }
}

/**
 * The abort reason of `ctx.signal` when `maxHeartbeats` was reached and the host asked for
 * `onLimit: "abort"`.
 *
 * @example
 * ```ts
 * await withInProgress(msgs, work, policy, { onLimit: "abort" }).catch((err) => {
 *   if (err instanceof HeartbeatLimitError) console.warn("write outlived its heartbeat budget");
 * });
 * ```
 */
export class HeartbeatLimitError extends Error {
  /** Always `"HeartbeatLimitError"`. */
  override readonly name = "HeartbeatLimitError";
  /** The limit that was reached. */
  readonly maxHeartbeats: number;

  /**
   * @param maxHeartbeats - the limit that was reached.
   * @param options - standard error options (`cause`).
   */
  constructor(maxHeartbeats: number, options?: ErrorOptions) {
    super(`InProgress heartbeat limit of ${maxHeartbeats} reached before the work finished`, options);
    this.maxHeartbeats = maxHeartbeats;
  }
}

/**
 * The messages' connection is closed, so no frame could be sent: a heartbeat round failed for
 * good, or a message was left unsettled (`MessageResult.settleError`). JetStream redelivers it
 * after AckWait. The client's own `working()` and `ack()` raise nothing on a closed connection;
 * the library asks the connection instead.
 *
 * @example
 * ```ts
 * const result = await ack.process(msgs, write);
 * if (result.messages.some((r) => r.settleError instanceof ConnectionClosedError)) await reconnectAndRestart();
 * ```
 */
export class ConnectionClosedError extends Error {
  /** Always `"ConnectionClosedError"`. */
  override readonly name = "ConnectionClosedError";

  /** @param options - standard error options (`cause`). */
  constructor(options?: ErrorOptions) {
    super("closed connection: no frame can be sent", options);
  }
}

/**
 * The messages' connection is open but between connections: the client drops what is
 * published then, without an error. A heartbeat round counts such a beat as failed (the lease
 * is not extended); an ACK of a committed message is held until the reconnect, and carries this
 * error in `MessageResult.settleError` only when the lease, or the bound of a shutdown that
 * began meanwhile, ran out first (expect a redelivery). A held ACK whose connection closes is
 * reported `left` with a {@link ConnectionClosedError}.
 *
 * @example
 * ```ts
 * const unsent = result.messages.filter((r) => r.settleError instanceof DisconnectedError).length;
 * if (unsent > 0) log.warn(`${unsent} committed messages will be redelivered`);
 * ```
 */
export class DisconnectedError extends Error {
  /** Always `"DisconnectedError"`. */
  override readonly name = "DisconnectedError";

  /** @param options - standard error options (`cause`). */
  constructor(options?: ErrorOptions) {
    super("disconnected: frames published before the client reconnects are dropped", options);
  }
}

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

recognise(LeaseExpiredError, "LeaseExpiredError");
recognise(HeartbeatLimitError, "HeartbeatLimitError");
recognise(ConnectionClosedError, "ConnectionClosedError");
recognise(DisconnectedError, "DisconnectedError");
recognise(HeartbeatThreadError, "HeartbeatThreadError");
