import fc from "fast-check";
import { Counter, Gauge, Registry, openMetricsContentType, register, type OpenMetricsContentType } from "prom-client";
import { afterEach, describe, expect, it } from "vitest";
import { MetricNames, type MetricsSink } from "../../../src/index.js";
import { METRIC_DEFINITIONS } from "../../../src/telemetry/metric-names.js";
import { DEFAULT_COUNT_BUCKETS, DEFAULT_SECONDS_BUCKETS } from "../../../src/adapters/metric-buckets.js";
import { prometheusMetrics } from "../../../src/adapters/prometheus.js";
import { garbageOps, inMemory, keyOf, metricOpArb, replay, sameTotals, totalsOf, type Totals } from "../../helpers/metric-ops.js";

/** Reads a registry back into totals keyed by stable name (prefix removed). */
async function scrapeTotals(registry: Registry, prefix: string): Promise<Totals> {
  const totals: Totals = { counters: {}, gauges: {}, observations: {} };
  for (const metric of await registry.getMetricsAsJSON()) {
    const type = String(metric.type);
    const name = metric.name.slice(prefix.length);
    for (const v of metric.values as Array<{ value: number; labels: Record<string, unknown>; metricName?: string }>) {
      if (type === "counter") totals.counters[keyOf(name, v.labels)] = v.value;
      else if (type === "gauge") totals.gauges[keyOf(name, v.labels)] = v.value;
      else if (type === "histogram" && v.metricName !== `${metric.name}_bucket`) {
        const key = keyOf(name, v.labels);
        const o = (totals.observations[key] ??= { count: 0, sum: 0 });
        if (v.metricName === `${metric.name}_count`) o.count = v.value;
        if (v.metricName === `${metric.name}_sum`) o.sum = v.value;
      }
    }
  }
  for (const [k, o] of Object.entries(totals.observations)) if (o.count === 0) delete totals.observations[k];
  return totals;
}

