/**
 * The diagnostics events of heartbeat supervision: a round sent or failed, the limit reached,
 * a lease lost.
 */
import { DiagnosticsChannels, hasSubscribers, publishEvent, type BatchEventBase } from "../telemetry/diagnostics.js";

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
  /** The error's class name (`TimeoutError`, `ConnectionClosedError`, …), never its message. */
  readonly errorName: string;
  /**
   * True when supervision ended because the connection is closed, or (beats from the heartbeat
   * thread) when the server did not confirm the thread's beats before the final frame.
   */
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
  /** How far past the deadline the expiry was noticed (0 when the connection closed first). */
  readonly overdueMs: number;
  /** Heartbeats sent before the lease ran out. */
  readonly beats: number;
}

interface LeaseEventOf {
  heartbeatSent: HeartbeatSentEvent;
  heartbeatFailed: HeartbeatFailedEvent;
  heartbeatLimit: HeartbeatLimitEvent;
  leaseExpired: LeaseExpiredEvent;
}

const LEASE_CHANNELS = {
  heartbeatSent: DiagnosticsChannels.HEARTBEAT_SENT,
  heartbeatFailed: DiagnosticsChannels.HEARTBEAT_FAILED,
  heartbeatLimit: DiagnosticsChannels.HEARTBEAT_LIMIT,
  leaseExpired: DiagnosticsChannels.LEASE_EXPIRED,
} as const;

/** Publishes one supervision event when someone subscribes. */
export function publishLeaseEvent<K extends keyof LeaseEventOf>(kind: K, build: () => LeaseEventOf[K]): void {
  publishEvent(LEASE_CHANNELS[kind], build);
}

/** Whether anyone listens to a supervision event (spares building its payload's closure). */
export function wantsLeaseEvent(kind: keyof LeaseEventOf): boolean {
  return hasSubscribers(LEASE_CHANNELS[kind]);
}
