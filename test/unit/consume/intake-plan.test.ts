/**
 * The intake's pure decisions, like the settle table: the pull expiry bound over every basis,
 * the pull size over a whole small state space, one delivery per sequence in a batch, and a
 * property over random event sequences — a loop driven by these rules never holds (or asks
 * for) more than its capacity, and never stalls while it has room.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  expiryBound,
  keptPositions,
  MIN_PULL_EXPIRY_MS,
  pullExpiryMs,
  pullSize,
  shortestWindowMs,
  type IntakeState,
} from "../../../src/consume/intake-plan.js";

describe("the pull expiry bound", () => {
  it("heartbeats on: the interval, never below the client's 1 s", () => {
    expect(expiryBound(10_000, 30_000)).toEqual({ ms: 10_000, basis: "interval" });
    expect(expiryBound(20, 2000)).toEqual({ ms: MIN_PULL_EXPIRY_MS, basis: "interval" });
  });

  it("heartbeats off: a quarter of the shortest window, never below 1 s; unknown: 1 s", () => {
    expect(expiryBound(undefined, 30_000)).toEqual({ ms: 7500, basis: "ack_wait" });
    expect(expiryBound(undefined, 2000)).toEqual({ ms: MIN_PULL_EXPIRY_MS, basis: "ack_wait" });
    expect(expiryBound(undefined, undefined)).toEqual({ ms: MIN_PULL_EXPIRY_MS, basis: "unknown" });
    for (const bad of [0, -5, Number.NaN, Number.POSITIVE_INFINITY]) expect(expiryBound(undefined, bad).basis).toBe("unknown");
  });

  it("the shortest window is AckWait or the shortest BackOff step", () => {
    expect(shortestWindowMs(30_000, undefined)).toBe(30_000);
    expect(shortestWindowMs(30_000, [5000, 60_000])).toBe(5000);
    expect(shortestWindowMs(undefined, [8000, 2000])).toBe(2000);
    expect(shortestWindowMs(undefined, undefined)).toBeUndefined();
    expect(shortestWindowMs(Number.NaN, [Number.NaN])).toBeUndefined();
  });

  it("a requested expiry above the bound is clamped to it, and says so; below, honoured", () => {
    const bound = expiryBound(2000, 10_000);
    expect(pullExpiryMs(30_000, bound)).toEqual({ ms: 2000, clamped: true });
    expect(pullExpiryMs(1500, bound)).toEqual({ ms: 1500, clamped: false });
    expect(pullExpiryMs(2000, bound)).toEqual({ ms: 2000, clamped: false });
  });
});

describe("the pull size", () => {
  it("over every small state: within batchSize and the room left; run: pulls and writes within concurrency, overlapping only with a backlog; runEach: free handlers", () => {
    const states: IntakeState[] = [];
    for (const capacity of [1, 2, 3, 8])
      for (const batchSize of [1, 2, 4])
        for (const concurrency of [1, 2])
          for (let held = 0; held <= capacity + 1; held++)
            for (let requested = 0; requested <= capacity + 1; requested++)
              for (const openPulls of [0, 1, 2])
                for (let writing = 0; writing <= 3; writing++)
                  for (const backlog of [false, true]) states.push({ capacity, held, requested, openPulls, batchSize, writing, concurrency, backlog });
    for (const s of states) {
      const free = s.capacity - s.held - s.requested;
      const size = free > 0 ? Math.min(s.batchSize, free) : 0;
      const batch = pullSize(s, "batch");
      const each = pullSize(s, "each");
      // run: pulls and writes within concurrency; overlapping pulls only with a backlog.
      expect(batch).toBe(s.openPulls + s.writing < s.concurrency && (s.openPulls === 0 || s.backlog) ? size : 0);
      // runEach: free handlers; a second pull only once half a pull's worth is free.
      expect(each).toBe(s.openPulls === 0 ? size : free >= Math.ceil(Math.min(s.batchSize, s.capacity) / 2) ? size : 0);
    }
  });

  /** A loop on paper: pulls open by the rules, messages arrive into them, writes settle. */
  const events = fc.array(
    fc.oneof(
      fc.constant({ kind: "pull" as const }),
      fc.record({ kind: fc.constant("arrive" as const), n: fc.integer({ min: 1, max: 5 }) }),
      fc.constant({ kind: "end" as const }),
      fc.record({ kind: fc.constant("settle" as const), n: fc.integer({ min: 1, max: 5 }) }),
    ),
    { maxLength: 200 },
  );

  for (const mode of ["batch", "each"] as const) {
    it(`${mode}: held + requested never exceeds the capacity, and a loop with room and no pull open always pulls`, () => {
      fc.assert(
        fc.property(fc.integer({ min: 1, max: 40 }), fc.integer({ min: 1, max: 20 }), fc.integer({ min: 1, max: 4 }), events, (capacity, batchSize, concurrency, script) => {
          const pulls: number[] = []; // what each open pull may still bring
          let held = 0;
          let writing = 0;
          const state = (): IntakeState => ({ capacity, held, requested: pulls.reduce((a, b) => a + b, 0), openPulls: pulls.length, batchSize, writing, concurrency });
          for (const e of script) {
            if (e.kind === "pull") {
              const n = pullSize(state(), mode);
              if (n > 0) pulls.push(n);
            } else if (e.kind === "arrive" && pulls.length > 0) {
              const k = Math.min(e.n, pulls[0]!);
              pulls[0] = pulls[0]! - k;
              held += k;
            } else if (e.kind === "end" && pulls.length > 0) {
              pulls.shift();
              // run: the pull's messages become one write; runEach: each one is a write already.
              if (mode === "batch" && held > 0) writing += 1;
            } else if (e.kind === "settle" && held > 0) {
              held -= Math.min(e.n, held);
              if (writing > 0) writing -= 1;
            }
            const s = state();
            expect(s.held + s.requested).toBeLessThanOrEqual(capacity);
            if (s.openPulls === 0 && s.held < capacity && (mode === "each" || s.writing < concurrency)) expect(pullSize(s, mode)).toBeGreaterThan(0);
          }
        }),
        { numRuns: 500 },
      );
    });
  }
});

describe("one delivery per sequence in a batch", () => {
  it("keeps the latest delivery of each sequence, in arrival order; unreadable sequences are all kept", () => {
    const keys = [
      { streamSequence: 7, deliveryCount: 1 },
      { streamSequence: 8, deliveryCount: 1 },
      { streamSequence: 7, deliveryCount: 2 },
      { streamSequence: undefined, deliveryCount: undefined },
      { streamSequence: undefined, deliveryCount: undefined },
    ];
    expect(keptPositions(keys)).toEqual([1, 2, 3, 4]);
    expect(keptPositions([])).toEqual([]);
  });

  it("property: every sequence appears once, with its highest delivery count", () => {
    fc.assert(
      fc.property(fc.array(fc.record({ streamSequence: fc.integer({ min: 1, max: 6 }), deliveryCount: fc.integer({ min: 1, max: 4 }) }), { maxLength: 30 }), (keys) => {
        const kept = keptPositions(keys).map((i) => keys[i]!);
        const seqs = kept.map((k) => k.streamSequence);
        expect(new Set(seqs).size).toBe(seqs.length);
        expect(new Set(seqs)).toEqual(new Set(keys.map((k) => k.streamSequence)));
        for (const k of kept) expect(k.deliveryCount).toBe(Math.max(...keys.filter((x) => x.streamSequence === k.streamSequence).map((x) => x.deliveryCount)));
      }),
    );
  });
});
