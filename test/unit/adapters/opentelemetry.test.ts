import { readFileSync } from "node:fs";
import { join } from "node:path";
import { metrics as otelMetrics, type Meter } from "@opentelemetry/api";
import {
  DataPointType,
  MeterProvider,
  MetricReader,
  type Histogram as HistogramValue,
  type MetricData,
} from "@opentelemetry/sdk-metrics";
import fc from "fast-check";
import { afterEach, describe, expect, it } from "vitest";
import { MetricNames, type MetricName, type MetricsSink } from "../../../src/index.js";
import { METRIC_DEFINITIONS } from "../../../src/telemetry/metric-names.js";
import { DEFAULT_COUNT_BUCKETS, DEFAULT_SECONDS_BUCKETS } from "../../../src/adapters/metric-buckets.js";
import { OPEN_TELEMETRY_UNITS } from "../../../src/adapters/opentelemetry-names.js";
import { openTelemetryMetrics } from "../../../src/adapters/opentelemetry.js";
import { OpenTelemetryMetricNames } from "../../../src/adapters/opentelemetry-names.js";
import { garbageOps, inMemory, keyOf, metricOpArb, replay, sameTotals, totalsOf, type Totals } from "../../helpers/metric-ops.js";

const root = join(import.meta.dirname, "..", "..", "..");
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { version: string };

/** A pull reader: the test decides when to collect. */
class TestReader extends MetricReader {
  protected override async onShutdown(): Promise<void> {}
  protected override async onForceFlush(): Promise<void> {}
}

function setup(): { provider: MeterProvider; reader: TestReader; meter: Meter } {
  const reader = new TestReader();
  const provider = new MeterProvider({ readers: [reader] });
  return { provider, reader, meter: provider.getMeter("jetstream-inprogress", pkg.version) };
}

async function collect(reader: TestReader): Promise<Map<string, MetricData>> {
  const { resourceMetrics, errors } = await reader.collect();
  expect(errors).toEqual([]);
  const out = new Map<string, MetricData>();
  for (const scope of resourceMetrics.scopeMetrics) for (const m of scope.metrics) out.set(m.descriptor.name, m);
  return out;
}

const stableNameOf = new Map<string, MetricName>(
  Object.entries(OpenTelemetryMetricNames).map(([stable, otel]) => [otel, stable as MetricName]),
);

/** Reads collected data back into totals keyed by stable name. */
function totalsFrom(collected: Map<string, MetricData>, prefix = ""): Totals {
  const totals: Totals = { counters: {}, gauges: {}, observations: {} };
  for (const [otelName, m] of collected) {
    const stable = stableNameOf.get(otelName.slice(prefix.length));
    if (stable === undefined) throw new Error(`unexpected instrument ${otelName}`);
    for (const dp of m.dataPoints) {
      const key = keyOf(stable, dp.attributes);
      if (m.dataPointType === DataPointType.SUM && m.isMonotonic) totals.counters[key] = dp.value as number;
      else if (m.dataPointType === DataPointType.GAUGE || m.dataPointType === DataPointType.SUM) totals.gauges[key] = dp.value as number;
      else if (m.dataPointType === DataPointType.HISTOGRAM) {
        const h = dp.value as HistogramValue;
        totals.observations[key] = { count: h.count, sum: h.sum ?? 0 };
      }
    }
  }
  return totals;
}

