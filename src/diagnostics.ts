/**
 * `node:diagnostics_channel` events for tracing and logging. One registry of names; a payload
 * is built and published only when someone subscribes. Payloads carry counts, durations and
 * error class names — never subjects, payloads, headers, message ids, stream sequences or
 * error messages.
 */
import diagnostics from "node:diagnostics_channel";
import type { BatchOutcome } from "./commit-then-ack.js";

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
 * Published on {@link DiagnosticsChannels.HEARTBEAT_SENT}.
 *
 * @example
 * ```ts
 * diagnostics.subscribe(DiagnosticsChannels.HEARTBEAT_SENT, (e) => log.debug(e as HeartbeatSentEvent));
 * ```
 */
export interface HeartbeatSentEvent extends BatchEventBase {
  /** 1 for the first beat of the batch. */
  readonly beat: number;
  /** Time spent sending the round (for confirmed beats: until every reply arrived). */
  readonly durationMs: number;
  /** How late the tick fired against its schedule. */
  readonly latenessMs: number;
  /** Whether the server confirmed the beat (request/reply) rather than the client accepting it. */
  readonly confirmed: boolean;
}

/**
 * Published on {@link DiagnosticsChannels.HEARTBEAT_FAILED}.
 *
 * @example
 * ```ts
 * diagnostics.subscribe(DiagnosticsChannels.HEARTBEAT_FAILED, (e) => log.warn(e as HeartbeatFailedEvent));
 * ```
 */
export interface HeartbeatFailedEvent extends BatchEventBase {
  /** The beat that failed (1-based). */
  readonly beat: number;
  /** Messages of the batch the beat did not reach. */
  readonly failedMessages: number;
  /** The error's class name (`TimeoutError`, `ClosedConnectionError`, …), never its message. */
  readonly errorName: string;
  /** True when supervision ended because the connection is closed. */
  readonly final: boolean;
}

/**
 * Published on {@link DiagnosticsChannels.HEARTBEAT_LIMIT}.
 *
 * @example
 * ```ts
 * diagnostics.subscribe(DiagnosticsChannels.HEARTBEAT_LIMIT, (e) => log.warn(e as HeartbeatLimitEvent));
 * ```
 */
export interface HeartbeatLimitEvent extends BatchEventBase {
  /** The limit that was reached. */
  readonly maxHeartbeats: number;
  /** What happens next: the work goes on, or its signal is aborted. */
  readonly onLimit: "continue" | "abort";
}

/**
 * Published on {@link DiagnosticsChannels.LEASE_EXPIRED}.
 *
 * @example
 * ```ts
 * diagnostics.subscribe(DiagnosticsChannels.LEASE_EXPIRED, (e) => log.error(e as LeaseExpiredEvent));
 * ```
 */
export interface LeaseExpiredEvent extends BatchEventBase {
  /** How far past the deadline the expiry was noticed. */
  readonly overdueMs: number;
  /** Heartbeats sent before the lease ran out. */
  readonly beats: number;
}

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

const channels = {
  heartbeatSent: diagnostics.channel(DiagnosticsChannels.HEARTBEAT_SENT),
  heartbeatFailed: diagnostics.channel(DiagnosticsChannels.HEARTBEAT_FAILED),
  heartbeatLimit: diagnostics.channel(DiagnosticsChannels.HEARTBEAT_LIMIT),
  leaseExpired: diagnostics.channel(DiagnosticsChannels.LEASE_EXPIRED),
  batchSettled: diagnostics.channel(DiagnosticsChannels.BATCH_SETTLED),
} as const;

type EventOf = {
  heartbeatSent: HeartbeatSentEvent;
  heartbeatFailed: HeartbeatFailedEvent;
  heartbeatLimit: HeartbeatLimitEvent;
  leaseExpired: LeaseExpiredEvent;
  batchSettled: BatchSettledEvent;
};

/**
 * Publishes an event if anyone listens; `build` runs only then. A throwing subscriber never
 * reaches the caller.
 *
 * @internal
 */
export function publishEvent<K extends keyof EventOf>(kind: K, build: () => EventOf[K]): void {
  const ch = channels[kind];
  if (!ch.hasSubscribers) return;
  try {
    ch.publish(Object.freeze(build()));
  } catch {
    // Diagnostics are best effort.
  }
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

/**
 * An error's class name for events and metrics — never its message, which may carry
 * subjects or payload fragments.
 *
 * @internal
 */
export function errorName(err: unknown): string {
  if (err instanceof Error) return /^[A-Za-z0-9_$.]{1,64}$/.test(err.name) ? err.name : "Error";
  return err === null ? "null" : typeof err;
}
