/**
 * Stuck or slow: the stall rule on the shapes consumer info takes for a healthy heartbeated
 * write, a delayed NAK, a crash loop and a lone crashed worker, the lease derived from a
 * policy, and a paused consumer as a 2.15 server reports it.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { verifyInProgressPolicy } from "../../../src/index.js";
import { ConsumerHealthTracker, readConsumerInfo, type ConsumerInfoFields } from "../../../src/health/consumer-health.js";
import { effectiveLease, leaseFromPolicy, stallEvidence } from "../../../src/health/stall-rule.js";

const ACK_WAIT = 1000;

const info = (over: Partial<ConsumerInfoFields> = {}): ConsumerInfoFields => ({
  pending: 0,
  ackPending: 0,
  redelivered: 0,
  waiting: 0,
  delivered: 0,
  deliveredStreamSeq: 0,
  ackFloor: 0,
  ackFloorStreamSeq: 0,
  ackWaitMs: ACK_WAIT,
  createdMs: Date.parse("2024-01-01T00:00:00Z"),
  paused: false,
  pauseRemainingMs: undefined,
  pauseUntilMs: undefined,
  ...over,
});

const tracker = (declaredLeaseMs?: number, windowSamples = 4) =>
  new ConsumerHealthTracker({ stream: "S", consumer: "C", windowSamples, backlogMinRise: 1, declaredLeaseMs });

/** One message (stream sequence 1) in flight since delivery 1; the floor below it. */
const holding = { pending: 0, ackPending: 1, delivered: 1, deliveredStreamSeq: 1, ackFloor: 0, ackFloorStreamSeq: 0 };
/** The same message redelivered once (delivery 2), still in flight. */
const redelivered = { ...holding, delivered: 2, redelivered: 1 };
/** Acked: the floor moved past it. */
const settled = { pending: 0, ackPending: 0, delivered: 2, deliveredStreamSeq: 1, ackFloor: 2, ackFloorStreamSeq: 1 };

describe("leaseFromPolicy and effectiveLease", () => {
  it("is intervalMs × maxHeartbeats plus the AckWait the policy was verified against", () => {
    const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 300, maxHeartbeats: 20 }, { ackWaitMs: 1000, source: "inspected" });
    expect(leaseFromPolicy(policy)).toBe(300 * 20 + 1000);
  });

  it("takes the longest BackOff step in BackOff-aware mode (not the last one)", () => {
    const policy = verifyInProgressPolicy(
      { enabled: true, intervalMs: 700, maxHeartbeats: 5 },
      { backOffMs: [1000, 4000, 2000], maxDeliver: 10, source: "inspected" },
      { backOff: "aware" },
    );
    expect(leaseFromPolicy(policy)).toBe(700 * 5 + 4000);
  });

  it("is 0 (one AckWait) for a disabled policy", () => {
    expect(leaseFromPolicy(verifyInProgressPolicy({ enabled: false }, undefined))).toBe(0);
  });

  it("is never below AckWait, and undefined when none was declared or it cannot be positive", () => {
    expect(effectiveLease(undefined, 1000)).toBeUndefined();
    expect(effectiveLease(0, 1000)).toBe(1000);
    expect(effectiveLease(500, 1000)).toBe(1000);
    expect(effectiveLease(7000, 1000)).toBe(7000);
    expect(effectiveLease(0, undefined)).toBeUndefined();
    expect(effectiveLease(3000, undefined)).toBe(3000);
  });
});

