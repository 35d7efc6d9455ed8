/**
 * The sink interface adapters implement, and the series key that names one labelled series.
 */
import type { MetricName } from "./metric-names.js";

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
 * Up/down gauges (`current_in_progress_batches_active`) are moved with `addToGauge` when the
 * sink has it: every library instance and every sink object that writes into the same
 * backend instrument (one Prometheus registry, one OpenTelemetry meter) then adds to one
 * total. A sink without it gets `setGauge` with the level this process-local sink object has
 * seen, which is right only while one sink object feeds that instrument.
 *
 * @example
 * ```ts
 * const sink: MetricsSink = {
 *   addCounter: (name, value) => statsd.increment(name, value),
 *   setGauge: (name, value) => statsd.gauge(name, value),
 *   addToGauge: (name, delta) => statsd.gaugeDelta(name, delta),
 *   recordObservation: (name, value) => statsd.histogram(name, value),
 * };
 * ```
 */
export interface MetricsSink {
  /** Adds `value` (> 0) to a counter. */
  addCounter(name: MetricName, value: number, labels?: MetricLabels): void;
  /** Sets a gauge to `value`. */
  setGauge(name: MetricName, value: number, labels?: MetricLabels): void;
  /**
   * Optional: moves a gauge by `delta` (positive or negative, never 0) on the shared
   * instrument, without reading or setting its level. Implement it when several sink objects
   * or processes may feed one instrument, so their contributions add up instead of the last
   * writer winning.
   */
  addToGauge?(name: MetricName, delta: number, labels?: MetricLabels): void;
  /** Records one observation (durations in seconds). */
  recordObservation(name: MetricName, value: number, labels?: MetricLabels): void;
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

