/**
 * What a write may return, and what settling a batch reports: the result of every message
 * and of the batch. Types only.
 */
import type { WorkContext } from "../lease/work-context.js";
import type { JsMsgLike } from "../nats/client-types.js";

/**
 * What to do with a message whose write failed temporarily (a {@link TemporarySinkError}, or
 * any error the host did not classify) while it has deliveries left: NAK it (default), or
 * leave it and let AckWait decide. On the last allowed delivery neither applies: the message is
 * dead-lettered when a target exists, otherwise reported as exhausted.
 *
 * Before either, a write that threw a temporary error for the whole batch (the sink is down)
 * is tried again in place — the same messages, the same deliveries — with a growing delay
 * (250 ms doubling to 2 s), while the lease holds: up to `(maxHeartbeats − 1) × intervalMs`
 * with heartbeats (they go on meanwhile), a quarter of the consumer's AckWait without, not at
 * all when neither is known. Meanwhile the loops pull nothing new. Only when it still fails
 * does the rule above apply, so an outage the lease can bridge spends no delivery.
 * `retryInPlace: false` settles at once. A report's per-message failures are never retried in
 * place: they are NAKed (or left) as they are.
 *
 * Without `delayMs` the NAK delay grows with the delivery count: 1 s after the first delivery,
 * doubling each time up to 60 s, lengthened by up to 20% of jitter (never shortened), and
 * corrected for the consumer's BackOff in BackOff-aware mode. `delayMs: 0` is the explicit way
 * to ask for a bare NAK (immediate redelivery: a failing sink then retries as fast as it fails).
 *
 * @example
 * ```ts
 * const growing: TemporaryFailureAction = { action: "nak" }; // 1 s, 2 s, 4 s, … 60 s
 * const retryIn30s: TemporaryFailureAction = { action: "nak", delayMs: 30_000 };
 * ```
 */
export type TemporaryFailureAction =
  | {
      /** Send `-NAK`, so the server redelivers after the delay. */
      readonly action: "nak";
      /** A fixed wait before redelivery, integer 0 ..= 86,400,000 ms; default: growing with the delivery count. */
      readonly delayMs?: number;
      /** Try a write that threw again in place first (default `true`); see {@link TemporaryFailureAction}. */
      readonly retryInPlace?: boolean;
    }
  | {
      /** Send nothing; the message is redelivered after its AckWait. */
      readonly action: "leave";
      /** Try a write that threw again in place first (default `true`); see {@link TemporaryFailureAction}. */
      readonly retryInPlace?: boolean;
    };

/**
 * A write may report that some messages of the batch failed; the rest are acknowledged and
 * the failures settled by the class of their error. A `failed` that is not exactly this shape
 * (not an array, entries without `msg`, messages of another batch) fails closed: every message
 * of the batch is settled as a temporary failure and `BatchResult.reportError` says why.
 *
 * @example
 * ```ts
 * await ack.process(msgs, async (batch) => {
 *   const failed = [];
 *   for (const m of batch) {
 *     try { await db.insert(m.json()); } catch (error) { failed.push({ msg: m, error }); }
 *   }
 *   return { failed };
 * });
 * ```
 */
export interface WriteReport<M extends JsMsgLike = JsMsgLike> {
  /** The messages that were not written, each with its error. */
  readonly failed: readonly FailedMessage<M>[];
}

/**
 * One message a write could not commit.
 *
 * @example
 * ```ts
 * const f: FailedMessage = { msg, error: new TemporarySinkError("row locked") };
 * ```
 */
export interface FailedMessage<M extends JsMsgLike = JsMsgLike> {
  /** A message of the batch. */
  readonly msg: M;
  /** Why it failed; its class decides how it is settled. */
  readonly error: unknown;
}

/**
 * The host's write for one batch. Resolve only once the batch is durable; throw
 * {@link TemporarySinkError} or {@link PermanentSinkError} (or anything else, treated as
 * temporary) when it is not. Resolve with a {@link WriteReport} to say that some messages
 * failed; any other value without a `failed` key (nothing, a driver's result, a count) means
 * the whole batch committed. A value with a `failed` key is always read as a report, so a
 * driver result that has one must not be returned as it is.
 *
 * @example
 * ```ts
 * const write: BatchWrite = async (msgs, ctx) => {
 *   return await db.tx((t) => t.upsertMany(msgs.map(toRow)), { signal: ctx.signal }); // any result: committed
 * };
 * ```
 */
