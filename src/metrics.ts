/**
 * The metric contract: stable, low-cardinality names, a tiny sink interface that adapters
 * implement, an in-memory sink for tests and debugging, and a never-throwing recorder the
 * library calls on its hot paths.
 */

/**
 * Every metric name the library emits. Names are stable; a host adds its own prefix in its
 * adapter. No label is ever built from subjects, payloads, headers, message ids, stream
 * sequences, credentials or error messages.
 *
 * @example
 * ```ts
 * const metrics = new InMemoryMetrics();
 * // ... run work with { metrics } ...
 * const beats = metrics.snapshot().counters[MetricNames.IN_PROGRESS_ATTEMPTS_TOTAL] ?? 0;
 * ```
 */
export const MetricNames = {
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
  /** Counter: batches whose lease ran out before the work finished. */
  IN_PROGRESS_LEASE_EXPIRED_TOTAL: "in_progress_lease_expired_total",
  /** Counter: beats withheld because the work reported no progress (`requireProgress`). */
  IN_PROGRESS_BEATS_SKIPPED_TOTAL: "in_progress_beats_skipped_total",
  /** Observation (seconds): how late a heartbeat tick fired against its schedule. */
  IN_PROGRESS_TICK_LATENESS_SECONDS: "in_progress_tick_lateness_seconds",
  /** Observation (count): heartbeats sent per supervised batch, recorded when it settles. */
  IN_PROGRESS_HEARTBEATS_PER_BATCH: "in_progress_heartbeats_per_batch",
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
  /** Counter: redeliveries observed between consumer-info samples. */
  CONSUMER_REDELIVERED_MESSAGES: "consumer_redelivered_messages",
  /** Gauge (0/1): messages in flight while the ack floor has not moved for longer than AckWait. */
  CONSUMER_STALLED: "consumer_stalled",
  /** Gauge (0/1): the pending count keeps rising across the watch window. */
  CONSUMER_BACKLOG_GROWING: "consumer_backlog_growing",
  /** Counter: consumer-info polls that failed. */
  CONSUMER_POLL_FAILURES_TOTAL: "consumer_poll_failures_total",
} as const;

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
 * Labels of a metric series. The library only sets labels with a fixed, small set of values
 * (and stream/consumer names only when the host asks for them).
 *
 * @example
 * ```ts
 * const labels: MetricLabels = { outcome: "acked" };
 * ```
 */
export type MetricLabels = Readonly<Record<string, string>>;

/**
 * Where the library sends its metrics. Implement it to bridge any metrics system; the
 * library never lets an exception from a sink reach the heartbeat, the work or the caller.
 *
 * @example
 * ```ts
 * const sink: MetricsSink = {
 *   addCounter: (name, value) => statsd.increment(name, value),
 *   setGauge: (name, value) => statsd.gauge(name, value),
 *   recordObservation: (name, value) => statsd.histogram(name, value),
 * };
 * ```
 */
export interface MetricsSink {
  /** Adds `value` (> 0) to a counter. */
  addCounter(name: MetricName, value: number, labels?: MetricLabels): void;
  /** Sets a gauge to `value`. */
  setGauge(name: MetricName, value: number, labels?: MetricLabels): void;
  /** Records one observation (durations in seconds). */
  recordObservation(name: MetricName, value: number, labels?: MetricLabels): void;
}

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
  /** Label names the library may set on this metric (only when the host asks for them). */
  readonly labelNames: readonly string[];
}

const CONSUMER_LABELS = Object.freeze(["stream", "consumer"]);

