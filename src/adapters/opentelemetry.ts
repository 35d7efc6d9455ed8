/**
 * `jetstream-inprogress/opentelemetry`: a {@link MetricsSink} backed by the OpenTelemetry
 * metrics API and a `Tracing` hook backed by its tracing API (`@opentelemetry/api`, an
 * optional peer dependency). Like any instrumented library it depends on the API only; the
 * host application chooses and starts the SDK.
 *
 * @packageDocumentation
 */
import { ValueType, metrics } from "@opentelemetry/api";
import type { Attributes, Gauge, Meter, MetricOptions, UpDownCounter } from "@opentelemetry/api";
import { version } from "../../package.json";
import { readAdapterOptions, readPrefix } from "./adapter-options.js";
import { DEFAULT_COUNT_BUCKETS, DEFAULT_SECONDS_BUCKETS } from "./metric-buckets.js";
import { METRIC_DEFINITIONS, type MetricDefinition, type MetricName } from "../telemetry/metric-names.js";
import { seriesKey, type MetricLabels, type MetricsSink } from "../telemetry/metrics-sink.js";
import { OPEN_TELEMETRY_UNITS, OpenTelemetryMetricNames } from "./opentelemetry-names.js";

export { OpenTelemetryMetricNames } from "./opentelemetry-names.js";
export { openTelemetryTracing } from "./opentelemetry-tracing.js";
export type { OpenTelemetryTracingOptions } from "./opentelemetry-tracing.js";

/**
 * Options of {@link openTelemetryMetrics}. Every field is optional; an unknown field is a
 * `TypeError`, so a typo cannot silently change the instrument names.
 *
 * @example
 * ```ts
 * const options: OpenTelemetryMetricsOptions = { meter: provider.getMeter("jetstream-inprogress") };
 * const metrics = openTelemetryMetrics(options);
 * ```
 */
export interface OpenTelemetryMetricsOptions {
  /**
   * The meter that creates the instruments. Default: `metrics.getMeter("jetstream-inprogress",
   * <package version>)` from the global meter provider, which must be registered (SDK
   * started) before this sink is created: the API hands out no-op meters until then.
   */
  readonly meter?: Meter;
  /**
   * Prepended to every instrument name (`myapp.` gives `myapp.jetstream.messages.acked`).
   * Empty, or a string that starts with a letter and contains only letters, digits, `_`,
   * `.`, `-` and `/`; the longest resulting name must stay within 255 characters.
   * Default: empty.
   */
  readonly prefix?: string;
}

const FN = "openTelemetryMetrics";
const KNOWN_OPTIONS = ["meter", "prefix"] as const;
const INSTRUMENT_PREFIX = /^[A-Za-z][A-Za-z0-9_.\-/]*$/;
const MAX_INSTRUMENT_NAME = 255;

interface Instrument {
  readonly kind: MetricDefinition["kind"];
  record(value: number, attributes: Attributes | undefined): void;
  /** Gauges only: moves the value by a delta. */
  add?(delta: number, attributes: Attributes | undefined): void;
}

