import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { ConsumerHealthTracker, estimateRedeliveries, isBacklogGrowing, readConsumerInfo, type ConsumerInfoFields, type DeliveryCounters } from "../../../src/health/consumer-health.js";

const c = (delivered: number, deliveredStreamSeq: number, redelivered = 0): DeliveryCounters => ({
  delivered,
  deliveredStreamSeq,
  redelivered,
});

describe("estimateRedeliveries: table of cases", () => {
  const cases: Array<[string, DeliveryCounters, DeliveryCounters, number]> = [
    // [name, previous, current, expected]
    ["nothing happened", c(10, 10), c(10, 10), 0],
    ["first deliveries only", c(10, 10), c(25, 25), 0],
    ["first deliveries of a consumer that started mid-stream", c(0, 99), c(5, 104), 0],
    ["one redelivery, no first delivery", c(10, 10), c(11, 10), 1],
    ["redeliveries mixed with first deliveries", c(10, 10), c(20, 17), 3],
    ["field report: 8 deliveries, 7 first, one redelivery (seen by the gauge too)", c(8, 8), c(16, 15, 1), 1],
    ["redelivered and acked between polls: the gauge is back to 0", c(14, 14, 0), c(18, 17, 0), 1],
    ["the gauge alone sees more (filter gap hides redeliveries)", c(10, 12), c(14, 20, 3), 3],
    ["filtered consumer: gaps are never redeliveries", c(2, 3), c(4, 9), 0],
    ["purge moves stream_seq without deliveries", c(4, 5), c(4, 10), 0],
    ["purge then a NAK redelivery in one interval (hidden by the gap)", c(4, 5), c(6, 11), 0],
    ["gauge falls as redelivered messages are acked", c(16, 15, 1), c(18, 17, 0), 0],
    ["gauge rise counts new members only", c(20, 20, 2), c(23, 20, 3), 3],
    ["consumer recreated: consumer_seq moved back", c(41, 40), c(0, 40), 0],
    ["stream_seq moved back (reset)", c(41, 40), c(45, 10), 0],
    ["drop in pending would over-count: 10 published, 10 first-delivered", c(50, 50), c(60, 60), 0],
  ];

  it.each(cases)("%s", (_name, prev, cur, expected) => {
    expect(estimateRedeliveries(prev, cur)).toBe(expected);
  });
});

/**
 * A small model of a consumer's delivery bookkeeping, as the server keeps it: every delivery
 * takes the next consumer sequence; a first delivery takes the next stream sequence; a gap
 * (filtered subject, deleted or purged message) skips stream sequences; a redelivery adds the
 * message to the redelivered set until it is acked.
 */
type Event =
  | { readonly kind: "first" }
  | { readonly kind: "gap"; readonly n: number }
  | { readonly kind: "redeliver"; readonly pick: number }
  | { readonly kind: "ack"; readonly pick: number }
  | { readonly kind: "publish"; readonly n: number };

const eventArb: fc.Arbitrary<Event> = fc.oneof(
  { weight: 5, arbitrary: fc.constant({ kind: "first" } as const) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("gap" as const), n: fc.integer({ min: 1, max: 20 }) }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("redeliver" as const), pick: fc.nat() }) },
  { weight: 4, arbitrary: fc.record({ kind: fc.constant("ack" as const), pick: fc.nat() }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("publish" as const), n: fc.integer({ min: 1, max: 10 }) }) },
);

interface ModelSnapshot extends DeliveryCounters {
  readonly pending: number;
}

class ConsumerModel {
  dseq = 0;
  sseq = 0;
  published = 0;
  readonly unacked: number[] = [];
  readonly redeliveredUnacked = new Set<number>();
  redeliveries = 0;
  firsts = 0;
  gaps = 0;

  constructor(start = 0) {
    this.sseq = start;
    this.published = start;
  }

  apply(e: Event): void {
    switch (e.kind) {
      case "publish":
        this.published += e.n;
        return;
      case "first":
        if (this.sseq >= this.published) return; // nothing to deliver
        this.dseq += 1;
        this.sseq += 1;
        this.firsts += 1;
        this.unacked.push(this.sseq);
        return;
      case "gap": {
        const n = Math.min(e.n, this.published - this.sseq);
        this.sseq += n;
        this.gaps += n;
        return;
      }
      case "redeliver": {
        if (this.unacked.length === 0) return;
        const seq = this.unacked[e.pick % this.unacked.length] as number;
        this.dseq += 1;
        this.redeliveries += 1;
        this.redeliveredUnacked.add(seq);
        return;
      }
      case "ack": {
        if (this.unacked.length === 0) return;
        const [seq] = this.unacked.splice(e.pick % this.unacked.length, 1);
        this.redeliveredUnacked.delete(seq as number);
        return;
      }
    }
  }

