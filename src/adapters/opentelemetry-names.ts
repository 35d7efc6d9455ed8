// How the stable metric names map onto OpenTelemetry instrument names and units: dotted
// namespaces under `jetstream.`, no `_total` suffix, `.duration` with unit `s` for timings,
// `{annotation}` units for counts of things and `1` for 0/1 states.
import type { MetricName } from "../telemetry/metric-names.js";

/**
 * The OpenTelemetry instrument name for each stable metric name, as recorded by
 * `openTelemetryMetrics` (before its optional prefix). The instrument kind follows the
 * stable kind: counter → `Counter`, gauge → synchronous `Gauge` (the additive
 * `current_in_progress_batches_active` → `UpDownCounter`), observation → `Histogram`.
 *
 * @example
 * ```ts
 * import { MetricNames } from "jetstream-inprogress";
 * import { OpenTelemetryMetricNames } from "jetstream-inprogress/opentelemetry";
 *
 * OpenTelemetryMetricNames[MetricNames.IN_PROGRESS_ATTEMPTS_TOTAL]; // "jetstream.in_progress.attempts"
 * ```
 */
export const OpenTelemetryMetricNames = Object.freeze({
  /** Counter, unit `{heartbeat}`. */
  in_progress_attempts_total: "jetstream.in_progress.attempts",
  /** Counter, unit `{heartbeat}`. */
  in_progress_successes_total: "jetstream.in_progress.successes",
  /** Counter, unit `{heartbeat}`. */
  in_progress_failures_total: "jetstream.in_progress.failures",
  /** Counter, unit `{batch}`. */
  in_progress_max_heartbeats_reached_total: "jetstream.in_progress.max_heartbeats_reached",
  /** UpDownCounter, unit `{batch}`. */
  current_in_progress_batches_active: "jetstream.in_progress.active_batches",
  /** Histogram, unit `s`. */
  in_progress_heartbeat_seconds: "jetstream.in_progress.heartbeat.duration",
  /** Counter, unit `{batch}`. */
  in_progress_lease_expired_total: "jetstream.in_progress.leases_expired",
  /** Counter, unit `{heartbeat}`. */
  in_progress_beats_skipped_total: "jetstream.in_progress.beats_skipped",
  /** Histogram, unit `s`. */
  in_progress_tick_lateness_seconds: "jetstream.in_progress.tick.lateness",
  /** Histogram, unit `{heartbeat}`. */
  in_progress_heartbeats_per_batch: "jetstream.in_progress.heartbeats_per_batch",
  /** Counter, unit `{heartbeat}`. */
  in_progress_held_beats_total: "jetstream.in_progress.held_beats",
  /** Counter, unit `{stall}`. */
  in_progress_event_loop_stalls_total: "jetstream.in_progress.event_loop_stalls",
  /** Histogram, unit `s`. */
  in_progress_event_loop_stall_seconds: "jetstream.in_progress.event_loop_stall.duration",
  /** Counter, unit `{message}`. */
  messages_acked_total: "jetstream.messages.acked",
  /** Counter, unit `{message}`. */
  messages_nacked_total: "jetstream.messages.nacked",
  /** Counter, unit `{message}`. */
  messages_termed_total: "jetstream.messages.termed",
  /** Counter, unit `{message}`. */
  messages_dead_lettered_total: "jetstream.messages.dead_lettered",
  /** Counter, unit `{message}`. */
  messages_failed_total: "jetstream.messages.failed",
  /** Counter, unit `{message}`. */
  messages_left_total: "jetstream.messages.left",
  /** Counter, unit `{message}`. */
  messages_exhausted_total: "jetstream.messages.exhausted",
  /** Counter, unit `{message}`. */
  messages_abandoned_total: "jetstream.messages.abandoned",
  /** Counter, unit `{write}`. */
  write_retries_total: "jetstream.writes.retried",
  /** Counter, unit `{ack}`. */
  acks_held_total: "jetstream.acks.held",
  /** Counter, unit `{ack}`. */
  acks_unsent_total: "jetstream.acks.unsent",
  /** Counter, unit `{message}`. */
  redeliveries_of_committed_total: "jetstream.messages.redelivered_committed",
  /** Counter, unit `{operation}`. */
  settle_failures_total: "jetstream.settle.failures",
  /** Histogram, unit `s`. */
  batch_write_seconds: "jetstream.batch.write.duration",
  /** Histogram, unit `s`. */
  nak_delay_seconds: "jetstream.nak.delay",
  /** Counter, unit `{fetch}`. */
  fetch_failures_total: "jetstream.fetch.failures",
  /** Gauge, unit `{message}`. */
  consumer_pending_messages: "jetstream.consumer.pending_messages",
  /** Gauge, unit `{message}`. */
  consumer_ack_pending_messages: "jetstream.consumer.ack_pending_messages",
  /** Counter, unit `{message}`. */
  consumer_redelivered_messages_total: "jetstream.consumer.redelivered_messages",
  /** Gauge (0 or 1), unit `1`. */
  consumer_stalled: "jetstream.consumer.stalled",
  /** Gauge (0 or 1), unit `1`. */
  consumer_backlog_growing: "jetstream.consumer.backlog_growing",
  /** Gauge (0 or 1), unit `1`. */
  consumer_paused: "jetstream.consumer.paused",
  /** Counter, unit `{poll}`. */
  consumer_poll_failures_total: "jetstream.consumer.poll_failures",
} as const satisfies Record<MetricName, string>);

/**
 * The OpenTelemetry unit of each metric (UCUM: `s` for durations, `1` for 0/1 states,
 * `{annotation}` for counts of things).
 *
 * @internal
 */
export const OPEN_TELEMETRY_UNITS: Readonly<Record<MetricName, string>> = Object.freeze({
  in_progress_attempts_total: "{heartbeat}",
  in_progress_successes_total: "{heartbeat}",
  in_progress_failures_total: "{heartbeat}",
  in_progress_max_heartbeats_reached_total: "{batch}",
  current_in_progress_batches_active: "{batch}",
  in_progress_heartbeat_seconds: "s",
  in_progress_lease_expired_total: "{batch}",
  in_progress_beats_skipped_total: "{heartbeat}",
  in_progress_tick_lateness_seconds: "s",
  in_progress_heartbeats_per_batch: "{heartbeat}",
  in_progress_held_beats_total: "{heartbeat}",
  in_progress_event_loop_stalls_total: "{stall}",
  in_progress_event_loop_stall_seconds: "s",
  messages_acked_total: "{message}",
  messages_nacked_total: "{message}",
  messages_termed_total: "{message}",
  messages_dead_lettered_total: "{message}",
  messages_failed_total: "{message}",
  messages_left_total: "{message}",
  messages_exhausted_total: "{message}",
  messages_abandoned_total: "{message}",
  write_retries_total: "{write}",
  acks_held_total: "{ack}",
  acks_unsent_total: "{ack}",
  redeliveries_of_committed_total: "{message}",
  settle_failures_total: "{operation}",
  batch_write_seconds: "s",
  nak_delay_seconds: "s",
  fetch_failures_total: "{fetch}",
  consumer_pending_messages: "{message}",
  consumer_ack_pending_messages: "{message}",
  consumer_redelivered_messages_total: "{message}",
  consumer_stalled: "1",
  consumer_backlog_growing: "1",
  consumer_paused: "1",
  consumer_poll_failures_total: "{poll}",
});