describe("prometheusMetrics: scraped text", () => {
  it("registers every metric up front with prefix, HELP and TYPE", async () => {
    const registry = new Registry();
    prometheusMetrics({ registry, prefix: "myapp_" });
    const text = await registry.metrics();
    expect(registry.getMetricsAsArray()).toHaveLength(METRIC_DEFINITIONS.length);
    for (const def of METRIC_DEFINITIONS) {
      const type = def.kind === "observation" ? "histogram" : def.kind;
      expect(text).toContain(`# HELP myapp_${def.name} ${def.help}\n# TYPE myapp_${def.name} ${type}\n`);
    }
    // Nothing recorded yet: unlabelled counters are at zero.
    expect(text).toMatch(/^myapp_messages_acked_total 0$/m);
  });

  it("shows recorded counters, gauges, labels and histogram buckets", async () => {
    const registry = new Registry();
    const sink = prometheusMetrics({ registry, prefix: "myapp_" });
    sink.addCounter(MetricNames.MESSAGES_ACKED_TOTAL, 3);
    sink.addCounter(MetricNames.MESSAGES_ACKED_TOTAL, 2);
    sink.setGauge(MetricNames.CURRENT_IN_PROGRESS_BATCHES_ACTIVE, 4);
    sink.setGauge(MetricNames.CURRENT_IN_PROGRESS_BATCHES_ACTIVE, 1);
    sink.setGauge(MetricNames.CONSUMER_PENDING_MESSAGES, 42, { stream: "ORDERS", consumer: "worker" });
    sink.addCounter(MetricNames.CONSUMER_REDELIVERED_MESSAGES_TOTAL, 7, { stream: "ORDERS", consumer: "worker" });
    sink.recordObservation(MetricNames.BATCH_WRITE_SECONDS, 0.3);
    sink.recordObservation(MetricNames.BATCH_WRITE_SECONDS, 2);
    sink.recordObservation(MetricNames.IN_PROGRESS_HEARTBEATS_PER_BATCH, 4);

    const text = await registry.metrics();
    expect(text).toMatch(/^myapp_messages_acked_total 5$/m);
    expect(text).toMatch(/^myapp_current_in_progress_batches_active 1$/m);
    expect(text).toMatch(/^myapp_consumer_pending_messages\{stream="ORDERS",consumer="worker"\} 42$/m);
    expect(text).toMatch(/^myapp_consumer_redelivered_messages_total\{stream="ORDERS",consumer="worker"\} 7$/m);
    expect(text).toMatch(/^myapp_batch_write_seconds_bucket\{le="0\.25"\} 0$/m);
    expect(text).toMatch(/^myapp_batch_write_seconds_bucket\{le="0\.5"\} 1$/m);
    expect(text).toMatch(/^myapp_batch_write_seconds_bucket\{le="2\.5"\} 2$/m);
    expect(text).toMatch(/^myapp_batch_write_seconds_bucket\{le="\+Inf"\} 2$/m);
    expect(text).toMatch(/^myapp_batch_write_seconds_sum 2\.3$/m);
    expect(text).toMatch(/^myapp_batch_write_seconds_count 2$/m);
    // The count-valued histogram has its own buckets.
    expect(text).toMatch(/^myapp_in_progress_heartbeats_per_batch_bucket\{le="3"\} 0$/m);
    expect(text).toMatch(/^myapp_in_progress_heartbeats_per_batch_bucket\{le="5"\} 1$/m);
    expect(text).toMatch(/^myapp_in_progress_heartbeats_per_batch_bucket\{le="12"\} 1$/m);
    expect(text).not.toMatch(/^myapp_in_progress_heartbeats_per_batch_bucket\{le="0\.001"\}/m);
  });

  it("uses the default bucket sets", async () => {
    const registry = new Registry();
    prometheusMetrics({ registry });
    const text = await registry.metrics();
    const bounds = (name: string) =>
      [...text.matchAll(new RegExp(`^${name}_bucket\\{le="([^"]+)"\\}`, "gm"))].map((m) => m[1]).filter((b) => b !== "+Inf").map(Number);
    expect(bounds("batch_write_seconds")).toEqual(DEFAULT_SECONDS_BUCKETS);
    expect(bounds("in_progress_heartbeat_seconds")).toEqual(DEFAULT_SECONDS_BUCKETS);
    expect(bounds("in_progress_heartbeats_per_batch")).toEqual(DEFAULT_COUNT_BUCKETS);
    expect(DEFAULT_SECONDS_BUCKETS[0]).toBe(0.001);
    expect(DEFAULT_SECONDS_BUCKETS.at(-1)).toBe(60);
    expect(Object.isFrozen(DEFAULT_SECONDS_BUCKETS) && Object.isFrozen(DEFAULT_COUNT_BUCKETS)).toBe(true);
  });

  it("takes custom buckets for durations and for counts", async () => {
    const registry = new Registry();
    const sink = prometheusMetrics({ registry, buckets: [0.5, 1], countBuckets: [1, 10] });
    sink.recordObservation(MetricNames.NAK_DELAY_SECONDS, 0.75);
    sink.recordObservation(MetricNames.IN_PROGRESS_HEARTBEATS_PER_BATCH, 7);
    const text = await registry.metrics();
    expect(text).toContain('nak_delay_seconds_bucket{le="0.5"} 0\nnak_delay_seconds_bucket{le="1"} 1\nnak_delay_seconds_bucket{le="+Inf"} 1\n');
    expect(text).toContain(
      'in_progress_heartbeats_per_batch_bucket{le="1"} 0\nin_progress_heartbeats_per_batch_bucket{le="10"} 1\nin_progress_heartbeats_per_batch_bucket{le="+Inf"} 1\n',
    );
  });

  it("works with an OpenMetrics registry", async () => {
    const registry = new Registry<OpenMetricsContentType>();
    registry.setContentType(openMetricsContentType);
    const sink = prometheusMetrics({ registry, prefix: "myapp_" });
    sink.addCounter(MetricNames.MESSAGES_ACKED_TOTAL, 2);
    const text = await registry.metrics();
    expect(text).toMatch(/^myapp_messages_acked_total 2$/m);
    expect(text.endsWith("# EOF\n")).toBe(true);
  });
});

