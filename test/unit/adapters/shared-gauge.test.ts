/**
 * The active-batches gauge when several sinks feed one instrument: two CommitThenAck
 * instances, each with its own sink made on one Prometheus registry (or one OpenTelemetry
 * meter), supervise three batches between them; the shared instrument must read 3, then 0.
 * Before `addToGauge` each sink set its own level and the last writer won (3 read as 1).
 */
import { DataPointType, MeterProvider, MetricReader } from "@opentelemetry/sdk-metrics";
import { Registry } from "prom-client";
import { describe, expect, it } from "vitest";
import { CommitThenAck, InMemoryMetrics, MetricNames, verifyInProgressPolicy, type MetricName, type MetricsSink } from "../../../src/index.js";
import { openTelemetryMetrics } from "../../../src/adapters/opentelemetry.js";
import { prometheusMetrics } from "../../../src/adapters/prometheus.js";
import { fakeMsg } from "../../helpers/fakes.js";

const ACTIVE = MetricNames.CURRENT_IN_PROGRESS_BATCHES_ACTIVE;
const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 10_000 }, { ackWaitMs: 30_000, source: "configured" });

interface Held {
  readonly release: () => void;
  readonly done: Promise<unknown>;
}

/** Starts one batch under `ack` whose write waits until released. */
function hold(ack: CommitThenAck): Held {
  let release: () => void = () => undefined;
  const gate = new Promise<void>((resolve) => (release = resolve));
  const done = ack.process([fakeMsg()], async () => gate);
  return { release, done };
}

/** Supervises three batches across two CommitThenAck instances; reads the gauge at each step. */
async function threeBatchesAcross(a: MetricsSink, b: MetricsSink, read: () => Promise<number | undefined>): Promise<number[]> {
  const ackA = new CommitThenAck({ metrics: a, inProgress: policy });
  const ackB = new CommitThenAck({ metrics: b, inProgress: policy });
  const seen: number[] = [];
  const held = [hold(ackA), hold(ackB), hold(ackA)];
  await new Promise((r) => setImmediate(r));
  seen.push((await read()) ?? 0);
  held[1]!.release();
  await held[1]!.done;
  seen.push((await read()) ?? 0);
  for (const h of held) h.release();
  await Promise.all(held.map((h) => h.done));
  seen.push((await read()) ?? 0);
  return seen;
}

class TestReader extends MetricReader {
  protected override async onShutdown(): Promise<void> {}
  protected override async onForceFlush(): Promise<void> {}
}

