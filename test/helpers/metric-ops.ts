/**
 * Random sequences of sink calls for comparing an adapter with InMemoryMetrics: the same
 * sequence goes into both, and the totals each one reports must agree.
 */
import fc from "fast-check";
import { InMemoryMetrics, type MetricLabels, type MetricName, type MetricsSink, type MetricsSnapshot } from "../../src/index.js";
import { METRIC_DEFINITIONS } from "../../src/telemetry/metric-names.js";
import { seriesKey } from "../../src/telemetry/metrics-sink.js";

/** One call on a sink. */
export interface MetricOp {
  readonly method: "addCounter" | "setGauge" | "recordObservation";
  readonly name: MetricName;
  readonly value: number;
  readonly labels?: MetricLabels;
}

const METHOD = { counter: "addCounter", gauge: "setGauge", observation: "recordObservation" } as const;

/** Calls `sink` with every op, in order. */
export function replay(sink: MetricsSink, ops: readonly MetricOp[]): void {
  for (const op of ops) {
    if (op.labels === undefined) sink[op.method](op.name, op.value);
    else sink[op.method](op.name, op.value, op.labels);
  }
}

/** What InMemoryMetrics made of `ops`. */
export function inMemory(ops: readonly MetricOp[]): MetricsSnapshot {
  const m = new InMemoryMetrics();
  replay(m, ops);
  return m.snapshot();
}

/** Totals by series key that every adapter can report: counter sums, last gauge values, observation count and sum. */
export interface Totals {
  counters: Record<string, number>;
  gauges: Record<string, number>;
  observations: Record<string, { count: number; sum: number }>;
}

/** Reduces an InMemoryMetrics snapshot to {@link Totals}. */
export function totalsOf(snapshot: MetricsSnapshot): Totals {
  return {
    counters: { ...snapshot.counters },
    gauges: { ...snapshot.gauges },
    observations: Object.fromEntries(
      Object.entries(snapshot.observations).map(([k, v]) => [k, { count: v.length, sum: v.reduce((a, b) => a + b, 0) }]),
    ),
  };
}

/**
 * Compares totals: counters and gauges exactly (a series never touched counts as 0, as a
 * registry shows it), observation counts exactly and sums to 9 significant digits.
 */
export function sameTotals(actual: Totals, expected: Totals): string | undefined {
  const keys = (a: object, b: object) => [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
  for (const k of keys(actual.counters, expected.counters)) {
    if ((actual.counters[k] ?? 0) !== (expected.counters[k] ?? 0)) return `counter ${k}: ${actual.counters[k]} != ${expected.counters[k]}`;
  }
  for (const k of keys(actual.gauges, expected.gauges)) {
    if ((actual.gauges[k] ?? 0) !== (expected.gauges[k] ?? 0)) return `gauge ${k}: ${actual.gauges[k]} != ${expected.gauges[k]}`;
  }
  for (const k of keys(actual.observations, expected.observations)) {
    const a = actual.observations[k];
    const e = expected.observations[k];
    if (a?.count !== e?.count) return `observation count ${k}: ${a?.count} != ${e?.count}`;
    const as = a?.sum ?? 0;
    const es = e?.sum ?? 0;
    if (Math.abs(as - es) > 1e-9 * Math.max(1, Math.abs(es))) return `observation sum ${k}: ${as} != ${es}`;
  }
  return undefined;
}

const labelsArb = (labelNames: readonly string[]): fc.Arbitrary<MetricLabels | undefined> =>
  labelNames.length === 0
    ? fc.constant(undefined)
    : fc.option(
        fc.record({ stream: fc.constantFrom("ORDERS", "EVENTS"), consumer: fc.constantFrom("worker", "audit") }),
        { nil: undefined },
      );

/** A valid call for any metric of the contract (labels only where the contract has them). */
export const metricOpArb: fc.Arbitrary<MetricOp> = fc.constantFrom(...METRIC_DEFINITIONS).chain((def) => {
  const value =
    def.kind === "counter"
      ? fc.integer({ min: 1, max: 1000 })
      : def.kind === "gauge"
        ? fc.integer({ min: -5, max: 10_000 })
        : def.unit === "s"
          ? fc.double({ min: 0, max: 120, noNaN: true })
          : fc.integer({ min: 0, max: 200 });
  return fc.record({ value, labels: labelsArb(def.labelNames) }).map(({ value, labels }): MetricOp =>
    labels === undefined ? { method: METHOD[def.kind], name: def.name, value } : { method: METHOD[def.kind], name: def.name, value, labels },
  );
});

/** A series key for a stable name and the labels an adapter reported back. */
export const keyOf = (name: string, labels: Record<string, unknown>): string =>
  seriesKey(name, Object.fromEntries(Object.entries(labels).map(([k, v]) => [k, String(v)])));

/** Calls that a sink must ignore without throwing. */
export const garbageOps: ReadonlyArray<readonly [keyof MetricsSink, unknown, unknown, unknown?]> = [
  ["addCounter", "no_such_metric_total", 1],
  ["addCounter", "__proto__", 1],
  ["addCounter", "constructor", 1],
  ["addCounter", "toString", 1],
  ["addCounter", undefined, 1],
  ["addCounter", 42, 1],
  ["addCounter", "messages_acked_total", Number.NaN],
  ["addCounter", "messages_acked_total", Number.POSITIVE_INFINITY],
  ["addCounter", "messages_acked_total", -1],
  ["addCounter", "messages_acked_total", 0],
  ["addCounter", "messages_acked_total", "5"],
  ["addCounter", "current_in_progress_batches_active", 1],
  ["addCounter", "batch_write_seconds", 1],
  ["setGauge", "no_such_gauge", 1],
  ["setGauge", "current_in_progress_batches_active", Number.NaN],
  ["setGauge", "current_in_progress_batches_active", Number.NEGATIVE_INFINITY],
  ["setGauge", "current_in_progress_batches_active", null],
  ["setGauge", "messages_acked_total", 3],
  ["recordObservation", "no_such_histogram_seconds", 1],
  ["recordObservation", "batch_write_seconds", Number.NaN],
  ["recordObservation", "batch_write_seconds", -0.5],
  ["recordObservation", "batch_write_seconds", Number.POSITIVE_INFINITY],
  ["recordObservation", "messages_acked_total", 1],
  ["recordObservation", "consumer_stalled", 1],
];
