/**
 * A sink that keeps everything in memory, for tests, debugging and small services.
 */
import type { MetricName } from "./metric-names.js";
import { seriesKey, type MetricLabels, type MetricsSink } from "./metrics-sink.js";

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

  /** {@inheritDoc MetricsSink.addToGauge} */
  addToGauge(name: MetricName, delta: number, labels?: MetricLabels): void {
    const key = seriesKey(name, labels);
    this.#gauges.set(key, (this.#gauges.get(key) ?? 0) + delta);
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