describe("current_in_progress_batches_active on a shared instrument", () => {
  it("two prometheusMetrics sinks on one registry read 3 while 3 batches are supervised across them, 0 after", async () => {
    const registry = new Registry();
    const a = prometheusMetrics({ registry, prefix: "myapp_" });
    const b = prometheusMetrics({ registry, prefix: "myapp_" });
    const read = async () => {
      const m = (await registry.getMetricsAsJSON()).find((x) => x.name === `myapp_${ACTIVE}`);
      return (m?.values as Array<{ value: number }> | undefined)?.[0]?.value;
    };
    expect(await threeBatchesAcross(a, b, read)).toEqual([3, 2, 0]);
    expect(await registry.metrics()).toMatch(/^myapp_current_in_progress_batches_active 0$/m);
  });

  it("two openTelemetryMetrics sinks on one meter read 3, then 0, as one UpDownCounter series", async () => {
    const reader = new TestReader();
    const provider = new MeterProvider({ readers: [reader] });
    const meter = provider.getMeter("jetstream-inprogress");
    const a = openTelemetryMetrics({ meter });
    const b = openTelemetryMetrics({ meter });
    const read = async () => {
      const { resourceMetrics, errors } = await reader.collect();
      expect(errors).toEqual([]);
      const metrics = resourceMetrics.scopeMetrics.flatMap((s) => s.metrics).filter((m) => m.descriptor.name === "jetstream.in_progress.active_batches");
      expect(metrics).toHaveLength(1);
      expect(metrics[0]?.dataPointType).toBe(DataPointType.SUM);
      expect(metrics[0]?.dataPoints).toHaveLength(1);
      return metrics[0]?.dataPoints[0]?.value as number;
    };
    expect(await threeBatchesAcross(a, b, read)).toEqual([3, 2, 0]);
    await provider.shutdown();
  });

  it("two openTelemetryMetrics sinks on two meters of one provider add up too", async () => {
    const reader = new TestReader();
    const provider = new MeterProvider({ readers: [reader] });
    const a = openTelemetryMetrics({ meter: provider.getMeter("jetstream-inprogress") });
    const b = openTelemetryMetrics({ meter: provider.getMeter("jetstream-inprogress") });
    const read = async () => {
      const { resourceMetrics } = await reader.collect();
      const points = resourceMetrics.scopeMetrics
        .flatMap((s) => s.metrics)
        .filter((m) => m.descriptor.name === "jetstream.in_progress.active_batches")
        .flatMap((m) => m.dataPoints.map((p) => p.value as number));
      return points.reduce((x, y) => x + y, 0);
    };
    expect(await threeBatchesAcross(a, b, read)).toEqual([3, 2, 0]);
    await provider.shutdown();
  });

  it("InMemoryMetrics adds deltas too; a sink without addToGauge keeps the per-sink level (today's behaviour)", async () => {
    const memory = new InMemoryMetrics();
    expect(await threeBatchesAcross(memory, memory, async () => memory.snapshot().gauges[ACTIVE])).toEqual([3, 2, 0]);

    // One backend behind two sink objects that can only set: each sink reports its own level.
    const backend = new Map<string, number>();
    const setOnly = (): MetricsSink => ({
      addCounter: () => undefined,
      setGauge: (name: MetricName, value: number) => void backend.set(name, value),
      recordObservation: () => undefined,
    });
    const seen = await threeBatchesAcross(setOnly(), setOnly(), async () => backend.get(ACTIVE));
    expect(seen[2]).toBe(0);
    expect(seen[0]).toBeLessThan(3); // the last writer wins: why adapters implement addToGauge
  });

  it("the Prometheus and OpenTelemetry sinks ignore bad deltas and wrong kinds without throwing", async () => {
    const registry = new Registry();
    const prom = prometheusMetrics({ registry });
    const reader = new TestReader();
    const provider = new MeterProvider({ readers: [reader] });
    const otel = openTelemetryMetrics({ meter: provider.getMeter("x") });
    for (const sink of [prom, otel, new InMemoryMetrics()]) {
      for (const [name, delta] of [
        [ACTIVE, Number.NaN],
        [ACTIVE, Number.POSITIVE_INFINITY],
        [ACTIVE, "1"],
        [MetricNames.MESSAGES_ACKED_TOTAL, 1],
        [MetricNames.BATCH_WRITE_SECONDS, 1],
        ["no_such_gauge", 1],
      ] as const) {
        expect(() => sink.addToGauge?.(name as MetricName, delta as number)).not.toThrow();
      }
    }
    const active = (await registry.getMetricsAsJSON()).find((x) => x.name === ACTIVE);
    expect((active?.values as Array<{ value: number }>)[0]?.value ?? 0).toBe(0);
    expect(await registry.metrics()).toMatch(/^messages_acked_total 0$/m);
    const { resourceMetrics } = await reader.collect();
    expect(resourceMetrics.scopeMetrics.flatMap((s) => s.metrics)).toEqual([]);
    await provider.shutdown();
  });

  it("setGauge and addToGauge on one OpenTelemetry sink compose: the set level plus later deltas", async () => {
    const reader = new TestReader();
    const provider = new MeterProvider({ readers: [reader] });
    const meter = provider.getMeter("x");
    const a = openTelemetryMetrics({ meter });
    const b = openTelemetryMetrics({ meter });
    a.setGauge(ACTIVE, 5);
    a.addToGauge?.(ACTIVE, -2);
    b.addToGauge?.(ACTIVE, 4);
    a.setGauge(ACTIVE, 1); // a's contribution is now 1; b's 4 stays
    const { resourceMetrics } = await reader.collect();
    const point = resourceMetrics.scopeMetrics.flatMap((s) => s.metrics).find((m) => m.descriptor.name === "jetstream.in_progress.active_batches");
    expect(point?.dataPoints.map((p) => p.value)).toEqual([5]);
    await provider.shutdown();
  });
});
