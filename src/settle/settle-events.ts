/**
 * The diagnostics event of a settled batch.
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