// Declared through a method, so a function whose parameter names the client's own JsMsg fits.
export type BatchWrite<M extends JsMsgLike = JsMsgLike> = {
  /** Writes `msgs`; resolves once they are durable. */
  write(msgs: readonly M[], ctx: WorkContext): unknown;
}["write"];

/**
 * What happened to one message.
 *
 * @example
 * ```ts
 * for (const r of result.messages) if (r.action === "left") console.warn("will be redelivered");
 * ```
 */
export interface MessageResult<M extends JsMsgLike = JsMsgLike> {
  /** The message. */
  readonly msg: M;
  /**
   * The frame it got: `acked`, `nacked`, `termed`, `dead_lettered` (then acked), `left`
   * (nothing sent; it will be redelivered), `exhausted` (nothing sent on its last allowed
   * delivery and no dead-letter copy: the server will not deliver it again), or `abandoned`
   * (its write was still running at the shutdown bound: its outcome is unknown, so nothing is
   * sent while it runs; the instance settles it when it ends — see `CommitThenAck.drain`).
   */
  readonly action: "acked" | "nacked" | "termed" | "dead_lettered" | "left" | "exhausted" | "abandoned";
  /** The write's error for this message, when it failed. */
  readonly error?: unknown;
  /**
   * Set when settling failed or could not be confirmed (the message stays redeliverable unless
   * acked). An unconfirmed ACK is an error named `AckNotConfirmedError` (attempts and the kind of
   * the last failure, never the ack subject); a closed connection a `ConnectionClosedError`; a
   * dead-letter copy that was not confirmed a `DeadLetterError`. A `left` message with a
   * `DisconnectedError` here committed, but its `+ACK` could not reach the server: the client
   * was still between connections when a shutdown's bound passed, so expect a redelivery.
   */
  readonly settleError?: unknown;
  /** With confirmed ACKs: whether the server confirmed. */
  readonly confirmed?: boolean;
  /** For NAKs: the wait asked for. */
  readonly requestedDelayMs?: number;
  /** For NAKs: the wait the server will really apply (differs under BackOff when it cannot be met). */
  readonly effectiveDelayMs?: number;
  /** Set when the batch's lease ran out while the write ran (an `acked` message committed late: another worker may have written it too). */
  readonly leaseLost?: true;
}

/**
 * The batch outcome: the action every message got, `partial` when they differ, `cancelled`
 * when an abort left the batch for redelivery, `empty` for an empty batch.
 *
 * @example
 * ```ts
 * const ok: BatchOutcome[] = ["acked"];
 * ```
 */
export type BatchOutcome = "acked" | "nacked" | "termed" | "dead_lettered" | "left" | "exhausted" | "abandoned" | "cancelled" | "partial" | "empty";

/**
 * What {@link CommitThenAck.process} did with a batch.
 *
 * @example
 * ```ts
 * const result = await ack.process(msgs, write);
 * if (result.outcome !== "acked") log.warn({ outcome: result.outcome, error: result.error });
 * ```
 */
export interface BatchResult<M extends JsMsgLike = JsMsgLike> {
  /** The batch outcome. */
  readonly outcome: BatchOutcome;
  /** Messages acknowledged (after a durable write). */
  readonly acked: number;
  /** Messages negatively acknowledged. */
  readonly nacked: number;
  /** Messages terminated. */
  readonly termed: number;
  /** Messages dead-lettered and then acknowledged. */
  readonly deadLettered: number;
  /** Messages left for redelivery (no frame sent). */
  readonly left: number;
  /** Messages that failed on their last allowed delivery with no dead-letter copy (see `MessageResult.action`). */
  readonly exhausted: number;
  /** Messages whose write was still running at the shutdown bound (see `MessageResult.action`). */
  readonly abandoned: number;
  /** The batch's lease ran out while the write ran. */
  readonly leaseLost: boolean;
  /**
   * Set when the write resolved with a `failed` key the library could not read in full (not an
   * array, an entry that is not `{ msg, error }`, a message outside the batch): the report
   * fails closed — every message of the batch is settled as a temporary failure — and this
   * says what was wrong. Hosts should log it; it is a bug in the write.
   */
  readonly reportError?: TypeError;
  /** The write's error, when it failed (for partial results: the first failure's). */
  readonly error?: unknown;
  /** Heartbeat rounds sent while the write ran. */
  readonly heartbeats: number;
  /** Duration of the write in milliseconds. */
  readonly writeMs: number;
  /** Per-message detail, in batch order. */
  readonly messages: readonly MessageResult<M>[];
}