describe("prometheusMetrics: registries", () => {
  afterEach(() => {
    register.clear();
  });

  it("registers into prom-client's global register by default", async () => {
    const sink = prometheusMetrics();
    sink.addCounter(MetricNames.MESSAGES_TERMED_TOTAL, 1);
    expect(register.getSingleMetric("messages_termed_total")).toBeDefined();
    expect(await register.metrics()).toMatch(/^messages_termed_total 1$/m);
  });

  it("reuses the metrics of an earlier call with the same registry and prefix", async () => {
    const registry = new Registry();
    const a = prometheusMetrics({ registry, prefix: "svc_" });
    const before = registry.getMetricsAsArray();
    const b = prometheusMetrics({ registry, prefix: "svc_" });
    expect(registry.getMetricsAsArray()).toEqual(before);
    a.addCounter(MetricNames.MESSAGES_ACKED_TOTAL, 1);
    b.addCounter(MetricNames.MESSAGES_ACKED_TOTAL, 2);
    expect(await registry.metrics()).toMatch(/^svc_messages_acked_total 3$/m);
  });

  it("keeps two prefixes apart in one registry", async () => {
    const registry = new Registry();
    prometheusMetrics({ registry, prefix: "a_" }).addCounter(MetricNames.MESSAGES_ACKED_TOTAL, 1);
    prometheusMetrics({ registry, prefix: "b_" }).addCounter(MetricNames.MESSAGES_ACKED_TOTAL, 5);
    const text = await registry.metrics();
    expect(text).toMatch(/^a_messages_acked_total 1$/m);
    expect(text).toMatch(/^b_messages_acked_total 5$/m);
    expect(registry.getMetricsAsArray()).toHaveLength(2 * METRIC_DEFINITIONS.length);
  });

  it("reuses a metric the host registered itself with the same type and labels", async () => {
    const registry = new Registry();
    new Counter({ name: "messages_acked_total", help: "host's own", registers: [registry] });
    const sink = prometheusMetrics({ registry });
    sink.addCounter(MetricNames.MESSAGES_ACKED_TOTAL, 4);
    const text = await registry.metrics();
    expect(text).toContain("# HELP messages_acked_total host's own\n");
    expect(text).toMatch(/^messages_acked_total 4$/m);
  });

  it("refuses a name held by a metric of another type, and registers nothing", () => {
    const registry = new Registry();
    new Gauge({ name: "x_messages_failed_total", help: "not a counter", registers: [registry] });
    expect(() => prometheusMetrics({ registry, prefix: "x_" })).toThrow(
      /already has a gauge named x_messages_failed_total, but jetstream-inprogress records a counter under that name; pass another prefix or another registry/,
    );
    expect(registry.getMetricsAsArray()).toHaveLength(1);
  });
});