describe("stallEvidence", () => {
  const base = { ackPending: 1, ackWaitMs: 1000, flatMs: 0, sinceRedeliveryMs: undefined, leaseMs: undefined, redeliveredInFlight: 1 };
  it.each([
    ["nothing in flight", { ...base, ackPending: 0, flatMs: 1e9, sinceRedeliveryMs: 1e9, leaseMs: 1 }, undefined],
    ["a flat floor alone, no lease declared", { ...base, flatMs: 1e9 }, undefined],
    ["flat past the lease", { ...base, flatMs: 7001, leaseMs: 7000 }, "lease"],
    ["flat exactly the lease", { ...base, flatMs: 7000, leaseMs: 7000 }, undefined],
    ["a redelivery, floor flat one AckWait after it (strictly)", { ...base, flatMs: 5000, sinceRedeliveryMs: 1001 }, "redelivery"],
    ["a redelivery, floor flat exactly one AckWait after it", { ...base, flatMs: 5000, sinceRedeliveryMs: 1000 }, undefined],
    ["a redelivery judged against a longer lease", { ...base, flatMs: 5000, sinceRedeliveryMs: 5000, leaseMs: 7000 }, undefined],
    ["a redelivery past the longer lease", { ...base, flatMs: 9000, sinceRedeliveryMs: 7001, leaseMs: 7000 }, "redelivery"],
    ["a redelivery without AckWait or lease", { ...base, ackWaitMs: undefined, flatMs: 9000, sinceRedeliveryMs: 9000 }, undefined],
    ["a redelivery whose message was acked since", { ...base, flatMs: 5000, sinceRedeliveryMs: 5000, redeliveredInFlight: 0 }, undefined],
  ] as const)("%s", (_name, input, expected) => {
    expect(stallEvidence(input)).toBe(expected);
  });

  it("a floor flat for no longer than the declared lease, without a redelivery, is never a stall", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 1e7 }), fc.integer({ min: 1, max: 1e6 }), fc.integer({ min: 0, max: 1e7 }), (lease, ackWait, flat) => {
        const leaseMs = Math.max(lease, ackWait);
        fc.pre(flat <= leaseMs);
        expect(stallEvidence({ ackPending: 3, ackWaitMs: ackWait, flatMs: flat, sinceRedeliveryMs: undefined, leaseMs, redeliveredInFlight: 3 })).toBeUndefined();
      }),
    );
  });
});

