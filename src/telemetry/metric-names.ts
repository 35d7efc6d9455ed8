/**
 * The metric contract: stable, low-cardinality names, and the kind, unit and help text of
 * each, for adapters that register metrics up front.
 */

/** The names, as written; {@link MetricNames} adds the deprecated alias. */
const METRIC_NAMES = {
  /** Counter: heartbeats attempted while work was active (one per batch per beat). */
  IN_PROGRESS_ATTEMPTS_TOTAL: "in_progress_attempts_total",
  /** Counter: heartbeats accepted (handed to the client, or confirmed by the server) — not sink success. */
  IN_PROGRESS_SUCCESSES_TOTAL: "in_progress_successes_total",
  /** Counter: heartbeats that failed before the final decision. */
  IN_PROGRESS_FAILURES_TOTAL: "in_progress_failures_total",
  /** Counter: batches that hit `maxHeartbeats`. */
  IN_PROGRESS_MAX_HEARTBEATS_REACHED_TOTAL: "in_progress_max_heartbeats_reached_total",
  /** Gauge: batches currently under heartbeat supervision. */
  CURRENT_IN_PROGRESS_BATCHES_ACTIVE: "current_in_progress_batches_active",
  /** Observation (seconds): time spent sending one heartbeat round. */
  IN_PROGRESS_HEARTBEAT_SECONDS: "in_progress_heartbeat_seconds",
  /** Counter: batches whose lease ran out (or whose connection closed) before the work finished. */
  IN_PROGRESS_LEASE_EXPIRED_TOTAL: "in_progress_lease_expired_total",
  /** Counter: beats withheld because the work reported no progress (`requireProgress`). */
  IN_PROGRESS_BEATS_SKIPPED_TOTAL: "in_progress_beats_skipped_total",
  /** Observation (seconds): how late a heartbeat tick fired against its schedule. */
  IN_PROGRESS_TICK_LATENESS_SECONDS: "in_progress_tick_lateness_seconds",
  /** Observation (count): heartbeats sent per supervised batch, recorded when it settles. */
  IN_PROGRESS_HEARTBEATS_PER_BATCH: "in_progress_heartbeats_per_batch",
  /** Counter: `+WPI` frames sent for messages a loop holds before their write starts (one per message). */
  IN_PROGRESS_HELD_BEATS_TOTAL: "in_progress_held_beats_total",
  /** Counter: event-loop stalls that held back a heartbeat task by more than a quarter of the shortest redelivery window in flight. */
  IN_PROGRESS_EVENT_LOOP_STALLS_TOTAL: "in_progress_event_loop_stalls_total",
  /** Observation (seconds): how late the held-back task ran (each stall lasted at least this long). */
  IN_PROGRESS_EVENT_LOOP_STALL_SECONDS: "in_progress_event_loop_stall_seconds",
  /** Counter: messages acknowledged after a durable write. */
  MESSAGES_ACKED_TOTAL: "messages_acked_total",
  /** Counter: messages negatively acknowledged for a later retry. */
  MESSAGES_NACKED_TOTAL: "messages_nacked_total",
  /** Counter: messages terminated (no dead-letter target). */
  MESSAGES_TERMED_TOTAL: "messages_termed_total",
  /** Counter: messages published to the dead-letter subject and then acknowledged. */
  MESSAGES_DEAD_LETTERED_TOTAL: "messages_dead_lettered_total",
  /** Counter: messages whose write failed (any class). */
  MESSAGES_FAILED_TOTAL: "messages_failed_total",
  /** Counter: messages left for redelivery without a frame (leave policy, cancellation, failed settle). */
  MESSAGES_LEFT_TOTAL: "messages_left_total",
  /** Counter: messages that failed on their last allowed delivery with no dead-letter copy: the server will not deliver them again. */
  MESSAGES_EXHAUSTED_TOTAL: "messages_exhausted_total",
  /** Counter: writes tried again in place after the whole batch failed temporarily (the sink was down), instead of NAKing it. */
  WRITE_RETRIES_TOTAL: "write_retries_total",
  /** Counter: messages whose write was still running at the shutdown bound (settled when it ends). */
  MESSAGES_ABANDONED_TOTAL: "messages_abandoned_total",
  /** Counter: ACKs held while the client was between connections and sent after the reconnect. */
  ACKS_HELD_TOTAL: "acks_held_total",
  /** Counter: ACKs of committed messages that could not be sent: held past their lease while the client was between connections, or refused by the connection (expect a redelivery). */
  ACKS_UNSENT_TOTAL: "acks_unsent_total",
  /** Counter: deliveries of a message a loop had committed, arriving while its ACK was on its way (an election, a reconnect) or delivered again within a minute of its confirmed ACK (a leader lost before replicating it, or one that lost the deliveries): acked, not written again. */
  REDELIVERIES_OF_COMMITTED_TOTAL: "redeliveries_of_committed_total",
  /** Counter: ack, nak, term or dead-letter operations that failed. */
  SETTLE_FAILURES_TOTAL: "settle_failures_total",
  /** Observation (seconds): duration of the host's write for one batch. */
  BATCH_WRITE_SECONDS: "batch_write_seconds",
  /** Observation (seconds): the redelivery delay a NAK really asks of the server. */
  NAK_DELAY_SECONDS: "nak_delay_seconds",
  /** Counter: failed fetches in the `run` loop (retried with backoff). */
  FETCH_FAILURES_TOTAL: "fetch_failures_total",
  /** Gauge: messages in the stream the consumer has not delivered yet (the lag). */
  CONSUMER_PENDING_MESSAGES: "consumer_pending_messages",
  /** Gauge: messages delivered and not yet acknowledged (in flight). */
  CONSUMER_ACK_PENDING_MESSAGES: "consumer_ack_pending_messages",
  /** Counter: redeliveries observed between consumer-info samples (formerly `consumer_redelivered_messages`). */
  CONSUMER_REDELIVERED_MESSAGES_TOTAL: "consumer_redelivered_messages_total",
  /** Gauge (0/1): messages in flight, the ack floor flat, and evidence that a worker stopped (a redelivery that did not move it, or a floor flat past the declared lease). */
  CONSUMER_STALLED: "consumer_stalled",
  /** Gauge (0/1): the pending count keeps rising across the watch window. */
  CONSUMER_BACKLOG_GROWING: "consumer_backlog_growing",
  /** Gauge (0/1): the consumer is paused (nats-server 2.11 and later) and delivers nothing until the pause ends. */
  CONSUMER_PAUSED: "consumer_paused",
  /** Counter: consumer-info polls that failed. */
  CONSUMER_POLL_FAILURES_TOTAL: "consumer_poll_failures_total",
} as const;