describe("prometheusMetrics: options", () => {
  it.each([
    ["1abc", /prefix "1abc" is not a valid metric name prefix: it must match \[a-zA-Z_:\]\[a-zA-Z0-9_:\]\*; use for example "myapp_"/],
    ["my-app_", /prefix "my-app_"/],
    ["my app", /prefix "my app"/],
    ["myapp.", /prefix "myapp\."/],
  ])("refuses the prefix %j naming the field, the value and the fix", (prefix, message) => {
    expect(() => prometheusMetrics({ registry: new Registry(), prefix })).toThrow(TypeError);
    expect(() => prometheusMetrics({ registry: new Registry(), prefix })).toThrow(message);
  });

  it("accepts an empty prefix and the full name charset", async () => {
    const registry = new Registry();
    prometheusMetrics({ registry, prefix: "" });
    prometheusMetrics({ registry, prefix: "_ns:sub_9_" });
    expect(await registry.metrics()).toContain("# TYPE _ns:sub_9_messages_acked_total counter");
  });

  it("refuses a prefix that is not a string", () => {
    expect(() => prometheusMetrics({ registry: new Registry(), prefix: 5 as never })).toThrow(/prefix must be a string, got 5; use for example "myapp_"/);
  });

  it("refuses an unknown option (a typo must not silently drop the prefix)", () => {
    expect(() => prometheusMetrics({ registry: new Registry(), prefx: "myapp_" } as never)).toThrow(
      /unknown option "prefx" \(known: registry, prefix, buckets, countBuckets\); check the spelling/,
    );
  });

  it.each([null, "myapp_", 5, [1]])("refuses options %j that are not an object", (options) => {
    expect(() => prometheusMetrics(options as never)).toThrow(/prometheusMetrics: options must be an object or undefined/);
  });

  it("refuses a registry that is not a prom-client Registry", () => {
    expect(() => prometheusMetrics({ registry: {} as never })).toThrow(/registry must be a prom-client Registry; pass new Registry\(\)/);
  });

  it.each([
    ["buckets", [], /buckets must be a non-empty array of numbers, got an array of 0/],
    ["buckets", "0.1,1", /buckets must be a non-empty array of numbers, got "0.1,1"/],
    ["buckets", [0.1, Number.NaN], /buckets\[1\] is NaN, not a finite number/],
    ["buckets", [1, 1], /buckets\[1\] is 1, not greater than buckets\[0\] \(1\); use finite numbers in strictly increasing order/],
    ["countBuckets", [5, 2], /countBuckets\[1\] is 2, not greater than countBuckets\[0\] \(5\)/],
  ])("refuses %s = %j", (field, value, message) => {
    expect(() => prometheusMetrics({ registry: new Registry(), [field]: value })).toThrow(message);
  });
});

describe("prometheusMetrics: never throws", () => {
  it("ignores unknown names, wrong kinds and bad values without recording anything", async () => {
    const registry = new Registry();
    const sink = prometheusMetrics({ registry });
    const before = await registry.metrics();
    for (const [method, name, value, labels] of garbageOps) {
      expect(() => (sink[method] as (...a: unknown[]) => void)(name, value, labels)).not.toThrow();
    }
    expect(await registry.metrics()).toBe(before);
  });

  it("drops labels the metric was not registered with, and odd label objects", async () => {
    const registry = new Registry();
    const sink = prometheusMetrics({ registry });
    const call = (labels: unknown) => () => sink.addCounter(MetricNames.MESSAGES_ACKED_TOTAL, 1, labels as never);
    expect(call({ subject: "orders.1" })).not.toThrow();
    expect(call(null)).not.toThrow();
    expect(call("stream")).not.toThrow();
    expect(() => sink.setGauge(MetricNames.CONSUMER_STALLED, 1, { stream: 5, consumer: "w", extra: "x" } as never)).not.toThrow();
    const text = await registry.metrics();
    expect(text).toMatch(/^messages_acked_total 3$/m);
    expect(text).toMatch(/^consumer_stalled\{consumer="w"\} 1$/m);
  });
});

describe("prometheusMetrics: agrees with InMemoryMetrics", () => {
  it("reports the same counter totals, last gauge values and observation counts and sums", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(metricOpArb, { maxLength: 60 }), async (ops) => {
        const registry = new Registry();
        const sink: MetricsSink = prometheusMetrics({ registry, prefix: "p_" });
        replay(sink, ops);
        const diff = sameTotals(await scrapeTotals(registry, "p_"), totalsOf(inMemory(ops)));
        expect(diff).toBeUndefined();
      }),
      { numRuns: 150 },
    );
  });
});