  snapshot(): ModelSnapshot {
    return {
      delivered: this.dseq,
      deliveredStreamSeq: this.sseq,
      redelivered: this.redeliveredUnacked.size,
      pending: this.published - this.sseq,
    };
  }
}

const run = (start: number, before: readonly Event[], between: readonly Event[]) => {
  const m = new ConsumerModel(start);
  for (const e of before) m.apply(e);
  const a = m.snapshot();
  const r0 = m.redeliveries;
  const g0 = m.gaps;
  for (const e of between) m.apply(e);
  return { a, b: m.snapshot(), truth: m.redeliveries - r0, gaps: m.gaps - g0 };
};

describe("estimateRedeliveries: properties", () => {
  const events = fc.array(eventArb, { maxLength: 80 });
  const start = fc.integer({ min: 0, max: 1_000_000 });

  it("never counts more than the redeliveries that happened (a first delivery is never a redelivery)", () => {
    fc.assert(
      fc.property(start, events, events, (s, before, between) => {
        const { a, b, truth } = run(s, before, between);
        expect(estimateRedeliveries(a, b)).toBeLessThanOrEqual(truth);
      }),
    );
  });

  it("is exact when no stream sequence was skipped between the samples, however slow the poll", () => {
    fc.assert(
      fc.property(start, events, events, (s, before, between) => {
        const noGaps = between.filter((e) => e.kind !== "gap");
        const { a, b, truth } = run(s, before, noGaps);
        expect(estimateRedeliveries(a, b)).toBe(truth);
      }),
    );
  });

  it("is 0 when only first deliveries, gaps and publishes happened", () => {
    const quiet = fc.array(eventArb.filter((e) => e.kind !== "redeliver"), { maxLength: 80 });
    fc.assert(
      fc.property(start, events, quiet, (s, before, between) => {
        const { a, b } = run(s, before, between);
        expect(estimateRedeliveries(a, b)).toBe(0);
      }),
    );
  });

  it("is never below the rise of num_redelivered, nor below 0", () => {
    fc.assert(
      fc.property(start, events, events, (s, before, between) => {
        const { a, b } = run(s, before, between);
        const est = estimateRedeliveries(a, b);
        expect(est).toBeGreaterThanOrEqual(Math.max(0, b.redelivered - a.redelivered));
        expect(est).toBeGreaterThanOrEqual(0);
      }),
    );
  });

  it("adds up over many short intervals to at most the truth over one long interval", () => {
    fc.assert(
      fc.property(start, fc.array(events, { minLength: 1, maxLength: 8 }), (s, chunks) => {
        const m = new ConsumerModel(s);
        let prev = m.snapshot();
        let sum = 0;
        for (const chunk of chunks) {
          for (const e of chunk) m.apply(e);
          const cur = m.snapshot();
          sum += estimateRedeliveries(prev, cur);
          prev = cur;
        }
        expect(sum).toBeLessThanOrEqual(m.redeliveries);
      }),
    );
  });

  it("the drop in num_pending is not a safe bound: publishes make first deliveries look like redeliveries", () => {
    // Why the estimate does not use it: (Δconsumer_seq − pending drop) over-counts here.
    const { a, b, truth } = run(0, [{ kind: "publish", n: 10 }], [
      { kind: "first" },
      { kind: "publish", n: 5 },
      { kind: "first" },
    ]);
    const pendingDrop = a.pending - b.pending;
    expect(b.delivered - a.delivered - pendingDrop).toBeGreaterThan(truth);
    expect(estimateRedeliveries(a, b)).toBe(truth);
  });
});