/**
 * Every metric name the library emits. Names are stable; a host adds its own prefix in its
 * adapter. No label is ever built from subjects, payloads, headers, message ids, stream
 * sequences, credentials or error messages.
 *
 * `CONSUMER_REDELIVERED_MESSAGES` is a deprecated, non-enumerable alias of
 * `CONSUMER_REDELIVERED_MESSAGES_TOTAL` (the metric was renamed to carry the counter suffix):
 * code that used the key keeps compiling and records under the new name.
 *
 * @example
 * ```ts
 * const metrics = new InMemoryMetrics();
 * // ... run work with { metrics } ...
 * const beats = metrics.snapshot().counters[MetricNames.IN_PROGRESS_ATTEMPTS_TOTAL] ?? 0;
 * ```
 */
export const MetricNames = Object.freeze(
  Object.defineProperty(
    {
      ...METRIC_NAMES,
      // Types only: the alias is defined below as a non-enumerable property.
      ...({} as {
        /** @deprecated Use `CONSUMER_REDELIVERED_MESSAGES_TOTAL`; the metric is now named `consumer_redelivered_messages_total`. */
        readonly CONSUMER_REDELIVERED_MESSAGES: typeof METRIC_NAMES.CONSUMER_REDELIVERED_MESSAGES_TOTAL;
      }),
    },
    "CONSUMER_REDELIVERED_MESSAGES",
    { value: METRIC_NAMES.CONSUMER_REDELIVERED_MESSAGES_TOTAL, enumerable: false },
  ),
);

/**
 * One of the stable metric names.
 *
 * @example
 * ```ts
 * const name: MetricName = MetricNames.MESSAGES_ACKED_TOTAL;
 * ```
 */
export type MetricName = (typeof MetricNames)[keyof typeof MetricNames];

/**
 * The kind, unit and meaning of each metric, for adapters that register metrics up front.
 *
 * @internal
 */
export interface MetricDefinition {
  readonly name: MetricName;
  readonly kind: "counter" | "gauge" | "observation";
  readonly unit: "1" | "s";
  readonly help: string;
  /**
   * Gauges only: `true` when the value is a sum of contributions that each process moves up
   * and down (batches under supervision), so sinks sharing one backend must add deltas
   * (`MetricsSink.addToGauge`) rather than set a level; `false` for readings of one value
   * (consumer info), where the last value set is the truth.
   */
  readonly additive: boolean;
  /** Label names the library may set on this metric (only when the host asks for them). */
  readonly labelNames: readonly string[];
}

const CONSUMER_LABELS = Object.freeze(["stream", "consumer"]);

