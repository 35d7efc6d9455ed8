/**
 * What `forConsumer` learnt about the durable consumer it bound to: its timing, its limits and
 * the state an operator may have put it in (paused, priority groups).
 */
import type { ConsumerInfo } from "@nats-io/jetstream";
import type { ConsumerTiming } from "../policy/in-progress-policy.js";

/**
 * The durable consumer a {@link CommitThenAck} was bound to by `forConsumer`, as its consumer
 * info read at setup. Durations are milliseconds; times are epoch milliseconds.
 *
 * @example
 * ```ts
 * const ack = await CommitThenAck.forConsumer(jsm, "ORDERS", "writer", { inProgress: { enabled: true } });
 * if (ack.consumer?.paused) console.warn(`ORDERS/writer is paused until ${new Date(ack.consumer.pauseUntil ?? 0).toISOString()}`);
 * ```
 */
export interface ConsumerBinding {
  /** The stream's name. */
  readonly stream: string;
  /** The durable consumer's name. */
  readonly consumer: string;
  /** The consumer's AckWait (with BackOff the server uses `BackOff[0]` instead). */
  readonly ackWaitMs: number | undefined;
  /** The consumer's BackOff steps; empty without BackOff. */
  readonly backOffMs: readonly number[];
  /** The consumer's MaxDeliver; `undefined` when unlimited. */
  readonly maxDeliver: number | undefined;
  /** The consumer's `max_ack_pending`; `undefined` when unlimited or not reported. */
  readonly maxAckPending: number | undefined;
  /**
   * Whether an operator paused the consumer (nats-server 2.11+): the server delivers nothing
   * until it resumes, but the instance works as soon as it does. Wait; do not restart.
   */
  readonly paused: boolean;
  /** When a pause ends, when the server says so. */
  readonly pauseUntil: number | undefined;
  /** The consumer's priority policy (nats-server 2.11+: `overflow`, `pinned_client`), when set. */
  readonly priorityPolicy: string | undefined;
  /** The consumer's priority groups; a pull must name one of them when there are any. */
  readonly priorityGroups: readonly string[];
}

/** Reads the binding from a consumer info whose timing was already checked. */
export function readBinding(stream: string, consumer: string, info: ConsumerInfo, timing: ConsumerTiming): ConsumerBinding {
  const raw = info as unknown as { config?: Record<string, unknown>; paused?: unknown; pause_remaining?: unknown };
  const config = raw.config ?? {};
  const paused = raw.paused === true;
  const remainingNs = raw.pause_remaining;
  const pauseUntilConfig = typeof config["pause_until"] === "string" ? Date.parse(config["pause_until"]) : Number.NaN;
  let pauseUntil: number | undefined;
  if (paused && typeof remainingNs === "number" && remainingNs > 0) pauseUntil = Date.now() + Math.round(remainingNs / 1e6);
  else if (paused && Number.isFinite(pauseUntilConfig)) pauseUntil = pauseUntilConfig;
  const groups = Array.isArray(config["priority_groups"]) ? (config["priority_groups"] as unknown[]).filter((g): g is string => typeof g === "string") : [];
  const policy = typeof config["priority_policy"] === "string" && config["priority_policy"] !== "" && config["priority_policy"] !== "none" ? config["priority_policy"] : undefined;
  const maxAckPending = typeof config["max_ack_pending"] === "number" && config["max_ack_pending"] > 0 ? config["max_ack_pending"] : undefined;
  return Object.freeze({
    stream,
    consumer,
    ackWaitMs: timing.ackWaitMs,
    backOffMs: Object.freeze([...(timing.backOffMs ?? [])]),
    maxDeliver: timing.maxDeliver !== undefined && timing.maxDeliver > 0 ? timing.maxDeliver : undefined,
    maxAckPending,
    paused,
    pauseUntil,
    priorityPolicy: policy,
    priorityGroups: Object.freeze(groups),
  });
}