describe("isBacklogGrowing", () => {
  const cases: Array<[string, number[], number, boolean]> = [
    // [name, pending counts oldest first, minRise, expected]
    ["too few samples", [1, 2], 1, false],
    ["steady rise", [10, 20, 30, 40, 50, 60], 1, true],
    ["rise with a plateau, most steps rising", [10, 20, 20, 30, 40, 50], 1, true],
    ["one burst, then flat", [0, 40, 40, 40, 40, 40], 1, false],
    ["burst straddling two polls, then flat", [0, 20, 40, 40, 40, 40], 1, false],
    ["burst draining", [0, 40, 36, 32, 28, 24], 1, false],
    ["rising trend with one dip", [10, 20, 30, 25, 40, 50], 1, false],
    ["flat non-zero (stuck but not growing)", [500, 500, 500, 500, 500, 500], 1, false],
    ["flat zero", [0, 0, 0, 0, 0, 0], 1, false],
    ["slow rise below the threshold", [0, 1, 2, 3, 4, 5], 10, false],
    ["slow rise at the threshold", [0, 2, 4, 6, 8, 10], 10, true],
    ["three samples, both steps rising", [1, 2, 3], 1, true],
    ["three samples, one step rising", [1, 1, 3], 1, false],
  ];
  it.each(cases)("%s", (_name, pendings, minRise, expected) => {
    expect(isBacklogGrowing(pendings, minRise)).toBe(expected);
  });

  const window = fc.array(fc.nat({ max: 1_000_000 }), { minLength: 3, maxLength: 30 });

  it("any step down means not growing", () => {
    fc.assert(
      fc.property(window, fc.nat(), fc.integer({ min: 1, max: 1000 }), (w, at, drop) => {
        const i = 1 + (at % (w.length - 1));
        const v = [...w];
        v[i] = Math.max(0, (v[i - 1] as number) - drop);
        fc.pre((v[i] as number) < (v[i - 1] as number));
        expect(isBacklogGrowing(v, 1)).toBe(false);
      }),
    );
  });

  it("a single rising step (a burst) is never growing with four or more samples", () => {
    fc.assert(
      fc.property(fc.nat({ max: 1000 }), fc.integer({ min: 1, max: 10_000 }), fc.integer({ min: 4, max: 30 }), fc.nat(), (base, jump, n, at) => {
        const k = 1 + (at % (n - 1));
        const v = Array.from({ length: n }, (_, i) => (i < k ? base : base + jump));
        expect(isBacklogGrowing(v, 1)).toBe(false);
      }),
    );
  });

  it("a strictly rising window with enough total rise is growing, wherever it starts", () => {
    fc.assert(
      fc.property(fc.nat({ max: 1_000_000 }), fc.array(fc.integer({ min: 1, max: 100 }), { minLength: 2, maxLength: 30 }), (base, steps) => {
        const v = [base];
        for (const s of steps) v.push((v[v.length - 1] as number) + s);
        const total = (v[v.length - 1] as number) - base;
        expect(isBacklogGrowing(v, total)).toBe(true);
        expect(isBacklogGrowing(v, total + 1)).toBe(false);
      }),
    );
  });
});

const info = (over: Partial<ConsumerInfoFields> = {}): ConsumerInfoFields => ({
  pending: 0,
  ackPending: 0,
  redelivered: 0,
  waiting: 0,
  delivered: 0,
  deliveredStreamSeq: 0,
  ackFloor: 0,
  ackFloorStreamSeq: 0,
  ackWaitMs: 1000,
  createdMs: Date.parse("2024-01-01T00:00:00Z"),
  paused: false,
  pauseRemainingMs: undefined,
  pauseUntilMs: undefined,
  ...over,
});

const tracker = (windowSamples = 4, backlogMinRise = 1, declaredLeaseMs?: number) =>
  new ConsumerHealthTracker({ stream: "S", consumer: "C", windowSamples, backlogMinRise, declaredLeaseMs });
/** A tracker whose host declared "no heartbeats": the lease is one AckWait. */
const oneAckWait = () => tracker(4, 1, 0);

