import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import {
  InMemoryMetrics,
  MetricNames,
  verifyInProgressPolicy,
  watchConsumer,
  type ConsumerHealthSample,
  type ConsumerInfoSource,
  type ConsumerPollFailure,
  type MetricsSink,
} from "../../../src/index.js";

interface RawInfo {
  pending?: number;
  ackPending?: number;
  redelivered?: number;
  delivered?: number;
  deliveredStream?: number;
  floor?: number;
  floorStream?: number;
}

const rawInfo = (r: RawInfo = {}) => ({
  stream_name: "S",
  name: "C",
  created: "2024-01-01T00:00:00Z",
  config: { durable_name: "C", ack_wait: 2_000_000_000 },
  delivered: { consumer_seq: r.delivered ?? 0, stream_seq: r.deliveredStream ?? r.delivered ?? 0 },
  ack_floor: { consumer_seq: r.floor ?? 0, stream_seq: r.floorStream ?? r.floor ?? 0 },
  num_ack_pending: r.ackPending ?? 0,
  num_redelivered: r.redelivered ?? 0,
  num_waiting: 0,
  num_pending: r.pending ?? 0,
});

/** A consumer-info source driven by the test: each call takes the next answer. */
class FakeSource implements ConsumerInfoSource {
  calls = 0;
  inFlight = 0;
  maxInFlight = 0;
  readonly answers: Array<() => Promise<unknown>> = [];
  fallback: () => Promise<unknown> = async () => rawInfo();
  readonly consumers = {
    info: ((stream: string, consumer: string) => {
      expect([stream, consumer]).toEqual(["S", "C"]);
      this.calls += 1;
      this.inFlight += 1;
      this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
      const next = this.answers.shift() ?? this.fallback;
      return next().finally(() => {
        this.inFlight -= 1;
      });
    }) as ConsumerInfoSource["consumers"]["info"],
  };
}

const flush = async (ms = 0): Promise<void> => {
  await vi.advanceTimersByTimeAsync(ms);
};

