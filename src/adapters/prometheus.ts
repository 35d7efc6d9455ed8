/**
 * `jetstream-inprogress/prometheus`: a {@link MetricsSink} backed by `prom-client` (an
 * optional peer dependency; install it next to this package to use this entry point).
 *
 * @packageDocumentation
 */
import { Counter, Gauge, Histogram, register } from "prom-client";
import type { Registry, RegistryContentType } from "prom-client";
import { readAdapterOptions, readBuckets, readPrefix } from "./adapter-options.js";
import { DEFAULT_COUNT_BUCKETS, DEFAULT_SECONDS_BUCKETS } from "./metric-buckets.js";
import { METRIC_DEFINITIONS, type MetricDefinition, type MetricName } from "../telemetry/metric-names.js";
import type { MetricLabels, MetricsSink } from "../telemetry/metrics-sink.js";

export { DEFAULT_COUNT_BUCKETS, DEFAULT_SECONDS_BUCKETS } from "./metric-buckets.js";

/**
 * Options of {@link prometheusMetrics}. Every field is optional; an unknown field is a
 * `TypeError`, so a typo cannot silently change the metric names.
 *
 * @example
 * ```ts
 * const options: PrometheusMetricsOptions = { registry: new Registry(), prefix: "myapp_" };
 * const metrics = prometheusMetrics(options);
 * ```
 */
export interface PrometheusMetricsOptions {
  /** Where the metrics are registered. Default: prom-client's global `register`. */
  readonly registry?: Registry<RegistryContentType>;
  /**
   * Prepended to every stable name (`myapp_` gives `myapp_messages_acked_total`). Empty, or
   * a valid Prometheus metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`). Default: empty.
   */
  readonly prefix?: string;
  /**
   * Bucket upper bounds (seconds) for the duration histograms (`*_seconds`): finite, strictly
   * increasing. Default: {@link DEFAULT_SECONDS_BUCKETS}.
   */
  readonly buckets?: readonly number[];
  /**
   * Bucket upper bounds for the count-valued histogram `in_progress_heartbeats_per_batch`:
   * finite, strictly increasing. Default: {@link DEFAULT_COUNT_BUCKETS}.
   */
  readonly countBuckets?: readonly number[];
}

const FN = "prometheusMetrics";
const KNOWN_OPTIONS = ["registry", "prefix", "buckets", "countBuckets"] as const;
const PROMETHEUS_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;

type Entry =
  | { readonly kind: "counter"; readonly metric: Counter; readonly labelNames: readonly string[] }
  | { readonly kind: "gauge"; readonly metric: Gauge; readonly labelNames: readonly string[] }
  | { readonly kind: "observation"; readonly metric: Histogram; readonly labelNames: readonly string[] };

const PROM_TYPE = { counter: "counter", gauge: "gauge", observation: "histogram" } as const;

/**
 * Creates a {@link MetricsSink} that records into `prom-client` metrics: a `Counter` for each
 * counter, a `Gauge` for each gauge and a `Histogram` for each observation, named
 * `${prefix}${stableName}` (for example `myapp_in_progress_attempts_total`). Every metric of
 * the contract is registered up front with its help text and label names, so dashboards see
 * the full set (at zero) before the first message.
 *
 * Calling it again with the same registry and prefix reuses the metrics already registered
 * there (no "already registered" error), with the help text, label names and buckets they
 * were registered with; both sinks then feed the same series. Up/down gauges
 * (`current_in_progress_batches_active`) are moved with `Gauge.inc`/`dec` through
 * `addToGauge`, so batches supervised through either sink add up on the shared gauge. A metric of another type under
 * one of these names is refused with an `Error` naming it, before anything is registered.
 *
 * Recording never throws: unknown names, a name used with the wrong kind, non-finite values,
 * counter increments that are not positive and negative observations are ignored, and labels
 * the metric was not registered with are dropped.
 *
 * @param options - registry, name prefix and histogram buckets; see {@link PrometheusMetricsOptions}.
 * @returns a sink to pass as the `metrics` option of `withInProgress` or `CommitThenAck`.
 * @throws TypeError when an option is unknown or invalid (the message names the field, the value and the fix).
 * @throws Error when the registry already holds a metric of another type under one of the names.
 *
 * @example
 * ```ts
 * import { Registry } from "prom-client";
 * import { MetricNames } from "jetstream-inprogress";
 * import { prometheusMetrics } from "jetstream-inprogress/prometheus";
 *
 * const registry = new Registry();
 * const metrics = prometheusMetrics({ registry, prefix: "myapp_" });
 * metrics.addCounter(MetricNames.MESSAGES_ACKED_TOTAL, 10);
 * console.log(await registry.metrics()); // ... myapp_messages_acked_total 10
 * ```
 */
