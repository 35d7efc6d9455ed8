/**
 * The diagnostics events of settling: a batch settled, a message exhausted.
 */
import { DiagnosticsChannels, publishEvent, type BatchEventBase } from "../telemetry/diagnostics.js";
import type { BatchOutcome } from "./batch-result.js";

/**
 * Published on {@link DiagnosticsChannels.BATCH_SETTLED}.
 *
 * @example
 * ```ts
 * diagnostics.subscribe(DiagnosticsChannels.BATCH_SETTLED, (e) => {
 *   const s = e as BatchSettledEvent;
 *   if (s.outcome !== "acked") log.warn(s);
 * });
 * ```
 */
export interface BatchSettledEvent extends BatchEventBase {
  /** The batch outcome, as in `BatchResult.outcome` (an empty batch settles nothing and publishes no event). */
  readonly outcome: Exclude<BatchOutcome, "empty">;
  /** Messages acknowledged. */
  readonly acked: number;
  /** Messages negatively acknowledged. */
  readonly nacked: number;
  /** Messages terminated. */
  readonly termed: number;
  /** Messages dead-lettered (and then acknowledged). */
  readonly deadLettered: number;
  /** Messages left for redelivery without a frame. */
  readonly left: number;
  /** Messages exhausted on their last allowed delivery. */
  readonly exhausted: number;
  /** Messages whose write was still running at the shutdown bound (settled later, in an event of the same `batchId`). */
  readonly abandoned: number;
  /** Heartbeats sent while the write ran. */
  readonly heartbeats: number;
  /** Duration of the write. */
  readonly writeMs: number;
  /** The write error's class name, when it failed. */
  readonly errorName?: string;
}


/** Publishes the settled event of one batch when someone subscribes. */
export function publishBatchSettled(build: () => BatchSettledEvent): void {
  publishEvent(DiagnosticsChannels.BATCH_SETTLED, build);
}

/**
 * Published on {@link DiagnosticsChannels.MESSAGE_EXHAUSTED}: a message failed on its last
 * allowed delivery and no dead-letter copy holds it. The server will not deliver it again.
 *
 * @example
 * ```ts
 * diagnostics.subscribe(DiagnosticsChannels.MESSAGE_EXHAUSTED, (e) => {
 *   const x = e as MessageExhaustedEvent;
 *   log.error(`a message was exhausted after ${x.deliveryCount} deliveries (${x.reason})`);
 * });
 * ```
 */
export interface MessageExhaustedEvent extends BatchEventBase {
  /** Its delivery count, the last one the consumer allows. */
  readonly deliveryCount: number;
  /** The consumer's MaxDeliver. */
  readonly maxDeliver: number;
  /**
   * `no_dead_letter_target`: none is configured; `dead_letter_failed`: the copy was not
   * confirmed; `connection_closed`: the connection was closed before the message could be
   * settled, so neither a copy nor a frame could be sent.
   */
  readonly reason: "no_dead_letter_target" | "dead_letter_failed" | "connection_closed";
  /** The class name of the write's error (or of the dead-letter failure), never its message. */
  readonly errorName: string;
}

/** Publishes the exhausted event of one message when someone subscribes. */
export function publishMessageExhausted(build: () => MessageExhaustedEvent): void {
  publishEvent(DiagnosticsChannels.MESSAGE_EXHAUSTED, build);
}
