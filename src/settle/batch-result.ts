/**
 * What a write may return, and what settling a batch reports: the result of every message
 * and of the batch. Types only.
 */
import type { JsMsg } from "@nats-io/jetstream";
import type { WorkContext } from "../lease/work-context.js";

/**
 * What to do with a message whose write failed temporarily (a {@link TemporarySinkError}, or
 * any error the host did not classify): NAK it with an optional delay (default), or leave it
 * and let AckWait and MaxDeliver decide.
 *
 * @example
 * ```ts
 * const retryIn30s: TemporaryFailureAction = { action: "nak", delayMs: 30_000 };
 * ```
 */
export type TemporaryFailureAction =
  | {
      /** Send `-NAK`, so the server redelivers after `delayMs` (at once without a delay). */
      readonly action: "nak";
      /** The wait before redelivery, in milliseconds. */
      readonly delayMs?: number;
    }
  | {
      /** Send nothing; the message is redelivered after its AckWait. */
      readonly action: "leave";
    };

/**
 * A write may report that some messages of the batch failed; the rest are acknowledged and
 * the failures settled by the class of their error.
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
export interface WriteReport {
  /** The messages that were not written, each with its error. */
  readonly failed: readonly FailedMessage[];
}

/**
 * One message a write could not commit.
 *
 * @example
 * ```ts
 * const f: FailedMessage = { msg, error: new TemporarySinkError("row locked") };
 * ```
 */
export interface FailedMessage {
  /** A message of the batch. */
  readonly msg: JsMsg;
  /** Why it failed; its class decides how it is settled. */
  readonly error: unknown;
}

/**
 * The host's write for one batch. Resolve only once the batch is durable; throw
 * {@link TemporarySinkError} or {@link PermanentSinkError} (or anything else, treated as
 * temporary) when it is not.
 *
 * @example
 * ```ts
 * const write: BatchWrite = async (msgs, ctx) => {
 *   await db.tx((t) => t.upsertMany(msgs.map(toRow)), { signal: ctx.signal });
 * };
 * ```
 */
export type BatchWrite = (msgs: readonly JsMsg[], ctx: WorkContext) => Promise<void | WriteReport> | void | WriteReport;

/**
 * What happened to one message.
 *
 * @example
 * ```ts
 * for (const r of result.messages) if (r.action === "left") console.warn("will be redelivered");
 * ```
 */
export interface MessageResult {
  /** The message. */
  readonly msg: JsMsg;
  /** The frame it got: `acked`, `nacked`, `termed`, `dead_lettered` (then acked), or `left` (nothing sent). */
  readonly action: "acked" | "nacked" | "termed" | "dead_lettered" | "left";
  /** The write's error for this message, when it failed. */
  readonly error?: unknown;
  /**
   * Set when settling failed or could not be confirmed (the message stays redeliverable unless
   * acked). An unconfirmed ACK is an error named `AckNotConfirmedError` (attempts and the kind of
   * the last failure, never the ack subject); a closed connection one named
   * `ClosedConnectionError`; a failed dead-letter publish is the JetStream client's error. An
   * `acked` message with a `DisconnectedError` here had its `+ACK` handed to a client that was
   * between connections: the client drops such frames, so expect a redelivery (`confirmAck`
   * retries after the reconnect instead).
   */
  readonly settleError?: unknown;
  /** With confirmed ACKs: whether the server confirmed. */
  readonly confirmed?: boolean;
  /** For NAKs: the wait asked for. */
  readonly requestedDelayMs?: number;
  /** For NAKs: the wait the server will really apply (differs under BackOff when it cannot be met). */
  readonly effectiveDelayMs?: number;
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
export type BatchOutcome = "acked" | "nacked" | "termed" | "dead_lettered" | "left" | "cancelled" | "partial" | "empty";

/**
 * What {@link CommitThenAck.process} did with a batch.
 *
 * @example
 * ```ts
 * const result = await ack.process(msgs, write);
 * if (result.outcome !== "acked") log.warn({ outcome: result.outcome, error: result.error });
 * ```
 */
export interface BatchResult {
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
  /** The write's error, when it failed (for partial results: the first failure's). */
  readonly error?: unknown;
  /** Heartbeat rounds sent while the write ran. */
  readonly heartbeats: number;
  /** Duration of the write in milliseconds. */
  readonly writeMs: number;
  /** Per-message detail, in batch order. */
  readonly messages: readonly MessageResult[];
}