export function prometheusMetrics(options?: PrometheusMetricsOptions): MetricsSink {
  const opts = readAdapterOptions(FN, options, KNOWN_OPTIONS);
  const registry = readRegistry(opts["registry"]);
  const prefix = readPrefix(FN, opts["prefix"], PROMETHEUS_NAME, "it must match [a-zA-Z_:][a-zA-Z0-9_:]*", "myapp_");
  const secondsBuckets = readBuckets(FN, "buckets", opts["buckets"], DEFAULT_SECONDS_BUCKETS);
  const countBuckets = readBuckets(FN, "countBuckets", opts["countBuckets"], DEFAULT_COUNT_BUCKETS);

  // Check every name before registering anything, so a conflict leaves the registry as it was.
  for (const def of METRIC_DEFINITIONS) existingMetric(registry, def, `${prefix}${def.name}`);

  const entries = new Map<unknown, Entry>();
  for (const def of METRIC_DEFINITIONS) {
    const buckets = def.unit === "s" ? secondsBuckets : countBuckets;
    entries.set(def.name, obtain(registry, def, `${prefix}${def.name}`, buckets));
  }

  return Object.freeze({
    addCounter(name: MetricName, value: number, labels?: MetricLabels): void {
      try {
        const entry = entries.get(name);
        if (entry?.kind !== "counter" || !isFiniteNumber(value) || value <= 0) return;
        entry.metric.inc(pickLabels(labels, entry.labelNames), value);
      } catch {
        // A metrics sink never throws into the caller.
      }
    },
    setGauge(name: MetricName, value: number, labels?: MetricLabels): void {
      try {
        const entry = entries.get(name);
        if (entry?.kind !== "gauge" || !isFiniteNumber(value)) return;
        entry.metric.set(pickLabels(labels, entry.labelNames), value);
      } catch {
        // A metrics sink never throws into the caller.
      }
    },
    addToGauge(name: MetricName, delta: number, labels?: MetricLabels): void {
      try {
        const entry = entries.get(name);
        if (entry?.kind !== "gauge" || !isFiniteNumber(delta) || delta === 0) return;
        const picked = pickLabels(labels, entry.labelNames);
        if (delta > 0) entry.metric.inc(picked, delta);
        else entry.metric.dec(picked, -delta);
      } catch {
        // A metrics sink never throws into the caller.
      }
    },
    recordObservation(name: MetricName, value: number, labels?: MetricLabels): void {
      try {
        const entry = entries.get(name);
        if (entry?.kind !== "observation" || !isFiniteNumber(value) || value < 0) return;
        entry.metric.observe(pickLabels(labels, entry.labelNames), value);
      } catch {
        // A metrics sink never throws into the caller.
      }
    },
  });
}

function readRegistry(value: unknown): Registry<RegistryContentType> {
  if (value === undefined) return register;
  const r = value as Partial<Record<"getSingleMetric" | "registerMetric" | "metrics", unknown>> | null;
  if (r === null || typeof r !== "object" || typeof r.getSingleMetric !== "function" || typeof r.registerMetric !== "function" || typeof r.metrics !== "function") {
    throw new TypeError(`${FN}: registry must be a prom-client Registry; pass new Registry() from prom-client, or leave it out to use the global register`);
  }
  return value as Registry<RegistryContentType>;
}

/** The metric already registered under `fullName`, if it has the type this definition needs. */
function existingMetric(registry: Registry<RegistryContentType>, def: MetricDefinition, fullName: string): Entry["metric"] | undefined {
  const existing: unknown = registry.getSingleMetric(fullName);
  if (existing === undefined || existing === null) return undefined;
  const type = (existing as { type?: unknown }).type;
  if (type !== PROM_TYPE[def.kind]) {
    throw new Error(
      `${FN}: the registry already has a ${typeof type === "string" ? type : "metric"} named ${fullName}, ` +
        `but jetstream-inprogress records a ${PROM_TYPE[def.kind]} under that name; pass another prefix or another registry`,
    );
  }
  return existing as Entry["metric"];
}

function obtain(registry: Registry<RegistryContentType>, def: MetricDefinition, fullName: string, buckets: readonly number[]): Entry {
  const existing = existingMetric(registry, def, fullName);
  if (existing !== undefined) {
    const registered = (existing as { labelNames?: unknown }).labelNames;
    const labelNames = Array.isArray(registered) ? registered.filter((l): l is string => typeof l === "string") : [];
    return { kind: def.kind, metric: existing, labelNames } as Entry;
  }
  const config = { name: fullName, help: def.help, labelNames: [...def.labelNames], registers: [registry] };
  switch (def.kind) {
    case "counter":
      return { kind: "counter", metric: new Counter(config), labelNames: def.labelNames };
    case "gauge":
      return { kind: "gauge", metric: new Gauge(config), labelNames: def.labelNames };
    case "observation":
      return { kind: "observation", metric: new Histogram({ ...config, buckets: [...buckets] }), labelNames: def.labelNames };
  }
}

/** Keeps only the labels the metric was registered with (prom-client throws on others). */
function pickLabels(labels: MetricLabels | undefined, names: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  if (labels === undefined || labels === null || typeof labels !== "object" || names.length === 0) return out;
  for (const name of names) {
    const v: unknown = Object.hasOwn(labels, name) ? labels[name] : undefined;
    if (typeof v === "string") out[name] = v;
  }
  return out;
}

function isFiniteNumber(value: unknown): value is number {
  return typeof value === "number" && Number.isFinite(value);
}