describe("ConsumerHealthTracker: stuck or slow", () => {
  it("a healthy heartbeated write of 3× AckWait is never stalled, with or without a declared lease", () => {
    const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 300, maxHeartbeats: 20 }, { ackWaitMs: ACK_WAIT, source: "inspected" });
    for (const t of [tracker(), tracker(leaseFromPolicy(policy))]) {
      const seen = [];
      for (let at = 0; at <= 3 * ACK_WAIT; at += 100) seen.push(t.update(info(holding), at));
      seen.push(t.update(info(settled), 3 * ACK_WAIT + 100));
      expect(seen.filter((s) => s.stalled)).toEqual([]);
      expect(seen.at(-2)?.ackFloorFlatMs).toBe(3 * ACK_WAIT);
    }
  });

  it("a delayed NAK (3× AckWait) whose retry settles is never stalled, unless the declared lease is shorter than the delay", () => {
    // Delivery 1 fails at once and is NAKed with a 3 s delay: the floor waits; the retry
    // (delivery 2) arrives after the delay and is acked within half an AckWait.
    const run = (t: ConsumerHealthTracker) => {
      const seen = [];
      for (let at = 0; at < 3 * ACK_WAIT; at += 100) seen.push(t.update(info(holding), at));
      for (let at = 3 * ACK_WAIT; at < 3.5 * ACK_WAIT; at += 100) seen.push(t.update(info(redelivered), at));
      seen.push(t.update(info(settled), 3.5 * ACK_WAIT));
      expect(seen.filter((s) => s.redeliveriesSinceLastSample > 0).map((s) => s.at)).toEqual([3 * ACK_WAIT]);
      return seen.filter((s) => s.stalled);
    };
    expect(run(tracker())).toEqual([]);
    expect(run(tracker(7000))).toEqual([]);
    // A host that declares a lease of one AckWait (no heartbeats) but NAKs for longer must
    // declare the NAK delay as its lease (documented): here the delay looks like a stop.
    expect(run(tracker(0)).map((s) => s.stallEvidence)).toContain("lease");
  });

  it("a crash loop (every worker that takes the message stops) is stalled one AckWait after the first redelivery", () => {
    const t = tracker();
    t.update(info(holding), 0);
    expect(t.update(info(holding), 1000).stalled).toBe(false);
    // Delivery 1 expired; delivery 2 went to a worker that stopped too.
    const seen = t.update(info(redelivered), 1100);
    expect(seen).toMatchObject({ redeliveriesSinceLastSample: 1, stalled: false });
    expect(t.update(info(redelivered), 2100)).toMatchObject({ stalled: false });
    expect(t.update(info(redelivered), 2101)).toMatchObject({ stalled: true, stallEvidence: "redelivery", leaseMs: undefined, ackFloorFlatMs: 2101 });
    // A third delivery, still flat: still stalled.
    expect(t.update(info({ ...redelivered, delivered: 3 }), 3200)).toMatchObject({ stalled: true, stallEvidence: "redelivery" });
    // A healthy worker finally acks it: the floor moves, the stall ends.
    expect(t.update(info({ ...settled, delivered: 3, ackFloor: 3 }), 3300)).toMatchObject({ stalled: false, stallEvidence: undefined });
  });

  it("a redelivered message that was acked is no evidence against the healthy write holding the floor", () => {
    // Message 1 is a healthy heartbeated write holding the floor; message 2 is NAKed, redelivered
    // and acked while message 1 runs on.
    const t = tracker();
    const two = { ackPending: 2, delivered: 2, deliveredStreamSeq: 2, ackFloor: 0, ackFloorStreamSeq: 0 };
    t.update(info(two), 0);
    t.update(info({ ...two, delivered: 3, redelivered: 1 }), 500); // message 2 redelivered
    const acked = { ...two, ackPending: 1, delivered: 3, redelivered: 0 }; // message 2 acked
    for (let at = 1000; at <= 5000; at += 250) expect(t.update(info(acked), at).stalled).toBe(false);
    // While a redelivered message is still out, the same floor is evidence.
    const t2 = tracker();
    t2.update(info(two), 0);
    t2.update(info({ ...two, delivered: 3, redelivered: 1 }), 500);
    expect(t2.update(info({ ...two, delivered: 3, redelivered: 1 }), 1501)).toMatchObject({ stalled: true, stallEvidence: "redelivery" });
  });

  it("a lone crashed worker (nobody pulls, so nothing is redelivered) is stalled only past a declared lease", () => {
    const none = tracker();
    const declared = tracker(2 * ACK_WAIT);
    for (let at = 0; at <= 10 * ACK_WAIT; at += 500) {
      expect(none.update(info(holding), at).stalled).toBe(false);
      expect(declared.update(info(holding), at)).toMatchObject({ stalled: at > 2 * ACK_WAIT, leaseMs: 2 * ACK_WAIT });
    }
  });

  it("a redelivery counted by the sample that moved the floor is not evidence for the new stretch", () => {
    const t = tracker();
    t.update(info({ ackPending: 2, delivered: 2, deliveredStreamSeq: 2, ackFloor: 0, ackFloorStreamSeq: 0 }), 0);
    // Between the samples: message 1 redelivered and acked; message 2 still in flight.
    t.update(info({ ackPending: 1, delivered: 3, deliveredStreamSeq: 2, ackFloor: 1, ackFloorStreamSeq: 1 }), 500);
    for (let at = 1000; at <= 5000; at += 500) {
      expect(t.update(info({ ackPending: 1, delivered: 3, deliveredStreamSeq: 2, ackFloor: 1, ackFloorStreamSeq: 1 }), at).stalled).toBe(false);
    }
  });

  it("a moved floor forgets the redelivery seen during the previous stretch", () => {
    const t = tracker();
    t.update(info({ ackPending: 2, delivered: 2, deliveredStreamSeq: 2 }), 0);
    t.update(info({ ackPending: 2, delivered: 3, deliveredStreamSeq: 2 }), 500); // a redelivery, floor flat
    t.update(info({ ackPending: 1, delivered: 3, deliveredStreamSeq: 2, ackFloor: 1, ackFloorStreamSeq: 1 }), 1000); // floor moves
    expect(t.update(info({ ackPending: 1, delivered: 3, deliveredStreamSeq: 2, ackFloor: 1, ackFloorStreamSeq: 1 }), 2600).stalled).toBe(false);
  });

  it("without any redelivery and without a declared lease, a flat floor is never a stall, however long", () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 1, max: 100_000 }), { minLength: 1, maxLength: 50 }), fc.integer({ min: 1, max: 5 }), (gaps, inFlight) => {
        const t = tracker();
        let at = 0;
        for (const gap of gaps) {
          at += gap;
          const s = t.update(info({ ...holding, ackPending: inFlight, delivered: inFlight, deliveredStreamSeq: inFlight }), at);
          expect(s.stalled).toBe(false);
        }
      }),
    );
  });
});