describe("watchConsumer: option validation", () => {
  const src = new FakeSource();
  const cases: Array<[string, () => unknown, RegExp]> = [
    ["intervalMs below 100", () => watchConsumer(src, "S", "C", { intervalMs: 50 }), /options\.intervalMs must be an integer from 100 to 3600000 \(milliseconds\), got 50: .*intervalMs: 10_000/],
    ["intervalMs fractional", () => watchConsumer(src, "S", "C", { intervalMs: 150.5 }), /options\.intervalMs .* got 150\.5/],
    ["intervalMs missing", () => watchConsumer(src, "S", "C", {} as never), /options\.intervalMs .* got undefined/],
    ["intervalMs as string", () => watchConsumer(src, "S", "C", { intervalMs: "1000" } as never), /options\.intervalMs .* got "1000"/],
    ["intervalMs above an hour", () => watchConsumer(src, "S", "C", { intervalMs: 3_600_001 }), /options\.intervalMs .* got 3600001/],
    ["misspelt option", () => watchConsumer(src, "S", "C", { intervalMs: 1000, lables: true } as never), /watchConsumer options: unknown option "lables" — did you mean "labels"\? .*known: intervalMs, .*maxLeaseMs, inProgress/],
    ["misspelt lease option", () => watchConsumer(src, "S", "C", { intervalMs: 1000, maxLease: 5000 } as never), /unknown option "maxLease" — did you mean "maxLeaseMs"\?/],
    ["maxLeaseMs 0", () => watchConsumer(src, "S", "C", { intervalMs: 1000, maxLeaseMs: 0 }), /options\.maxLeaseMs must be an integer from 1 to \d+ \(milliseconds\), got 0: declare the longest heartbeated write/],
    ["maxLeaseMs fractional", () => watchConsumer(src, "S", "C", { intervalMs: 1000, maxLeaseMs: 1.5 }), /options\.maxLeaseMs .* got 1\.5/],
    ["inProgress not verified", () => watchConsumer(src, "S", "C", { intervalMs: 1000, inProgress: { enabled: true, intervalMs: 1000 } as never }), /options\.inProgress must be a policy returned by verifyInProgressPolicy, or \{ enabled: false \}, got an object: pass the verified policy/],
    ["inProgress not an object", () => watchConsumer(src, "S", "C", { intervalMs: 1000, inProgress: true as never }), /options\.inProgress must be .*, got true/],
    ["windowSamples 2", () => watchConsumer(src, "S", "C", { intervalMs: 1000, windowSamples: 2 }), /options\.windowSamples must be an integer from 3 to 1000, got 2: use at least 3 samples/],
    ["backlogMinRise 0", () => watchConsumer(src, "S", "C", { intervalMs: 1000, backlogMinRise: 0 }), /options\.backlogMinRise must be an integer >= 1 \(messages\), got 0/],
    ["maxBackoffMs below intervalMs", () => watchConsumer(src, "S", "C", { intervalMs: 1000, maxBackoffMs: 500 }), /options\.maxBackoffMs must be an integer from intervalMs \(1000\) to 3600000 \(milliseconds\), got 500/],
    ["signal not a signal", () => watchConsumer(src, "S", "C", { intervalMs: 1000, signal: {} as never }), /options\.signal must be an AbortSignal, got an object/],
    ["metrics not an object", () => watchConsumer(src, "S", "C", { intervalMs: 1000, metrics: 5 as never }), /options\.metrics must be an object implementing MetricsSink, got 5/],
    ["labels not a boolean", () => watchConsumer(src, "S", "C", { intervalMs: 1000, labels: "yes" as never }), /options\.labels must be a boolean, got "yes"/],
    ["onSample not a function", () => watchConsumer(src, "S", "C", { intervalMs: 1000, onSample: 1 as never }), /options\.onSample must be a function, got 1/],
    ["onError not a function", () => watchConsumer(src, "S", "C", { intervalMs: 1000, onError: "log" as never }), /options\.onError must be a function, got "log"/],
    ["options not an object", () => watchConsumer(src, "S", "C", 1000 as never), /watchConsumer options must be an object, got number/],
    ["options missing", () => watchConsumer(src, "S", "C", undefined as never), /options must be an object, got undefined: pass at least \{ intervalMs: 10_000 \}/],
    ["jsm without consumers.info", () => watchConsumer({} as never, "S", "C", { intervalMs: 1000 }), /jsm must be an object with consumers\.info\(stream, consumer\), got an object: pass a JetStreamManager/],
    ["empty stream", () => watchConsumer(src, "", "C", { intervalMs: 1000 }), /stream must be a non-empty name .*, got "": pass the stream's name/],
    ["wildcard consumer", () => watchConsumer(src, "S", "C.>", { intervalMs: 1000 }), /consumer must be a non-empty name .*, got "C\.>"/],
    ["consumer not a string", () => watchConsumer(src, "S", 7 as never, { intervalMs: 1000 }), /consumer must be .*, got 7/],
  ];
  it.each(cases)("%s: TypeError naming the field, the value, the limit and the fix", (_name, call, message) => {
    expect(call).toThrow(TypeError);
    expect(call).toThrow(message);
  });

  it("accepts the boundaries and starts nothing for a refused call", () => {
    const before = src.calls;
    expect(() => watchConsumer(src, "S", "C", { intervalMs: 99 })).toThrow(TypeError);
    expect(src.calls).toBe(before);
    const a = watchConsumer(src, "S", "C", { intervalMs: 100, windowSamples: 3, backlogMinRise: 1, maxBackoffMs: 100 });
    const b = watchConsumer(src, "S", "C", { intervalMs: 3_600_000, windowSamples: 1000, maxBackoffMs: 3_600_000 });
    a.stop();
    b.stop();
  });
});

describe("watchConsumer: polling", () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("polls at once, then intervalMs after each poll finished, and records the metrics without labels", async () => {
    const src = new FakeSource();
    const metrics = new InMemoryMetrics();
    const samples: ConsumerHealthSample[] = [];
    src.answers.push(
      async () => rawInfo({ pending: 38, ackPending: 2, delivered: 2, floor: 0 }),
      async () => rawInfo({ pending: 30, ackPending: 2, delivered: 11, deliveredStream: 10, floor: 8 }),
    );
    const watch = watchConsumer(src, "S", "C", { intervalMs: 1000, metrics, onSample: (s) => samples.push(s) });
    await flush();
    expect(src.calls).toBe(1);
    expect(watch.latest()).toMatchObject({ pending: 38, ackPending: 2, baseline: true, ackWaitMs: 2000 });
    await flush(999);
    expect(src.calls).toBe(1);
    await flush(1);
    expect(src.calls).toBe(2);
    expect(samples.map((s) => s.redeliveriesSinceLastSample)).toEqual([0, 1]);
    const snap = metrics.snapshot();
    expect(snap.gauges).toEqual({
      [MetricNames.CONSUMER_PENDING_MESSAGES]: 30,
      [MetricNames.CONSUMER_ACK_PENDING_MESSAGES]: 2,
      [MetricNames.CONSUMER_STALLED]: 0,
      [MetricNames.CONSUMER_BACKLOG_GROWING]: 0,
      [MetricNames.CONSUMER_PAUSED]: 0,
    });
    expect(snap.counters).toEqual({ [MetricNames.CONSUMER_REDELIVERED_MESSAGES_TOTAL]: 1 });
    expect(snap.counters).toEqual({ consumer_redelivered_messages_total: 1 });
    watch.stop();
  });

  it("labels the metrics with { stream, consumer } only when asked", async () => {
    const src = new FakeSource();
    const metrics = new InMemoryMetrics();
    src.answers.push(async () => {
      throw new Error("down");
    });
    const watch = watchConsumer(src, "S", "C", { intervalMs: 100, metrics, labels: true });
    await flush(200);
    const snap = metrics.snapshot();
    expect(snap.counters).toEqual({ 'consumer_poll_failures_total{consumer="C",stream="S"}': 1 });
    expect(Object.keys(snap.gauges).sort()).toEqual([
      'consumer_ack_pending_messages{consumer="C",stream="S"}',
      'consumer_backlog_growing{consumer="C",stream="S"}',
      'consumer_paused{consumer="C",stream="S"}',
      'consumer_pending_messages{consumer="C",stream="S"}',
      'consumer_stalled{consumer="C",stream="S"}',
    ]);
    watch.stop();
  });

  it("judges a flat floor against the declared lease: maxLeaseMs, the inProgress policy, or the longer of both", async () => {
    const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 500, maxHeartbeats: 6 }, { ackWaitMs: 2000, source: "inspected" });
    const cases: Array<[string, Partial<Parameters<typeof watchConsumer>[3]>, number | undefined]> = [
      ["nothing declared", {}, undefined],
      ["maxLeaseMs", { maxLeaseMs: 4000 }, 4000],
      ["maxLeaseMs below AckWait", { maxLeaseMs: 10 }, 2000],
      ["a verified policy", { inProgress: policy }, 500 * 6 + 2000],
      ["a disabled policy", { inProgress: { enabled: false } }, 2000],
      ["both: the longer", { inProgress: policy, maxLeaseMs: 9000 }, 9000],
    ];
    for (const [name, extra, leaseMs] of cases) {
      const src = new FakeSource();
      src.fallback = async () => rawInfo({ ackPending: 1, delivered: 1 });
      const samples: ConsumerHealthSample[] = [];
      const watch = watchConsumer(src, "S", "C", { intervalMs: 1000, ...extra, onSample: (s) => samples.push(s) });
      await flush(12_000);
      watch.stop();
      expect(samples[0]?.leaseMs, name).toBe(leaseMs);
      const firstStalled = samples.find((s) => s.stalled);
      if (leaseMs === undefined) expect(firstStalled, name).toBeUndefined();
      else expect(firstStalled, name).toMatchObject({ stallEvidence: "lease", ackFloorFlatMs: Math.ceil((leaseMs + 1) / 1000) * 1000 });
    }
  });

  it("a paused consumer sets consumer_paused and never consumer_stalled", async () => {
    const src = new FakeSource();
    const metrics = new InMemoryMetrics();
    src.fallback = async () => ({ ...rawInfo({ ackPending: 1, delivered: 1, pending: 5 }), paused: true, pause_remaining: 30_000_000_000 });
    const samples: ConsumerHealthSample[] = [];
    const watch = watchConsumer(src, "S", "C", { intervalMs: 1000, maxLeaseMs: 2000, metrics, onSample: (s) => samples.push(s) });
    await flush(10_000);
    expect(samples.length).toBeGreaterThan(5);
    expect(samples.every((s) => s.paused && !s.stalled && !s.backlogGrowing)).toBe(true);
    expect(samples[3]?.pausedUntil).toBe(samples[3]!.at + 30_000);
    expect(metrics.snapshot().gauges).toMatchObject({ [MetricNames.CONSUMER_PAUSED]: 1, [MetricNames.CONSUMER_STALLED]: 0 });
    src.fallback = async () => rawInfo({ ackPending: 1, delivered: 1, pending: 5 });
    await flush(5_000);
    expect(watch.latest()).toMatchObject({ paused: false, stalled: true, stallEvidence: "lease" });
    expect(metrics.snapshot().gauges).toMatchObject({ [MetricNames.CONSUMER_PAUSED]: 0, [MetricNames.CONSUMER_STALLED]: 1 });
    watch.stop();
  });

  it("never overlaps polls when the server is slow", async () => {
    const src = new FakeSource();
    src.fallback = () => new Promise((resolve) => setTimeout(() => resolve(rawInfo()), 2500));
    const watch = watchConsumer(src, "S", "C", { intervalMs: 100 });
    await flush(10_000);
    expect(src.maxInFlight).toBe(1);
    // 2500 ms per answer + 100 ms pause: four polls started in 10 s.
    expect(src.calls).toBe(4);
    watch.stop();
  });

  it("backs off on failures (doubling up to maxBackoffMs), reports them, and returns to intervalMs after a success", async () => {
    const src = new FakeSource();
    const metrics = new InMemoryMetrics();
    const failures: Array<[unknown, ConsumerPollFailure]> = [];
    const boom = new Error("server down");
    for (let i = 0; i < 5; i++) {
      src.answers.push(async () => {
        throw boom;
      });
    }
    const samples: ConsumerHealthSample[] = [];
    const watch = watchConsumer(src, "S", "C", {
      intervalMs: 100,
      maxBackoffMs: 1000,
      metrics,
      onError: (err, f) => failures.push([err, f]),
      onSample: (s) => samples.push(s),
    });
    await flush(0); // fail 1 at t=0
    await flush(200); // fail 2 at 200
    await flush(400); // fail 3 at 600
    await flush(800); // fail 4 at 1400
    await flush(1000); // fail 5 at 2400
    expect(failures.map(([, f]) => f.retryInMs)).toEqual([200, 400, 800, 1000, 1000]);
    expect(failures.map(([, f]) => f.consecutiveFailures)).toEqual([1, 2, 3, 4, 5]);
    expect(failures.every(([err]) => err === boom)).toBe(true);
    expect(metrics.snapshot().counters[MetricNames.CONSUMER_POLL_FAILURES_TOTAL]).toBe(5);
    expect(samples).toHaveLength(0);
    await flush(1000); // success at 3400
    expect(samples).toHaveLength(1);
    await flush(100); // back to the normal interval
    expect(samples).toHaveLength(2);
    src.answers.push(async () => {
      throw boom;
    });
    await flush(100);
    expect(failures.at(-1)?.[1]).toMatchObject({ consecutiveFailures: 1, retryInMs: 200 });
    watch.stop();
  });

  it("counts a malformed answer as a failed poll", async () => {
    const src = new FakeSource();
    src.answers.push(async () => ({ num_pending: "lots" }));
    const errors: unknown[] = [];
    const watch = watchConsumer(src, "S", "C", { intervalMs: 100, onError: (e) => errors.push(e) });
    await flush(0);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toBeInstanceOf(TypeError);
    expect(watch.latest()).toBeUndefined();
    watch.stop();
  });

  it("a synchronous throw from consumers.info is a failed poll too", async () => {
    const src: ConsumerInfoSource = {
      consumers: {
        info: () => {
          throw new Error("sync");
        },
      },
    };
    const errors: unknown[] = [];
    const watch = watchConsumer(src, "S", "C", { intervalMs: 100, onError: (e) => errors.push(e) });
    await flush(0);
    expect(errors).toHaveLength(1);
    watch.stop();
  });

  it("stop() clears the timer and ignores the answer still in flight", async () => {
    const src = new FakeSource();
    let release: (v: unknown) => void = () => undefined;
    src.answers.push(() => new Promise((resolve) => (release = resolve)));
    const onSample = vi.fn();
    const onError = vi.fn();
    const watch = watchConsumer(src, "S", "C", { intervalMs: 100, onSample, onError });
    await flush(0);
    watch.stop();
    watch.stop(); // idempotent
    release(rawInfo({ pending: 5 }));
    await flush(10_000);
    expect(onSample).not.toHaveBeenCalled();
    expect(onError).not.toHaveBeenCalled();
    expect(watch.latest()).toBeUndefined();
    expect(src.calls).toBe(1);
    expect(vi.getTimerCount()).toBe(0);
  });

  it("keeps the last sample after stop()", async () => {
    const src = new FakeSource();
    src.answers.push(async () => rawInfo({ pending: 7 }));
    const watch = watchConsumer(src, "S", "C", { intervalMs: 100 });
    await flush(0);
    watch.stop();
    expect(watch.latest()?.pending).toBe(7);
  });

  it("the signal stops it, and its listener is removed on stop", async () => {
    const src = new FakeSource();
    const ac = new AbortController();
    const add = vi.spyOn(ac.signal, "addEventListener");
    const remove = vi.spyOn(ac.signal, "removeEventListener");
    const watch = watchConsumer(src, "S", "C", { intervalMs: 100, signal: ac.signal });
    expect(add).toHaveBeenCalledWith("abort", expect.any(Function), { once: true });
    await flush(250);
    const calls = src.calls;
    expect(calls).toBeGreaterThanOrEqual(3);
    ac.abort();
    await flush(1000);
    expect(src.calls).toBe(calls);
    expect(remove).toHaveBeenCalledWith("abort", add.mock.calls[0]?.[1]);
    expect(vi.getTimerCount()).toBe(0);

    const ac2 = new AbortController();
    const remove2 = vi.spyOn(ac2.signal, "removeEventListener");
    const w2 = watchConsumer(src, "S", "C", { intervalMs: 100, signal: ac2.signal });
    w2.stop();
    expect(remove2).toHaveBeenCalledTimes(1);
    watch.stop();
  });

  it("an already aborted signal starts nothing", async () => {
    const src = new FakeSource();
    const watch = watchConsumer(src, "S", "C", { intervalMs: 100, signal: AbortSignal.abort() });
    await flush(1000);
    expect(src.calls).toBe(0);
    expect(watch.latest()).toBeUndefined();
  });

  it("`using` stops it at the end of the scope", async () => {
    const src = new FakeSource();
    {
      using watch = watchConsumer(src, "S", "C", { intervalMs: 100 });
      await flush(0);
      expect(watch.latest()).toBeDefined();
    }
    await flush(1000);
    expect(src.calls).toBe(1);
  });

  it("throwing or rejecting callbacks and sinks are swallowed; polling goes on", async () => {
    const src = new FakeSource();
    src.answers.push(async () => {
      throw new Error("one failure");
    });
    const sink: MetricsSink = {
      addCounter: () => {
        throw new Error("sink");
      },
      setGauge: () => {
        throw new Error("sink");
      },
      recordObservation: () => undefined,
    };
    let samples = 0;
    let errors = 0;
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown): void => {
      unhandled.push(reason);
    };
    process.on("unhandledRejection", onUnhandled);
    try {
      const watch = watchConsumer(src, "S", "C", {
        intervalMs: 100,
        metrics: sink,
        onError: () => {
          errors += 1;
          throw new Error("callback");
        },
        onSample: (async () => {
          samples += 1;
          throw new Error("async callback");
        }) as never,
      });
      await flush(1000);
      expect(errors).toBe(1);
      expect(samples).toBeGreaterThanOrEqual(3);
      watch.stop();
      vi.useRealTimers();
      await new Promise((resolve) => setTimeout(resolve, 20));
      expect(unhandled).toEqual([]);
    } finally {
      process.off("unhandledRejection", onUnhandled);
    }
  });

  it("a callback may stop the watch from inside", async () => {
    const src = new FakeSource();
    const watch = watchConsumer(src, "S", "C", {
      intervalMs: 100,
      onSample: () => watch.stop(),
    });
    await flush(1000);
    expect(src.calls).toBe(1);
  });
});

describe("watchConsumer: timer", () => {
  it("the poll timer is unref'd", async () => {
    const spy = vi.spyOn(globalThis, "setTimeout");
    try {
      const src = new FakeSource();
      const watch = watchConsumer(src, "S", "C", { intervalMs: 60_000 });
      await new Promise((resolve) => setImmediate(resolve));
      const timers = spy.mock.results.map((r) => r.value as NodeJS.Timeout);
      expect(timers.length).toBeGreaterThanOrEqual(1);
      expect(timers.every((t) => t.hasRef() === false)).toBe(true);
      watch.stop();
    } finally {
      spy.mockRestore();
    }
  });
});
