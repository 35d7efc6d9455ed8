/**
 * `node:diagnostics_channel` events for tracing and logging. One registry of names; a payload
 * is built and published only when someone subscribes. Payloads carry counts, durations and
 * error class names — never subjects, payloads, headers, message ids, stream sequences or
 * error messages. Each stage defines the payloads it publishes.
 */
import diagnostics from "node:diagnostics_channel";

/**
 * The channel names, stable across releases.
 *
 * @example
 * ```ts
 * import diagnostics from "node:diagnostics_channel";
 * diagnostics.subscribe(DiagnosticsChannels.LEASE_EXPIRED, (event) => {
 *   const e = event as LeaseExpiredEvent;
 *   console.warn(`batch ${e.batchId} lost its lease ${e.overdueMs} ms ago`);
 * });
 * ```
 */
export const DiagnosticsChannels = {
  /** A heartbeat round was sent ({@link HeartbeatSentEvent}). */
  HEARTBEAT_SENT: "jetstream-inprogress:heartbeat:sent",
  /** A heartbeat round failed ({@link HeartbeatFailedEvent}). */
  HEARTBEAT_FAILED: "jetstream-inprogress:heartbeat:failed",
  /** A batch reached `maxHeartbeats` ({@link HeartbeatLimitEvent}). */
  HEARTBEAT_LIMIT: "jetstream-inprogress:heartbeat:limit",
  /** A batch's lease expired ({@link LeaseExpiredEvent}). */
  LEASE_EXPIRED: "jetstream-inprogress:lease:expired",
  /** A batch was settled by `CommitThenAck` ({@link BatchSettledEvent}). */
  BATCH_SETTLED: "jetstream-inprogress:batch:settled",
  /** A message failed on its last allowed delivery and no dead-letter copy holds it ({@link MessageExhaustedEvent}). */
  MESSAGE_EXHAUSTED: "jetstream-inprogress:message:exhausted",
  /** The event loop was blocked while batches were under supervision ({@link EventLoopStallEvent}). */
  EVENT_LOOP_STALL: "jetstream-inprogress:event-loop:stall",
} as const;

/**
 * Fields every event has.
 *
 * @example
 * ```ts
 * const base: BatchEventBase = { batchId: 7, batchSize: 100 };
 * ```
 */
export interface BatchEventBase {
  /** A process-local number identifying the batch (not a message id). */
  readonly batchId: number;
  /** Messages in the batch. */
  readonly batchSize: number;
}

/**
 * One of the channel names.
 *
 * @internal
 */
export type DiagnosticsChannel = (typeof DiagnosticsChannels)[keyof typeof DiagnosticsChannels];

const channels = new Map<DiagnosticsChannel, diagnostics.Channel>(
  Object.values(DiagnosticsChannels).map((name) => [name, diagnostics.channel(name)]),
);

/**
 * Publishes an event if anyone listens; `build` runs only then. A throwing subscriber never
 * reaches the caller. Stages wrap it with their own payload types.
 *
 * @internal
 */
export function publishEvent(channel: DiagnosticsChannel, build: () => object): void {
  const ch = channels.get(channel);
  if (ch === undefined || !ch.hasSubscribers) return;
  try {
    ch.publish(Object.freeze(build()));
  } catch {
    // Diagnostics are best effort.
  }
}

/**
 * Whether a channel has a subscriber.
 *
 * @internal
 */
export function hasSubscribers(channel: DiagnosticsChannel): boolean {
  return channels.get(channel)?.hasSubscribers === true;
}

let lastBatchId = 0;

/**
 * A new process-local batch number.
 *
 * @internal
 */
export function nextBatchId(): number {
  lastBatchId = lastBatchId >= Number.MAX_SAFE_INTEGER ? 1 : lastBatchId + 1;
  return lastBatchId;
}