describe("ConsumerHealthTracker", () => {
  it("the first sample is a baseline and counts nothing, whatever the server reports", () => {
    const s = tracker().update(info({ delivered: 41, deliveredStreamSeq: 40, redelivered: 3, ackPending: 3 }), 1000);
    expect(s).toMatchObject({ baseline: true, redeliveriesSinceLastSample: 0, stalled: false, backlogGrowing: false, ackFloorFlatMs: 0 });
    expect(s.stream).toBe("S");
    expect(s.consumer).toBe("C");
    expect(Object.isFrozen(s)).toBe(true);
  });

  it("with a lease of one AckWait: stalled when in flight with a flat floor for longer than AckWait (strictly), off when the floor moves", () => {
    const t = oneAckWait();
    const busy = { ackPending: 2, delivered: 10, deliveredStreamSeq: 10, ackFloor: 8, ackFloorStreamSeq: 8 };
    expect(t.update(info(busy), 0).stalled).toBe(false);
    expect(t.update(info(busy), 600).stalled).toBe(false);
    const atLimit = t.update(info(busy), 1000);
    expect(atLimit).toMatchObject({ stalled: false, ackFloorFlatMs: 1000 });
    expect(t.update(info(busy), 1001)).toMatchObject({ stalled: true, stallEvidence: "lease", leaseMs: 1000, ackFloorFlatMs: 1001 });
    const moved = t.update(info({ ...busy, ackFloor: 17, ackFloorStreamSeq: 16 }), 1500);
    expect(moved).toMatchObject({ stalled: false, ackFloorFlatMs: 0 });
  });

  it("an idle consumer with an old floor is not stalled the moment a message is delivered", () => {
    const t = oneAckWait();
    t.update(info({ delivered: 5, deliveredStreamSeq: 5, ackFloor: 5, ackFloorStreamSeq: 5 }), 0);
    t.update(info({ delivered: 5, deliveredStreamSeq: 5, ackFloor: 5, ackFloorStreamSeq: 5 }), 60_000);
    const s = t.update(info({ ackPending: 1, delivered: 6, deliveredStreamSeq: 6, ackFloor: 5, ackFloorStreamSeq: 5 }), 120_000);
    expect(s).toMatchObject({ stalled: false, ackFloorFlatMs: 0 });
    const later = t.update(info({ ackPending: 1, delivered: 6, deliveredStreamSeq: 6, ackFloor: 5, ackFloorStreamSeq: 5 }), 121_500);
    expect(later).toMatchObject({ stalled: true, ackFloorFlatMs: 1500 });
  });

  it("a floor moving only in stream sequence (a purge) counts as moving", () => {
    const t = oneAckWait();
    t.update(info({ ackPending: 1, ackFloor: 4, ackFloorStreamSeq: 5 }), 0);
    const s = t.update(info({ ackPending: 1, ackFloor: 4, ackFloorStreamSeq: 10 }), 5000);
    expect(s.stalled).toBe(false);
  });

  it("without a known AckWait and a lease of one AckWait it never reports stalled; a declared lease still counts", () => {
    const t = oneAckWait();
    t.update(info({ ackPending: 1, ackWaitMs: undefined }), 0);
    expect(t.update(info({ ackPending: 1, ackWaitMs: undefined }), 1_000_000)).toMatchObject({ stalled: false, leaseMs: undefined, ackFloorFlatMs: 1_000_000 });
    const declared = tracker(4, 1, 5000);
    declared.update(info({ ackPending: 1, ackWaitMs: undefined }), 0);
    expect(declared.update(info({ ackPending: 1, ackWaitMs: undefined }), 5000)).toMatchObject({ stalled: false, leaseMs: 5000 });
    expect(declared.update(info({ ackPending: 1, ackWaitMs: undefined }), 5001)).toMatchObject({ stalled: true, stallEvidence: "lease" });
  });

  it("counts redeliveries between samples from the sequences (field report numbers)", () => {
    const t = tracker();
    t.update(info({ pending: 30, ackPending: 2, delivered: 10, deliveredStreamSeq: 10, ackFloor: 8, ackFloorStreamSeq: 8 }), 0);
    // The poll missed the moment num_redelivered was 1: it is 0 again here.
    const s = t.update(info({ pending: 23, ackPending: 1, delivered: 18, deliveredStreamSeq: 17, ackFloor: 17, ackFloorStreamSeq: 16 }), 5000);
    expect(s).toMatchObject({ baseline: false, redeliveriesSinceLastSample: 1, redelivered: 0 });
  });

  it("a recreated consumer (new created time, or sequences back) starts a new baseline", () => {
    const t = tracker();
    t.update(info({ delivered: 41, deliveredStreamSeq: 40 }), 0);
    const recreated = t.update(info({ delivered: 45, deliveredStreamSeq: 40, createdMs: Date.parse("2024-02-02T00:00:00Z") }), 1000);
    expect(recreated).toMatchObject({ baseline: true, redeliveriesSinceLastSample: 0 });
    const back = t.update(info({ delivered: 2, deliveredStreamSeq: 2, createdMs: Date.parse("2024-02-02T00:00:00Z") }), 2000);
    expect(back).toMatchObject({ baseline: true, redeliveriesSinceLastSample: 0 });
    const next = t.update(info({ delivered: 4, deliveredStreamSeq: 3, createdMs: Date.parse("2024-02-02T00:00:00Z") }), 3000);
    expect(next).toMatchObject({ baseline: false, redeliveriesSinceLastSample: 1 });
  });

  it("a creation time shifted by less than a second (a server restart) is the same consumer", () => {
    const t = tracker();
    const created = Date.parse("2024-01-01T00:00:00.000Z");
    t.update(info({ delivered: 10, deliveredStreamSeq: 10, createdMs: created }), 0);
    const s = t.update(info({ delivered: 12, deliveredStreamSeq: 11, createdMs: created + 0.2 }), 1000);
    expect(s).toMatchObject({ baseline: false, redeliveriesSinceLastSample: 1 });
    const r = t.update(info({ delivered: 13, deliveredStreamSeq: 12, createdMs: created + 1001 }), 2000);
    expect(r).toMatchObject({ baseline: true, redeliveriesSinceLastSample: 0 });
  });

  it("a missing creation time falls back to the sequence checks", () => {
    const t = tracker();
    t.update(info({ delivered: 10, deliveredStreamSeq: 10, createdMs: undefined }), 0);
    expect(t.update(info({ delivered: 11, deliveredStreamSeq: 10, createdMs: undefined }), 1000)).toMatchObject({ baseline: false, redeliveriesSinceLastSample: 1 });
    expect(t.update(info({ delivered: 1, deliveredStreamSeq: 10, createdMs: undefined }), 2000)).toMatchObject({ baseline: true });
  });

  it("backlogGrowing needs a full window; a baseline clears it", () => {
    const t = tracker(4);
    const seen = [10, 20, 30, 40, 50].map((pending, i) => t.update(info({ pending }), i * 100).backlogGrowing);
    expect(seen).toEqual([false, false, false, true, true]);
    const reset = t.update(info({ pending: 60, createdMs: 0 }), 600);
    expect(reset.backlogGrowing).toBe(false);
  });

  it("a burst that drains never sets backlogGrowing", () => {
    const t = tracker(4);
    const seen = [0, 40, 36, 30, 22, 12, 0, 0, 0].map((pending, i) => t.update(info({ pending }), i * 100).backlogGrowing);
    expect(seen.every((g) => !g)).toBe(true);
  });
});