/**
 * Creates a {@link MetricsSink} that records into OpenTelemetry instruments: a `Counter` for
 * each counter, an `UpDownCounter` for the additive gauge `current_in_progress_batches_active`
 * (every sink and every process adds its deltas through `addToGauge`, so two sinks on one
 * meter, or many pods, add up to the real total), a synchronous `Gauge` for the other gauges
 * (readings of one value, such as consumer info: a gauge keeps the last one per attribute
 * set) and a `Histogram` for each observation. Names
 * and units follow {@link OpenTelemetryMetricNames}; durations are in seconds (unit `s`) with
 * explicit bucket boundaries advised from a millisecond to a minute, which an SDK `View`
 * can override. Labels become attributes.
 *
 * Should the meter lack `createGauge` (an SDK older than API 1.9), each gauge falls back to an
 * `UpDownCounter` that adds the difference to the last value set for that attribute set.
 * `setGauge` on an `UpDownCounter` adds the difference to what this sink contributed so far,
 * so other sinks' contributions stay in the sum.
 *
 * Recording never throws: unknown names, a name used with the wrong kind, non-finite values,
 * counter increments that are not positive and negative observations are ignored.
 *
 * @param options - meter and name prefix; see {@link OpenTelemetryMetricsOptions}.
 * @returns a sink to pass as the `metrics` option of `withInProgress` or `CommitThenAck`.
 * @throws TypeError when an option is unknown or invalid (the message names the field, the value and the fix).
 *
 * @example
 * ```ts
 * import { MeterProvider } from "@opentelemetry/sdk-metrics";
 * import { MetricNames } from "jetstream-inprogress";
 * import { openTelemetryMetrics } from "jetstream-inprogress/opentelemetry";
 *
 * const provider = new MeterProvider({ readers: [reader] });
 * const metrics = openTelemetryMetrics({ meter: provider.getMeter("jetstream-inprogress") });
 * metrics.addCounter(MetricNames.MESSAGES_ACKED_TOTAL, 10); // jetstream.messages.acked += 10
 * ```
 */
export function openTelemetryMetrics(options?: OpenTelemetryMetricsOptions): MetricsSink {
  const opts = readAdapterOptions(FN, options, KNOWN_OPTIONS);
  const meter = readMeter(opts["meter"]);
  const prefix = readPrefix(
    FN,
    opts["prefix"],
    INSTRUMENT_PREFIX,
    "it must start with a letter and contain only letters, digits, _ . - /",
    "myapp.",
  );
  const longest = Math.max(...Object.values(OpenTelemetryMetricNames).map((n) => n.length));
  if (prefix.length + longest > MAX_INSTRUMENT_NAME) {
    throw new TypeError(
      `${FN}: prefix is ${prefix.length} characters long, so the longest instrument name would have ` +
        `${prefix.length + longest}, above the limit of ${MAX_INSTRUMENT_NAME}; use a prefix of at most ${MAX_INSTRUMENT_NAME - longest} characters`,
    );
  }

  const instruments = new Map<unknown, Instrument>();
  for (const def of METRIC_DEFINITIONS) instruments.set(def.name, createInstrument(meter, def, prefix));

  const record = (kind: MetricDefinition["kind"], name: MetricName, value: number, labels: MetricLabels | undefined): void => {
    try {
      const instrument = instruments.get(name);
      if (instrument?.kind !== kind || typeof value !== "number" || !Number.isFinite(value)) return;
      if (kind === "counter" && value <= 0) return;
      if (kind === "observation" && value < 0) return;
      instrument.record(value, toAttributes(labels));
    } catch {
      // A metrics sink never throws into the caller.
    }
  };

  return Object.freeze({
    addCounter(name: MetricName, value: number, labels?: MetricLabels): void {
      record("counter", name, value, labels);
    },
    setGauge(name: MetricName, value: number, labels?: MetricLabels): void {
      record("gauge", name, value, labels);
    },
    addToGauge(name: MetricName, delta: number, labels?: MetricLabels): void {
      try {
        const instrument = instruments.get(name);
        if (instrument?.kind !== "gauge" || typeof delta !== "number" || !Number.isFinite(delta) || delta === 0) return;
        instrument.add?.(delta, toAttributes(labels));
      } catch {
        // A metrics sink never throws into the caller.
      }
    },
    recordObservation(name: MetricName, value: number, labels?: MetricLabels): void {
      record("observation", name, value, labels);
    },
  });
}

