/**
 * The metric contract's small print: the renamed redelivery counter (and its deprecated key),
 * and how the recorder moves an up/down gauge through a sink with or without `addToGauge`.
 */
import { describe, expect, it } from "vitest";
import { InMemoryMetrics, MetricNames, type MetricName, type MetricsSink } from "../../../src/index.js";
import { METRIC_DEFINITIONS } from "../../../src/telemetry/metric-names.js";
import { MetricsRecorder } from "../../../src/telemetry/metrics-recorder.js";

describe("MetricNames", () => {
  it("every counter ends in _total", () => {
    const counters = METRIC_DEFINITIONS.filter((d) => d.kind === "counter").map((d) => d.name);
    expect(counters.filter((n) => !n.endsWith("_total"))).toEqual([]);
    expect(MetricNames.CONSUMER_REDELIVERED_MESSAGES_TOTAL).toBe("consumer_redelivered_messages_total");
  });

  it("keeps the old key as a deprecated, non-enumerable alias of the new name", () => {
    expect(MetricNames.CONSUMER_REDELIVERED_MESSAGES).toBe("consumer_redelivered_messages_total");
    expect(Object.keys(MetricNames)).not.toContain("CONSUMER_REDELIVERED_MESSAGES");
    expect(Object.values(MetricNames)).not.toContain("consumer_redelivered_messages");
    expect(new Set(Object.values(MetricNames)).size).toBe(Object.values(MetricNames).length);
    expect(Object.values(MetricNames).sort()).toEqual(METRIC_DEFINITIONS.map((d) => d.name).sort());
    expect(Object.isFrozen(MetricNames)).toBe(true);
  });

  it("only the active-batches gauge is additive", () => {
    expect(METRIC_DEFINITIONS.filter((d) => d.additive).map((d) => d.name)).toEqual([MetricNames.CURRENT_IN_PROGRESS_BATCHES_ACTIVE]);
  });
});

describe("MetricsRecorder.gaugeAdd", () => {
  const G = MetricNames.CURRENT_IN_PROGRESS_BATCHES_ACTIVE;

  it("sends deltas to addToGauge when the sink has it, and never setGauge", () => {
    const calls: string[] = [];
    const sink: MetricsSink = {
      addCounter: () => undefined,
      setGauge: (n, v) => void calls.push(`set ${n} ${v}`),
      addToGauge: (n, d) => void calls.push(`add ${n} ${d}`),
      recordObservation: () => undefined,
    };
    const r = MetricsRecorder.for(sink);
    r.gaugeAdd(G, 1);
    r.gaugeAdd(G, 1);
    r.gaugeAdd(G, -1);
    r.gaugeAdd(G, 0);
    r.gaugeAdd(G, Number.NaN);
    expect(calls).toEqual([`add ${G} 1`, `add ${G} 1`, `add ${G} -1`]);
  });

  it("falls back to setting the level it counted for a sink without addToGauge", () => {
    const calls: Array<[MetricName, number]> = [];
    const sink: MetricsSink = { addCounter: () => undefined, setGauge: (n, v) => void calls.push([n, v]), recordObservation: () => undefined };
    const r = MetricsRecorder.for(sink);
    r.gaugeAdd(G, 1);
    r.gaugeAdd(G, 1);
    r.gaugeAdd(G, -1);
    expect(calls).toEqual([[G, 1], [G, 2], [G, 1]]);
  });

  it("a throwing addToGauge or a throwing getter never reaches the caller", () => {
    const throwing: MetricsSink = {
      addCounter: () => undefined,
      setGauge: () => undefined,
      addToGauge: () => {
        throw new Error("sink");
      },
      recordObservation: () => undefined,
    };
    expect(() => MetricsRecorder.for(throwing).gaugeAdd(G, 1)).not.toThrow();
    const getter = Object.defineProperty({ addCounter: () => undefined, setGauge: () => undefined, recordObservation: () => undefined }, "addToGauge", {
      get() {
        throw new Error("getter");
      },
    }) as MetricsSink;
    expect(() => MetricsRecorder.for(getter).gaugeAdd(G, 1)).not.toThrow();
  });

  it("InMemoryMetrics.addToGauge adds to the series, labels included", () => {
    const m = new InMemoryMetrics();
    m.addToGauge(G, 2);
    m.addToGauge(G, -1);
    m.setGauge(MetricNames.CONSUMER_PENDING_MESSAGES, 5, { stream: "S", consumer: "C" });
    m.addToGauge(MetricNames.CONSUMER_PENDING_MESSAGES, 3, { stream: "S", consumer: "C" });
    expect(m.snapshot().gauges).toEqual({ [G]: 1, 'consumer_pending_messages{consumer="C",stream="S"}': 8 });
  });
});

describe("MetricsRecorder.countSoon", () => {
  const S = MetricNames.IN_PROGRESS_SUCCESSES_TOTAL;
  const A = MetricNames.IN_PROGRESS_ATTEMPTS_TOTAL;

  it("sums the counts of one task and hands each name to the sink once, in a microtask", async () => {
    const calls: Array<[MetricName, number, unknown]> = [];
    const sink: MetricsSink = { addCounter: (name, value, labels) => void calls.push([name, value, labels]), setGauge: () => {}, recordObservation: () => {} };
    const r = MetricsRecorder.for(sink);
    for (let i = 0; i < 1000; i++) {
      r.countSoon(S, 2);
      r.countSoon(A, 2);
    }
    r.countSoon(S, 0);
    r.countSoon(S, Number.NaN);
    expect(calls).toEqual([]);
    await Promise.resolve();
    expect(calls).toEqual([
      [S, 2000, undefined],
      [A, 2000, undefined],
    ]);
    // The next task starts a new sum.
    r.countSoon(S, 3);
    await Promise.resolve();
    expect(calls.at(-1)).toEqual([S, 3, undefined]);
    expect(calls).toHaveLength(3);
  });

  it("a throwing sink never reaches the caller nor stops later counts; no sink, no microtask", async () => {
    let thrown = 0;
    const sink: MetricsSink = {
      addCounter: () => {
        thrown += 1;
        throw new Error("sink down");
      },
      setGauge: () => {},
      recordObservation: () => {},
    };
    const r = MetricsRecorder.for(sink);
    r.countSoon(S, 1);
    await Promise.resolve();
    r.countSoon(S, 1);
    await Promise.resolve();
    expect(thrown).toBe(2);
    expect(() => MetricsRecorder.NONE.countSoon(S, 1)).not.toThrow();
  });

  it("InMemoryMetrics gets the same totals as from count", async () => {
    const a = new InMemoryMetrics();
    const b = new InMemoryMetrics();
    for (let i = 1; i <= 10; i++) {
      MetricsRecorder.for(a).count(S, i);
      MetricsRecorder.for(b).countSoon(S, i);
    }
    await Promise.resolve();
    expect(b.snapshot().counters[S]).toBe(55);
    expect(b.snapshot().counters).toEqual(a.snapshot().counters);
  });
});