describe("readConsumerInfo", () => {
  const raw = {
    stream_name: "S",
    name: "C",
    created: "2024-01-01T00:00:00Z",
    config: { ack_wait: 2_000_000_000 },
    delivered: { consumer_seq: 16, stream_seq: 15 },
    ack_floor: { consumer_seq: 8, stream_seq: 8 },
    num_ack_pending: 1,
    num_redelivered: 1,
    num_waiting: 1,
    num_pending: 25,
  };

  it("reads the counts, the sequences and AckWait in milliseconds", () => {
    expect(readConsumerInfo(raw)).toEqual({
      pending: 25,
      ackPending: 1,
      redelivered: 1,
      waiting: 1,
      delivered: 16,
      deliveredStreamSeq: 15,
      ackFloor: 8,
      ackFloorStreamSeq: 8,
      ackWaitMs: 2000,
      createdMs: Date.parse("2024-01-01T00:00:00Z"),
      paused: false,
      pauseRemainingMs: undefined,
      pauseUntilMs: undefined,
    });
  });

  it("treats a missing num_waiting as 0 and a missing or invalid AckWait as unknown", () => {
    const { num_waiting: _w, ...noWaiting } = raw;
    expect(readConsumerInfo({ ...noWaiting, config: {} })).toMatchObject({ waiting: 0, ackWaitMs: undefined });
    expect(readConsumerInfo({ ...raw, config: { ack_wait: -5 } }).ackWaitMs).toBeUndefined();
  });

  it.each([
    ["not an object", null, /consumer info is not an object/],
    ["no delivered", { ...raw, delivered: undefined }, /delivered is not an object/],
    ["negative pending", { ...raw, num_pending: -1 }, /num_pending must be a non-negative integer, got -1/],
    ["string sequence", { ...raw, ack_floor: { consumer_seq: "8", stream_seq: 8 } }, /ack_floor.consumer_seq/],
    ["fractional ack pending", { ...raw, num_ack_pending: 1.5 }, /num_ack_pending/],
  ])("refuses a malformed answer: %s", (_name, value, message) => {
    expect(() => readConsumerInfo(value)).toThrow(TypeError);
    expect(() => readConsumerInfo(value)).toThrow(message);
  });
});