function readMeter(value: unknown): Meter {
  if (value === undefined) return metrics.getMeter("jetstream-inprogress", version);
  const m = value as Partial<Record<keyof Meter, unknown>> | null;
  if (
    m === null ||
    typeof m !== "object" ||
    typeof m.createCounter !== "function" ||
    typeof m.createHistogram !== "function" ||
    (typeof m.createGauge !== "function" && typeof m.createUpDownCounter !== "function")
  ) {
    throw new TypeError(
      `${FN}: meter must be an OpenTelemetry Meter; pass meterProvider.getMeter("jetstream-inprogress"), or leave it out to use the global meter provider`,
    );
  }
  return value as Meter;
}

function createInstrument(meter: Meter, def: MetricDefinition, prefix: string): Instrument {
  const name = `${prefix}${OpenTelemetryMetricNames[def.name]}`;
  const options: MetricOptions = {
    description: def.help,
    unit: OPEN_TELEMETRY_UNITS[def.name],
    valueType: def.unit === "s" ? ValueType.DOUBLE : ValueType.INT,
  };
  switch (def.kind) {
    case "counter": {
      const counter = meter.createCounter(name, options);
      return { kind: "counter", record: (v, a) => counter.add(v, a) };
    }
    case "observation": {
      const boundaries = def.unit === "s" ? DEFAULT_SECONDS_BUCKETS : DEFAULT_COUNT_BUCKETS;
      const histogram = meter.createHistogram(name, { ...options, advice: { explicitBucketBoundaries: [...boundaries] } });
      return { kind: "observation", record: (v, a) => histogram.record(v, a) };
    }
    case "gauge": {
      // An additive gauge (batches under supervision) is a sum of contributions: an
      // UpDownCounter adds every sink's and every process's deltas, as OpenTelemetry means it
      // for "active requests"-like values. A reading of one value (consumer info) is a Gauge:
      // the last value is the truth, and summing two watches of one consumer would be wrong.
      if (def.additive && typeof meter.createUpDownCounter === "function") return upDown(meter.createUpDownCounter(name, options), name);
      if (typeof meter.createGauge === "function") return lastValue(meter.createGauge(name, options), name);
      // An SDK without createGauge: an UpDownCounter given the difference to the last value set.
      return upDown(meter.createUpDownCounter(name, options), name);
    }
  }
}

/** The series key of one attribute set of an instrument. */
const keyFor = (name: string, a: Attributes | undefined): string => seriesKey(name, a as MetricLabels | undefined);

/**
 * A gauge on an UpDownCounter: `add` passes the delta on; `record` (a level set by this sink)
 * adds the difference to what this sink contributed so far, so the instrument's sum moves by
 * exactly this sink's change and other sinks' contributions stay.
 */
function upDown(counter: UpDownCounter, name: string): Instrument {
  const level = new Map<string, number>();
  const move = (delta: number, a: Attributes | undefined, key: string): void => {
    if (delta !== 0) counter.add(delta, a);
    level.set(key, (level.get(key) ?? 0) + delta);
  };
  return {
    kind: "gauge",
    record: (v, a) => {
      const key = keyFor(name, a);
      move(v - (level.get(key) ?? 0), a, key);
    },
    add: (d, a) => move(d, a, keyFor(name, a)),
  };
}

/** A synchronous Gauge; `add` moves the level this sink last recorded (process-local). */
function lastValue(gauge: Gauge, name: string): Instrument {
  const level = new Map<string, number>();
  const set = (v: number, a: Attributes | undefined): void => {
    level.set(keyFor(name, a), v);
    gauge.record(v, a);
  };
  return {
    kind: "gauge",
    record: set,
    add: (d, a) => set((level.get(keyFor(name, a)) ?? 0) + d, a),
  };
}

/** Copies string-valued labels into attributes (nothing else can become an attribute). */
function toAttributes(labels: MetricLabels | undefined): Attributes | undefined {
  if (labels === undefined || labels === null || typeof labels !== "object") return undefined;
  let out: Attributes | undefined;
  for (const key of Object.keys(labels)) {
    const v: unknown = labels[key];
    if (typeof v !== "string") continue;
    (out ??= {})[key] = v;
  }
  return out;
}