const DEFINITIONS: Record<MetricName, Omit<MetricDefinition, "name" | "labelNames"> & { labelNames?: readonly string[] }> = {
  in_progress_attempts_total: { kind: "counter", unit: "1", help: "InProgress heartbeats attempted while work was active (one per batch per beat)" },
  in_progress_successes_total: { kind: "counter", unit: "1", help: "InProgress heartbeats accepted (not sink success)" },
  in_progress_failures_total: { kind: "counter", unit: "1", help: "InProgress heartbeats that failed before the final decision" },
  in_progress_max_heartbeats_reached_total: { kind: "counter", unit: "1", help: "Batches that reached maxHeartbeats" },
  current_in_progress_batches_active: { kind: "gauge", unit: "1", help: "Batches currently under heartbeat supervision" },
  in_progress_heartbeat_seconds: { kind: "observation", unit: "s", help: "Time spent sending one heartbeat round" },
  in_progress_lease_expired_total: { kind: "counter", unit: "1", help: "Batches whose redelivery deadline passed without an accepted heartbeat" },
  in_progress_beats_skipped_total: { kind: "counter", unit: "1", help: "Heartbeats withheld because the work reported no progress" },
  in_progress_tick_lateness_seconds: { kind: "observation", unit: "s", help: "How late a heartbeat tick fired against its schedule" },
  in_progress_heartbeats_per_batch: { kind: "observation", unit: "1", help: "Heartbeats sent per supervised batch" },
  messages_acked_total: { kind: "counter", unit: "1", help: "Messages acknowledged after a durable write" },
  messages_nacked_total: { kind: "counter", unit: "1", help: "Messages negatively acknowledged for a later retry" },
  messages_termed_total: { kind: "counter", unit: "1", help: "Messages terminated without a dead-letter target" },
  messages_dead_lettered_total: { kind: "counter", unit: "1", help: "Messages published to the dead-letter subject, then acknowledged" },
  messages_failed_total: { kind: "counter", unit: "1", help: "Messages whose write failed" },
  messages_left_total: { kind: "counter", unit: "1", help: "Messages left for redelivery without an ack frame" },
  settle_failures_total: { kind: "counter", unit: "1", help: "Ack, nak, term or dead-letter operations that failed" },
  batch_write_seconds: { kind: "observation", unit: "s", help: "Duration of the host's write for one batch" },
  nak_delay_seconds: { kind: "observation", unit: "s", help: "Redelivery delay a NAK asks of the server" },
  fetch_failures_total: { kind: "counter", unit: "1", help: "Failed fetches in the run loop" },
  consumer_pending_messages: { kind: "gauge", unit: "1", help: "Messages the consumer has not delivered yet (lag)", labelNames: CONSUMER_LABELS },
  consumer_ack_pending_messages: { kind: "gauge", unit: "1", help: "Messages delivered and not yet acknowledged", labelNames: CONSUMER_LABELS },
  consumer_redelivered_messages: { kind: "counter", unit: "1", help: "Redeliveries observed between consumer-info samples", labelNames: CONSUMER_LABELS },
  consumer_stalled: { kind: "gauge", unit: "1", help: "1 while messages are in flight and the ack floor has not moved for longer than AckWait", labelNames: CONSUMER_LABELS },
  consumer_backlog_growing: { kind: "gauge", unit: "1", help: "1 while the pending count keeps rising across the watch window", labelNames: CONSUMER_LABELS },
  consumer_poll_failures_total: { kind: "counter", unit: "1", help: "Consumer-info polls that failed", labelNames: CONSUMER_LABELS },
};

/**
 * Every metric with its kind, unit and help text, in a stable order.
 *
 * @internal
 */
export const METRIC_DEFINITIONS: readonly MetricDefinition[] = Object.freeze(
  (Object.keys(DEFINITIONS) as MetricName[]).map((name) =>
    Object.freeze({ name, ...DEFINITIONS[name], labelNames: DEFINITIONS[name].labelNames ?? [] }),
  ),
);

/**
 * A point-in-time copy of what an {@link InMemoryMetrics} recorded.
 *
 * @example
 * ```ts
 * const snap: MetricsSnapshot = metrics.snapshot();
 * console.log(snap.counters.messages_acked_total);
 * ```
 */
export interface MetricsSnapshot {
  /** Counter totals by series key (`name`, or `name{label="value",…}`). */
  readonly counters: Record<string, number>;
  /** Last gauge values by series key. */
  readonly gauges: Record<string, number>;
  /** Every observation by series key, in recording order. */
  readonly observations: Record<string, number[]>;
}

/**
 * A {@link MetricsSink} that keeps everything in memory: for tests, debugging and small
 * services that print their own numbers.
 *
 * @example
 * ```ts
 * const metrics = new InMemoryMetrics();
 * await withInProgress(msgs, work, policy, { metrics });
 * console.log(metrics.snapshot().counters);
 * ```
 */
export class InMemoryMetrics implements MetricsSink {
  readonly #counters = new Map<string, number>();
  readonly #gauges = new Map<string, number>();
  readonly #observations = new Map<string, number[]>();

  /** {@inheritDoc MetricsSink.addCounter} */
  addCounter(name: MetricName, value: number, labels?: MetricLabels): void {
    const key = seriesKey(name, labels);
    this.#counters.set(key, (this.#counters.get(key) ?? 0) + value);
  }