describe("OpenTelemetryMetricNames", () => {
  const otelNames = Object.values(OpenTelemetryMetricNames);

  it("maps every stable name, and only those", () => {
    expect(Object.keys(OpenTelemetryMetricNames).sort()).toEqual(METRIC_DEFINITIONS.map((d) => d.name).sort());
    expect(Object.keys(OPEN_TELEMETRY_UNITS).sort()).toEqual(METRIC_DEFINITIONS.map((d) => d.name).sort());
    expect(Object.isFrozen(OpenTelemetryMetricNames)).toBe(true);
  });

  it("follows the OpenTelemetry naming rules", () => {
    expect(new Set(otelNames).size).toBe(otelNames.length);
    for (const name of otelNames) {
      expect(name).toMatch(/^jetstream(\.[a-z][a-z0-9_]*)+$/);
      expect(name).not.toMatch(/_total$|_seconds$/);
      expect(name.length).toBeLessThanOrEqual(255);
      // No name is also the namespace of another one.
      expect(otelNames.some((other) => other.startsWith(`${name}.`))).toBe(false);
    }
    expect(OpenTelemetryMetricNames.in_progress_attempts_total).toBe("jetstream.in_progress.attempts");
  });

  it("uses unit s for every duration and an annotation or 1 for every count", () => {
    for (const def of METRIC_DEFINITIONS) {
      const unit = OPEN_TELEMETRY_UNITS[def.name];
      if (def.unit === "s") expect(unit, def.name).toBe("s");
      else expect(unit, def.name).toMatch(/^(\{[a-z]+\}|1)$/);
    }
  });

  it("is documented in docs/opentelemetry.md, row for row", () => {
    const doc = readFileSync(join(root, "docs", "opentelemetry.md"), "utf8");
    const rows = [...doc.matchAll(/^\| `([a-z_]+)` \| `([a-z_.]+)` \| (\w+) \| `([^`]+)` \|$/gm)].map((m) => m.slice(1, 5));
    const instrument = { counter: "Counter", gauge: "Gauge", observation: "Histogram" } as const;
    expect(rows).toEqual(
      METRIC_DEFINITIONS.map((d) => [d.name, OpenTelemetryMetricNames[d.name], d.additive ? "UpDownCounter" : instrument[d.kind], OPEN_TELEMETRY_UNITS[d.name]]),
    );
  });
});

describe("openTelemetryMetrics: collected data", () => {
  it("records counters, gauges and histograms under the mapped names, units and attributes", async () => {
    const { reader, meter } = setup();
    const sink = openTelemetryMetrics({ meter });
    sink.addCounter(MetricNames.IN_PROGRESS_ATTEMPTS_TOTAL, 3);
    sink.addCounter(MetricNames.IN_PROGRESS_ATTEMPTS_TOTAL, 2);
    sink.setGauge(MetricNames.CURRENT_IN_PROGRESS_BATCHES_ACTIVE, 4);
    sink.setGauge(MetricNames.CURRENT_IN_PROGRESS_BATCHES_ACTIVE, 1);
    sink.setGauge(MetricNames.CONSUMER_PENDING_MESSAGES, 42, { stream: "ORDERS", consumer: "worker" });
    sink.recordObservation(MetricNames.BATCH_WRITE_SECONDS, 0.3);
    sink.recordObservation(MetricNames.BATCH_WRITE_SECONDS, 2);
    sink.recordObservation(MetricNames.IN_PROGRESS_HEARTBEATS_PER_BATCH, 4);

    const data = await collect(reader);
    const attempts = data.get("jetstream.in_progress.attempts");
    expect(attempts?.dataPointType).toBe(DataPointType.SUM);
    expect(attempts?.descriptor).toMatchObject({ unit: "{heartbeat}", description: "InProgress heartbeats attempted while work was active (one per batch per beat)" });
    expect(attempts?.dataPoints.map((p) => p.value)).toEqual([5]);

    // The additive gauge is an UpDownCounter (a non-monotonic sum): set 4, then 1, reads 1.
    const active = data.get("jetstream.in_progress.active_batches");
    expect(active?.dataPointType).toBe(DataPointType.SUM);
    expect(active?.dataPointType === DataPointType.SUM && active.isMonotonic).toBe(false);
    expect(active?.descriptor.unit).toBe("{batch}");
    expect(active?.dataPoints.map((p) => p.value)).toEqual([1]);
    // A reading of one value stays a Gauge.
    expect(data.get("jetstream.consumer.pending_messages")?.dataPointType).toBe(DataPointType.GAUGE);

    const pending = data.get("jetstream.consumer.pending_messages");
    expect(pending?.dataPoints.map((p) => [p.attributes, p.value])).toEqual([[{ stream: "ORDERS", consumer: "worker" }, 42]]);

    const write = data.get("jetstream.batch.write.duration");
    expect(write?.dataPointType).toBe(DataPointType.HISTOGRAM);
    expect(write?.descriptor.unit).toBe("s");
    const h = write?.dataPoints[0]?.value as HistogramValue;
    expect(h.count).toBe(2);
    expect(h.sum).toBeCloseTo(2.3, 12);
    expect(h.buckets.boundaries).toEqual(DEFAULT_SECONDS_BUCKETS);
    expect(h.buckets.counts[DEFAULT_SECONDS_BUCKETS.indexOf(0.5)]).toBe(1);
    expect(h.buckets.counts[DEFAULT_SECONDS_BUCKETS.indexOf(2.5)]).toBe(1);

    const perBatch = data.get("jetstream.in_progress.heartbeats_per_batch");
    expect(perBatch?.descriptor.unit).toBe("{heartbeat}");
    expect((perBatch?.dataPoints[0]?.value as HistogramValue).buckets.boundaries).toEqual(DEFAULT_COUNT_BUCKETS);

    // Only what was recorded is exported, and nothing under a Prometheus-style name.
    expect([...data.keys()].sort()).toEqual(
      [
        "jetstream.batch.write.duration",
        "jetstream.consumer.pending_messages",
        "jetstream.in_progress.active_batches",
        "jetstream.in_progress.attempts",
        "jetstream.in_progress.heartbeats_per_batch",
      ],
    );
  });

  it("prepends the prefix", async () => {
    const { reader, meter } = setup();
    openTelemetryMetrics({ meter, prefix: "myapp." }).addCounter(MetricNames.MESSAGES_ACKED_TOTAL, 1);
    expect([...(await collect(reader)).keys()]).toEqual(["myapp.jetstream.messages.acked"]);
  });

  it("falls back to an UpDownCounter that reports the value set when the meter has no createGauge", async () => {
    const { reader, meter } = setup();
    const oldMeter = {
      createCounter: meter.createCounter.bind(meter),
      createHistogram: meter.createHistogram.bind(meter),
      createUpDownCounter: meter.createUpDownCounter.bind(meter),
    } as unknown as Meter;
    const sink = openTelemetryMetrics({ meter: oldMeter });
    sink.setGauge(MetricNames.CURRENT_IN_PROGRESS_BATCHES_ACTIVE, 5);
    sink.setGauge(MetricNames.CURRENT_IN_PROGRESS_BATCHES_ACTIVE, 3);
    sink.setGauge(MetricNames.CONSUMER_PENDING_MESSAGES, 10, { stream: "A", consumer: "w" });
    sink.setGauge(MetricNames.CONSUMER_PENDING_MESSAGES, 4, { stream: "B", consumer: "w" });
    sink.setGauge(MetricNames.CONSUMER_PENDING_MESSAGES, 7, { stream: "A", consumer: "w" });
    const data = await collect(reader);
    const active = data.get("jetstream.in_progress.active_batches");
    expect(active?.dataPointType).toBe(DataPointType.SUM);
    expect(active?.dataPoints.map((p) => p.value)).toEqual([3]);
    const pending = data.get("jetstream.consumer.pending_messages");
    expect(pending?.dataPoints.map((p) => [p.attributes["stream"], p.value]).sort()).toEqual([
      ["A", 7],
      ["B", 4],
    ]);
  });
});

describe("openTelemetryMetrics: the global meter provider", () => {
  afterEach(() => {
    otelMetrics.disable();
  });

  it("uses the meter named jetstream-inprogress with the package version by default", async () => {
    const { provider, reader } = setup();
    expect(otelMetrics.setGlobalMeterProvider(provider)).toBe(true);
    openTelemetryMetrics().addCounter(MetricNames.MESSAGES_NACKED_TOTAL, 2);
    const { resourceMetrics } = await reader.collect();
    const scopes = resourceMetrics.scopeMetrics.filter((s) => s.metrics.length > 0);
    expect(scopes.map((s) => s.scope)).toEqual([expect.objectContaining({ name: "jetstream-inprogress", version: pkg.version })]);
    expect(scopes[0]?.metrics[0]?.descriptor.name).toBe("jetstream.messages.nacked");
  });

  it("is a quiet no-op when no SDK is registered", () => {
    const sink = openTelemetryMetrics();
    expect(() => sink.addCounter(MetricNames.MESSAGES_ACKED_TOTAL, 1)).not.toThrow();
    expect(() => sink.setGauge(MetricNames.CONSUMER_STALLED, 1)).not.toThrow();
  });
});

describe("openTelemetryMetrics: options", () => {
  const { meter } = setup();

  it.each([
    ["1app.", /prefix "1app\." is not a valid metric name prefix: it must start with a letter and contain only letters, digits, _ \. - \/; use for example "myapp\."/],
    ["my app.", /prefix "my app\."/],
    ["my:app.", /prefix "my:app\."/],
  ])("refuses the prefix %j naming the field, the value and the fix", (prefix, message) => {
    expect(() => openTelemetryMetrics({ meter, prefix })).toThrow(TypeError);
    expect(() => openTelemetryMetrics({ meter, prefix })).toThrow(message);
  });

  it("refuses a prefix that would make a name longer than 255 characters", () => {
    const longest = Math.max(...Object.values(OpenTelemetryMetricNames).map((n) => n.length));
    expect(() => openTelemetryMetrics({ meter, prefix: "a".repeat(255 - longest) })).not.toThrow();
    expect(() => openTelemetryMetrics({ meter, prefix: "a".repeat(256 - longest) })).toThrow(
      new RegExp(`prefix is ${256 - longest} characters long, so the longest instrument name would have 256, above the limit of 255; use a prefix of at most ${255 - longest} characters`),
    );
  });

  it("accepts an empty prefix and the full name charset", () => {
    expect(() => openTelemetryMetrics({ meter, prefix: "" })).not.toThrow();
    expect(() => openTelemetryMetrics({ meter, prefix: "My-App_2/x." })).not.toThrow();
  });

  it("refuses an unknown option and a meter that is not a Meter", () => {
    expect(() => openTelemetryMetrics({ meter, prefx: "a." } as never)).toThrow(/unknown option "prefx" \(known: meter, prefix\)/);
    expect(() => openTelemetryMetrics({ meter: {} as never })).toThrow(/meter must be an OpenTelemetry Meter; pass meterProvider\.getMeter/);
    expect(() => openTelemetryMetrics(null as never)).toThrow(/openTelemetryMetrics: options must be an object or undefined, got null/);
  });
});

describe("openTelemetryMetrics: never throws", () => {
  it("ignores unknown names, wrong kinds and bad values without recording anything", async () => {
    const { reader, meter } = setup();
    const sink = openTelemetryMetrics({ meter });
    for (const [method, name, value, labels] of garbageOps) {
      expect(() => (sink[method] as (...a: unknown[]) => void)(name, value, labels)).not.toThrow();
    }
    expect([...(await collect(reader)).keys()]).toEqual([]);
  });

  it("keeps string labels as attributes and drops the rest", async () => {
    const { reader, meter } = setup();
    const sink = openTelemetryMetrics({ meter });
    expect(() => sink.addCounter(MetricNames.MESSAGES_ACKED_TOTAL, 1, null as never)).not.toThrow();
    expect(() => sink.addCounter(MetricNames.MESSAGES_ACKED_TOTAL, 1, { stream: 5, consumer: "w" } as never)).not.toThrow();
    const acked = (await collect(reader)).get("jetstream.messages.acked");
    expect(acked?.dataPoints.map((p) => [p.attributes, p.value])).toEqual([
      [{}, 1],
      [{ consumer: "w" }, 1],
    ]);
  });

  it("swallows an exception thrown by the meter's instruments", () => {
    const throwing = {
      createCounter: () => ({ add: () => { throw new Error("boom"); } }),
      createHistogram: () => ({ record: () => { throw new Error("boom"); } }),
      createGauge: () => ({ record: () => { throw new Error("boom"); } }),
    } as unknown as Meter;
    const sink = openTelemetryMetrics({ meter: throwing });
    expect(() => sink.addCounter(MetricNames.MESSAGES_ACKED_TOTAL, 1)).not.toThrow();
    expect(() => sink.setGauge(MetricNames.CONSUMER_STALLED, 1)).not.toThrow();
    expect(() => sink.recordObservation(MetricNames.BATCH_WRITE_SECONDS, 1)).not.toThrow();
  });
});

describe("openTelemetryMetrics: agrees with InMemoryMetrics", () => {
  it("reports the same counter totals, last gauge values and observation counts and sums", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(metricOpArb, { maxLength: 60 }), async (ops) => {
        const { reader, meter, provider } = setup();
        const sink: MetricsSink = openTelemetryMetrics({ meter });
        replay(sink, ops);
        const diff = sameTotals(totalsFrom(await collect(reader)), totalsOf(inMemory(ops)));
        await provider.shutdown();
        expect(diff).toBeUndefined();
      }),
      { numRuns: 150 },
    );
  });
});