const DEFINITIONS: Record<MetricName, Omit<MetricDefinition, "name" | "labelNames" | "additive"> & { labelNames?: readonly string[]; additive?: true }> = {
  in_progress_attempts_total: { kind: "counter", unit: "1", help: "InProgress heartbeats attempted while work was active (one per batch per beat)" },
  in_progress_successes_total: { kind: "counter", unit: "1", help: "InProgress heartbeats accepted (not sink success)" },
  in_progress_failures_total: { kind: "counter", unit: "1", help: "InProgress heartbeats that failed before the final decision" },
  in_progress_max_heartbeats_reached_total: { kind: "counter", unit: "1", help: "Batches that reached maxHeartbeats" },
  current_in_progress_batches_active: { kind: "gauge", unit: "1", help: "Batches currently under heartbeat supervision", additive: true },
  in_progress_heartbeat_seconds: { kind: "observation", unit: "s", help: "Time spent sending one heartbeat round" },
  in_progress_lease_expired_total: { kind: "counter", unit: "1", help: "Batches whose lease was lost: the redelivery deadline passed without an accepted heartbeat, or the connection closed under the write" },
  in_progress_beats_skipped_total: { kind: "counter", unit: "1", help: "Heartbeats withheld because the work reported no progress" },
  in_progress_tick_lateness_seconds: { kind: "observation", unit: "s", help: "How late a heartbeat tick fired against its schedule" },
  in_progress_heartbeats_per_batch: { kind: "observation", unit: "1", help: "Heartbeats sent per supervised batch" },
  in_progress_held_beats_total: { kind: "counter", unit: "1", help: "InProgress frames sent for messages a loop holds before their write starts" },
  in_progress_event_loop_stalls_total: { kind: "counter", unit: "1", help: "Event-loop stalls that held back a heartbeat task by more than a quarter of the shortest redelivery window" },
  in_progress_event_loop_stall_seconds: { kind: "observation", unit: "s", help: "How late a heartbeat task ran after an event-loop stall" },
  messages_acked_total: { kind: "counter", unit: "1", help: "Messages acknowledged after a durable write" },
  messages_nacked_total: { kind: "counter", unit: "1", help: "Messages negatively acknowledged for a later retry" },
  messages_termed_total: { kind: "counter", unit: "1", help: "Messages terminated without a dead-letter target" },
  messages_dead_lettered_total: { kind: "counter", unit: "1", help: "Messages published to the dead-letter subject, then acknowledged" },
  messages_failed_total: { kind: "counter", unit: "1", help: "Messages whose write failed" },
  messages_left_total: { kind: "counter", unit: "1", help: "Messages left for redelivery without an ack frame" },
  messages_exhausted_total: { kind: "counter", unit: "1", help: "Messages that failed on their last allowed delivery with no dead-letter copy" },
  write_retries_total: { kind: "counter", unit: "1", help: "Writes tried again in place after the whole batch failed temporarily" },
  messages_abandoned_total: { kind: "counter", unit: "1", help: "Messages whose write was still running at the shutdown bound" },
  acks_held_total: { kind: "counter", unit: "1", help: "ACKs held during a disconnect and sent after the reconnect" },
  acks_unsent_total: { kind: "counter", unit: "1", help: "ACKs of committed messages that could not be sent: held past their lease, or refused by the connection" },
  redeliveries_of_committed_total: { kind: "counter", unit: "1", help: "Deliveries of a message a loop had committed, arriving while its ACK was on its way or within a minute of its confirmed ACK: acked, not written again" },
  settle_failures_total: { kind: "counter", unit: "1", help: "Ack, nak, term or dead-letter operations that failed" },
  batch_write_seconds: { kind: "observation", unit: "s", help: "Duration of the host's write for one batch" },
  nak_delay_seconds: { kind: "observation", unit: "s", help: "Redelivery delay a NAK asks of the server" },
  fetch_failures_total: { kind: "counter", unit: "1", help: "Failed fetches in the run loop" },
  consumer_pending_messages: { kind: "gauge", unit: "1", help: "Messages the consumer has not delivered yet (lag)", labelNames: CONSUMER_LABELS },
  consumer_ack_pending_messages: { kind: "gauge", unit: "1", help: "Messages delivered and not yet acknowledged", labelNames: CONSUMER_LABELS },
  consumer_redelivered_messages_total: { kind: "counter", unit: "1", help: "Redeliveries observed between consumer-info samples", labelNames: CONSUMER_LABELS },
  consumer_stalled: { kind: "gauge", unit: "1", help: "1 while messages are in flight and a flat ack floor shows a stopped worker (a redelivery that did not move it, or flat past the declared lease)", labelNames: CONSUMER_LABELS },
  consumer_backlog_growing: { kind: "gauge", unit: "1", help: "1 while the pending count keeps rising across the watch window", labelNames: CONSUMER_LABELS },
  consumer_paused: { kind: "gauge", unit: "1", help: "1 while the consumer is paused (nats-server 2.11 and later)", labelNames: CONSUMER_LABELS },
  consumer_poll_failures_total: { kind: "counter", unit: "1", help: "Consumer-info polls that failed", labelNames: CONSUMER_LABELS },
};

/**
 * Every metric with its kind, unit and help text, in a stable order.
 *
 * @internal
 */
export const METRIC_DEFINITIONS: readonly MetricDefinition[] = Object.freeze(
  (Object.keys(DEFINITIONS) as MetricName[]).map((name) =>
    Object.freeze({ name, ...DEFINITIONS[name], additive: DEFINITIONS[name].additive === true, labelNames: DEFINITIONS[name].labelNames ?? [] }),
  ),
);