describe("ConsumerHealthTracker: a paused consumer", () => {
  it("is never stalled nor backlogGrowing while paused; flat time and the backlog window start again after the pause", () => {
    const t = tracker(0, 3);
    const pausedUntil = 60_000;
    const seen = [];
    // Paused from the start, one message held past any lease, the backlog rising.
    for (let i = 0; i < 10; i++) {
      seen.push(t.update(info({ ...holding, pending: 10 * i, paused: true, pauseRemainingMs: pausedUntil - i * 1000 }), i * 1000));
    }
    expect(seen.every((s) => s.paused && !s.stalled && !s.backlogGrowing && s.ackFloorFlatMs === 0)).toBe(true);
    expect(seen.map((s) => s.pausedUntil)).toEqual(seen.map(() => pausedUntil));
    // Resumed: a new stretch, a new window.
    const first = t.update(info({ ...holding, pending: 100 }), 10_000);
    expect(first).toMatchObject({ paused: false, pausedUntil: undefined, ackFloorFlatMs: 0, stalled: false, backlogGrowing: false });
    expect(t.update(info({ ...holding, pending: 110 }), 10_500)).toMatchObject({ stalled: false, backlogGrowing: false, ackFloorFlatMs: 500 });
    expect(t.update(info({ ...holding, pending: 120 }), 11_001)).toMatchObject({ stalled: true, stallEvidence: "lease", backlogGrowing: true });
  });

  it("a redelivery seen before a pause is forgotten by it", () => {
    const t = tracker();
    t.update(info(holding), 0);
    t.update(info(redelivered), 500);
    t.update(info({ ...redelivered, paused: true }), 1000);
    expect(t.update(info(redelivered), 1600).stalled).toBe(false);
    expect(t.update(info(redelivered), 2500).stalled).toBe(false);
  });

  it("falls back to the config's pause_until when pause_remaining is absent", () => {
    const s = tracker().update(info({ paused: true, pauseUntilMs: 123_456 }), 1000);
    expect(s).toMatchObject({ paused: true, pausedUntil: 123_456 });
  });
});

describe("readConsumerInfo: pause fields as a 2.15 server sends them", () => {
  // The shape of a 2.15.1 consumer-info response for a consumer created with pause_until.
  const paused = {
    type: "io.nats.jetstream.api.v1.consumer_info_response",
    stream_name: "P",
    name: "w",
    created: "2026-12-01T08:22:48.867794229Z",
    config: {
      durable_name: "w",
      name: "w",
      deliver_policy: "all",
      ack_policy: "explicit",
      ack_wait: 1_000_000_000,
      max_deliver: -1,
      replay_policy: "instant",
      max_waiting: 512,
      max_ack_pending: 1000,
      num_replicas: 0,
      metadata: { "_nats.level": "5", "_nats.req.level": "1", "_nats.ver": "2.15.1" },
      pause_until: "2026-12-01T08:23:48.867Z",
    },
    delivered: { consumer_seq: 0, stream_seq: 0 },
    ack_floor: { consumer_seq: 0, stream_seq: 0 },
    num_ack_pending: 0,
    num_redelivered: 0,
    num_waiting: 0,
    num_pending: 3,
    paused: true,
    pause_remaining: 59_996_620_518,
    ts: "2026-12-01T08:22:48.870378711Z",
  };

  it("reads paused, pause_remaining (ns → ms) and pause_until", () => {
    expect(readConsumerInfo(paused)).toMatchObject({
      paused: true,
      pauseRemainingMs: 59_996.620518,
      pauseUntilMs: Date.parse("2026-12-01T08:23:48.867Z"),
      pending: 3,
      ackWaitMs: 1000,
    });
    const s = tracker().update(readConsumerInfo(paused), 1_000_000);
    expect(s).toMatchObject({ paused: true, pausedUntil: 1_000_000 + 59_997 });
  });

  it("a resumed consumer (no paused field, no pause_until) is not paused", () => {
    const { paused: _p, pause_remaining: _r, ...resumed } = paused;
    const { pause_until: _u, ...config } = paused.config;
    expect(readConsumerInfo({ ...resumed, config })).toMatchObject({ paused: false, pauseRemainingMs: undefined, pauseUntilMs: undefined });
  });

  it("a pause_until in the past without paused: true (the pause ended) is not paused", () => {
    const { paused: _p, pause_remaining: _r, ...ended } = paused;
    expect(readConsumerInfo(ended)).toMatchObject({ paused: false, pauseUntilMs: undefined });
  });

  it("malformed pause fields are read as absent, never thrown", () => {
    expect(readConsumerInfo({ ...paused, paused: "yes" })).toMatchObject({ paused: false });
    expect(readConsumerInfo({ ...paused, pause_remaining: "soon", config: { ...paused.config, pause_until: 5 } })).toMatchObject({
      paused: true,
      pauseRemainingMs: undefined,
      pauseUntilMs: undefined,
    });
    expect(readConsumerInfo({ ...paused, pause_remaining: -5 })).toMatchObject({ pauseRemainingMs: undefined });
  });
});