  /** {@inheritDoc MetricsSink.setGauge} */
  setGauge(name: MetricName, value: number, labels?: MetricLabels): void {
    this.#gauges.set(seriesKey(name, labels), value);
  }

  /** {@inheritDoc MetricsSink.recordObservation} */
  recordObservation(name: MetricName, value: number, labels?: MetricLabels): void {
    const key = seriesKey(name, labels);
    const list = this.#observations.get(key);
    if (list) list.push(value);
    else this.#observations.set(key, [value]);
  }

  /**
   * Copies what was recorded so far.
   *
   * @returns counters, gauges and observations keyed by series.
   */
  snapshot(): MetricsSnapshot {
    return {
      counters: Object.fromEntries(this.#counters),
      gauges: Object.fromEntries(this.#gauges),
      observations: Object.fromEntries([...this.#observations].map(([k, v]) => [k, [...v]])),
    };
  }

  /** Forgets everything recorded. */
  reset(): void {
    this.#counters.clear();
    this.#gauges.clear();
    this.#observations.clear();
  }
}

/**
 * The series key of a metric: its name, or `name{a="1",b="2"}` with labels sorted by name.
 *
 * @internal
 */
export function seriesKey(name: string, labels?: MetricLabels): string {
  if (!labels) return name;
  const keys = Object.keys(labels).sort();
  if (keys.length === 0) return name;
  return `${name}{${keys.map((k) => `${k}=${JSON.stringify(labels[k])}`).join(",")}}`;
}

/**
 * The library's own handle on a sink: every call is guarded (a throwing or incomplete sink
 * is ignored), and up/down gauges are tracked here so concurrent batches sharing one sink
 * report one total.
 *
 * @internal
 */
export class MetricsRecorder {
  static readonly #bySink = new WeakMap<object, MetricsRecorder>();
  static readonly NONE = new MetricsRecorder(undefined);

  readonly #sink: MetricsSink | undefined;
  readonly #levels = new Map<string, number>();

  private constructor(sink: MetricsSink | undefined) {
    this.#sink = sink;
  }

  /** The recorder for `sink` (one per sink, so gauge levels are shared). */
  static for(sink: MetricsSink | undefined): MetricsRecorder {
    if (sink === undefined || sink === null || typeof sink !== "object") return MetricsRecorder.NONE;
    let r = MetricsRecorder.#bySink.get(sink);
    if (!r) {
      r = new MetricsRecorder(sink);
      MetricsRecorder.#bySink.set(sink, r);
    }
    return r;
  }

  get enabled(): boolean {
    return this.#sink !== undefined;
  }

  count(name: MetricName, value = 1, labels?: MetricLabels): void {
    if (this.#sink === undefined || !(value > 0)) return;
    call(this.#sink, "addCounter", name, value, labels);
  }

  observe(name: MetricName, value: number, labels?: MetricLabels): void {
    if (this.#sink === undefined || !Number.isFinite(value)) return;
    call(this.#sink, "recordObservation", name, value, labels);
  }

  gauge(name: MetricName, value: number, labels?: MetricLabels): void {
    if (this.#sink === undefined || !Number.isFinite(value)) return;
    call(this.#sink, "setGauge", name, value, labels);
  }

  /** Moves an up/down gauge by `delta` and reports its new level. */
  gaugeAdd(name: MetricName, delta: number): void {
    if (this.#sink === undefined) return;
    const level = (this.#levels.get(name) ?? 0) + delta;
    this.#levels.set(name, level);
    call(this.#sink, "setGauge", name, level, undefined);
  }
}

function call(
  sink: MetricsSink,
  method: keyof MetricsSink,
  name: MetricName,
  value: number,
  labels: MetricLabels | undefined,
): void {
  try {
    const fn = (sink as unknown as Record<string, unknown>)[method];
    if (typeof fn !== "function") return;
    const result: unknown = labels === undefined ? fn.call(sink, name, value) : fn.call(sink, name, value, labels);
    // An async sink must not leave an unhandled rejection behind.
    if (result !== null && typeof result === "object" && typeof (result as PromiseLike<unknown>).then === "function") {
      (result as Promise<unknown>).then(undefined, () => undefined);
    }
  } catch {
    // A metrics sink must never break the heartbeat, the work or the caller.
  }
}
