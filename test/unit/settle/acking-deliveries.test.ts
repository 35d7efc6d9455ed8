/**
 * The messages a loop committed whose ACK is on its way: another delivery of one is recognised
 * while the ACK is out, and for a while after a late one (held over a disconnect, asked again).
 */
import fc from "fast-check";
import { afterEach, describe, expect, it, vi } from "vitest";
import { AckingDeliveries, CONFIRMED_KEPT_MAX, CONFIRMED_KEPT_MS, LATE_GRACE_MS, UNCONFIRMED_GRACE_MS } from "../../../src/settle/acking-deliveries.js";
import { fakeMsg } from "../../helpers/fakes.js";

afterEach(() => void vi.useRealTimers());

describe("AckingDeliveries", () => {
  it("knows another delivery of a message while its ACK is out, and once answered in time", () => {
    const acking = new AckingDeliveries();
    const first = fakeMsg({ seq: 41 });
    const seqs = acking.begin([first, fakeMsg({ seq: 42 })]);
    expect(acking.has(fakeMsg({ seq: 41, deliveryCount: 2 }))).toBe(true);
    expect(acking.has(fakeMsg({ seq: 41 }))).toBe(true);
    expect(acking.has(fakeMsg({ seq: 43 }))).toBe(false);
    acking.end(seqs);
    expect(acking.size).toBe(0);
    // A leader that confirmed the ACK and died before its followers had it: the next one redelivers.
    expect(acking.has(fakeMsg({ seq: 41, deliveryCount: 2 }))).toBe(true);
    expect(acking.has(fakeMsg({ seq: 43, deliveryCount: 2 }))).toBe(false);
    expect(acking.has(fakeMsg({ seq: 43 }))).toBe(false);
  });

  it("a confirmed message delivered again as a first delivery (a new leader that lost its predecessor's deliveries) is known for the minute, the same stored message only", () => {
    vi.useFakeTimers({ toFake: ["performance"] });
    const stamp = 1_764_700_000_000_000_000n;
    const acking = new AckingDeliveries();
    acking.end(acking.begin([65, 66, 67].map((seq) => fakeMsg({ seq, stampNanos: stamp }))));
    // Seen on 2.9.10: 16 s after the confirmed ACKs, delivery count 1 again.
    vi.advanceTimersByTime(16_000);
    for (const seq of [65, 66, 67]) expect(acking.has(fakeMsg({ seq, stampNanos: stamp })), `seq ${seq}`).toBe(true);
    // A first delivery past every kept ACK (the usual case) and a reused sequence are new messages.
    expect(acking.has(fakeMsg({ seq: 68, stampNanos: stamp }))).toBe(false);
    expect(acking.has(fakeMsg({ seq: 66, stampNanos: stamp + 3_000_000_000n }))).toBe(false);
    vi.advanceTimersByTime(CONFIRMED_KEPT_MS);
    expect(acking.has(fakeMsg({ seq: 66, stampNanos: stamp }))).toBe(false);
  });

  it("finds a delivery inside a batch's bounds whatever their order, and none between or past them, with several batches out", () => {
    const acking = new AckingDeliveries();
    // Sequences out of order (a redelivery among first deliveries), as a pull can bring them.
    const a = acking.begin([9, 5, 7].map((seq) => fakeMsg({ seq })));
    const b = acking.begin([fakeMsg({ seq: 20 }), fakeMsg({ seq: 21 })], { sequences: [20, 21], stamps: [Number.NaN, Number.NaN] });
    for (const seq of [5, 7, 9]) expect(acking.has(fakeMsg({ seq, deliveryCount: 2 })), `seq ${seq}`).toBe(true);
    for (const seq of [4, 6, 8, 10, 19, 22]) expect(acking.has(fakeMsg({ seq, deliveryCount: 2 })), `seq ${seq}`).toBe(false);
    // Ids read at arrival with an unreadable timestamp match nothing, inside the bounds or not.
    expect(acking.has(fakeMsg({ seq: 20, deliveryCount: 2 }))).toBe(false);
    acking.end(a, 0, false);
    acking.end(b, 0, false);
    expect(acking.has(fakeMsg({ seq: 7, deliveryCount: 2 }))).toBe(false);
  });

  it("keeps ACKs confirmed in time for redeliveries for a minute, and at most the newest CONFIRMED_KEPT_MAX sequences", () => {
    vi.useFakeTimers({ toFake: ["performance"] });
    const acking = new AckingDeliveries();
    acking.end(acking.begin([fakeMsg({ seq: 1 })]));
    vi.advanceTimersByTime(CONFIRMED_KEPT_MS - 1_000);
    expect(acking.has(fakeMsg({ seq: 1, deliveryCount: 2 }))).toBe(true);
    vi.advanceTimersByTime(2_000);
    expect(acking.has(fakeMsg({ seq: 1, deliveryCount: 2 }))).toBe(false);
    // Beyond the cap the oldest batches go first.
    const batch = 1000;
    for (let b = 0; b * batch < CONFIRMED_KEPT_MAX + 2 * batch; b++) {
      const msgs = Array.from({ length: batch }, (_, i) => fakeMsg({ seq: 10 + b * batch + i }));
      acking.end(acking.begin(msgs));
    }
    expect(acking.has(fakeMsg({ seq: 10, deliveryCount: 2 }))).toBe(false);
    expect(acking.has(fakeMsg({ seq: 10 + CONFIRMED_KEPT_MAX + batch, deliveryCount: 2 }))).toBe(true);
  });

  it("after a late ACK keeps knowing the message for a grace period, then forgets it", () => {
    vi.useFakeTimers({ toFake: ["performance"] });
    const acking = new AckingDeliveries();
    acking.end(acking.begin([fakeMsg({ seq: 7 })]), LATE_GRACE_MS);
    expect(acking.has(fakeMsg({ seq: 7, deliveryCount: 3 }))).toBe(true);
    vi.advanceTimersByTime(4_900);
    expect(acking.has(fakeMsg({ seq: 7, deliveryCount: 3 }))).toBe(true);
    vi.advanceTimersByTime(200);
    expect(acking.has(fakeMsg({ seq: 7, deliveryCount: 3 }))).toBe(false);
    // Pruned with the next answer: nothing is kept for ever.
    acking.end(acking.begin([fakeMsg({ seq: 8 })]));
    expect(acking.size).toBe(0);
  });

  it("a late ACK the server confirmed: any delivery is known for the grace period and for the minute after", () => {
    vi.useFakeTimers({ toFake: ["performance"] });
    const acking = new AckingDeliveries();
    acking.end(acking.begin([fakeMsg({ seq: 70 }), fakeMsg({ seq: 71 })]), LATE_GRACE_MS, true);
    vi.advanceTimersByTime(LATE_GRACE_MS + 1_000);
    // Past the grace: still a committed message, a redelivery or delivered again as a first one.
    expect(acking.has(fakeMsg({ seq: 71, deliveryCount: 2 }))).toBe(true);
    expect(acking.has(fakeMsg({ seq: 71 }))).toBe(true);
    expect(acking.has(fakeMsg({ seq: 72 }))).toBe(false);
    vi.advanceTimersByTime(CONFIRMED_KEPT_MS - LATE_GRACE_MS - 2_000);
    expect(acking.has(fakeMsg({ seq: 70, deliveryCount: 4 }))).toBe(true);
    vi.advanceTimersByTime(2_000);
    expect(acking.has(fakeMsg({ seq: 70, deliveryCount: 4 }))).toBe(false);
  });

  it("a late plain ACK (held over a disconnect, never answered) is not kept past its grace", () => {
    vi.useFakeTimers({ toFake: ["performance"] });
    const acking = new AckingDeliveries();
    acking.end(acking.begin([fakeMsg({ seq: 80 })]), LATE_GRACE_MS);
    vi.advanceTimersByTime(LATE_GRACE_MS + 100);
    expect(acking.has(fakeMsg({ seq: 80, deliveryCount: 2 }))).toBe(false);
  });

  it("finds a kept sequence in a batch whose sequences are out of order, and not one between two batches", () => {
    const acking = new AckingDeliveries();
    acking.end(acking.begin([30, 12, 25, 40, 18].map((seq) => fakeMsg({ seq }))));
    acking.end(acking.begin([100, 90, 95].map((seq) => fakeMsg({ seq }))));
    for (const seq of [12, 18, 25, 30, 40, 90, 95, 100]) expect(acking.has(fakeMsg({ seq, deliveryCount: 2 }))).toBe(true);
    for (const seq of [11, 13, 41, 60, 89, 96, 101]) expect(acking.has(fakeMsg({ seq, deliveryCount: 2 }))).toBe(false);
  });

  it("after an ACK the server never confirmed keeps knowing the message for a minute", () => {
    vi.useFakeTimers({ toFake: ["performance"] });
    const acking = new AckingDeliveries();
    acking.end(acking.begin([fakeMsg({ seq: 9 })]), UNCONFIRMED_GRACE_MS);
    vi.advanceTimersByTime(59_000);
    expect(acking.has(fakeMsg({ seq: 9, deliveryCount: 2 }))).toBe(true);
    vi.advanceTimersByTime(2_000);
    expect(acking.has(fakeMsg({ seq: 9, deliveryCount: 2 }))).toBe(false);
  });

  it("takes the sequences and timestamps a loop read at arrival as they are, and reads them itself when they do not match the batch", () => {
    const acking = new AckingDeliveries();
    const msgs = [fakeMsg({ seq: 200, stampNanos: 7n }), fakeMsg({ seq: 201, stampNanos: 8n })];
    const read = [200, 201];
    expect(acking.begin(msgs, { sequences: read, stamps: [7, 8] })).toBe(read);
    expect(acking.has(fakeMsg({ seq: 201, deliveryCount: 2, stampNanos: 8n }))).toBe(true);
    // Another stored message under the same sequence (a stream made again) is not known.
    expect(acking.has(fakeMsg({ seq: 201, deliveryCount: 2, stampNanos: 9n }))).toBe(false);
    const short = acking.begin(msgs, { sequences: [200], stamps: [7] });
    expect(short).toEqual([200, 201]);
    acking.end(read);
    acking.end(short);
    expect(acking.size).toBe(0);
  });

  it("counts two ACKs of one message on their way: the first answer leaves the second", () => {
    const acking = new AckingDeliveries();
    const a = acking.begin([fakeMsg({ seq: 5 })]);
    const b = acking.begin([fakeMsg({ seq: 5, deliveryCount: 2 })]);
    const c = acking.begin([fakeMsg({ seq: 6 }), fakeMsg({ seq: 7 }), fakeMsg({ seq: 8 })]);
    // One per sequence of each batch on its way.
    expect(acking.size).toBe(5);
    acking.end(c);
    expect(acking.size).toBe(2);
    acking.end(a);
    expect(acking.has(fakeMsg({ seq: 5, deliveryCount: 3 }))).toBe(true);
    acking.end(b);
    expect(acking.size).toBe(0);
  });

  it("two ACKs of one message answered the other way round: the second answer leaves the first", () => {
    const acking = new AckingDeliveries();
    const a = acking.begin([fakeMsg({ seq: 5 })]);
    const b = acking.begin([fakeMsg({ seq: 5, deliveryCount: 2 })]);
    acking.end(b, 0, false);
    expect(acking.has(fakeMsg({ seq: 5, deliveryCount: 3 }))).toBe(true);
    expect(acking.size).toBe(1);
    acking.end(a, 0, false);
    expect(acking.has(fakeMsg({ seq: 5, deliveryCount: 3 }))).toBe(false);
    expect(acking.size).toBe(0);
  });

  it("the same arrays begun twice are one entry: one answer ends it", () => {
    const acking = new AckingDeliveries();
    const msgs = [fakeMsg({ seq: 7 })];
    const ids = { sequences: [7], stamps: [0] };
    acking.begin(msgs, ids);
    const key = acking.begin(msgs, ids);
    const other = acking.begin([fakeMsg({ seq: 9 })]);
    expect(acking.size).toBe(2);
    acking.end(key, 0, false);
    expect(acking.has(fakeMsg({ seq: 7, deliveryCount: 2 }))).toBe(false);
    expect(acking.has(fakeMsg({ seq: 9, deliveryCount: 2 }))).toBe(true);
    acking.end(other, 0, false);
    expect(acking.size).toBe(0);
  });

  it("with a thousand single ACKs and a few batches on their way, knows exactly the deliveries of messages still on their way (any order of begin and end)", () => {
    // A model: the entries on their way as (sequence, stored timestamp) lists; an answer that
    // was neither confirmed nor late keeps nothing, so `has` must equal membership in the model.
    const op = fc.oneof(
      fc.record({ kind: fc.constant("begin" as const), seqs: fc.array(fc.integer({ min: 1, max: 8 }), { minLength: 1, maxLength: 3 }), stamp: fc.integer({ min: 0, max: 1 }) }),
      fc.record({ kind: fc.constant("end" as const), pick: fc.nat() }),
      fc.record({ kind: fc.constant("has" as const), seq: fc.integer({ min: 0, max: 9 }), stamp: fc.integer({ min: 0, max: 1 }) }),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 200, size: "max" }), (ops) => {
        const acking = new AckingDeliveries();
        const open: Array<{ readonly key: readonly number[]; readonly seqs: readonly number[]; readonly stamp: number }> = [];
        for (const o of ops) {
          if (o.kind === "begin") {
            const key = acking.begin(o.seqs.map((seq) => fakeMsg({ seq, stampNanos: BigInt(o.stamp) * 1_000_000n })));
            open.push({ key, seqs: o.seqs, stamp: o.stamp });
          } else if (o.kind === "end") {
            if (open.length === 0) continue;
            const [entry] = open.splice(o.pick % open.length, 1);
            acking.end(entry!.key, 0, false);
          } else {
            const expected = open.some((e) => e.stamp === o.stamp && e.seqs.includes(o.seq));
            expect(acking.has(fakeMsg({ seq: o.seq, deliveryCount: 2, stampNanos: BigInt(o.stamp) * 1_000_000n }))).toBe(expected);
          }
        }
        expect(acking.size).toBe(open.reduce((n, e) => n + e.seqs.length, 0));
      }),
      { numRuns: 300 },
    );
    // And at scale: a thousand single ACKs out, each found, the one answered no longer.
    const acking = new AckingDeliveries();
    const keys = Array.from({ length: 1000 }, (_, i) => acking.begin([fakeMsg({ seq: i + 1 })]));
    const batch = acking.begin(Array.from({ length: 100 }, (_, i) => fakeMsg({ seq: 2001 + i })));
    for (let i = 0; i < 1000; i += 97) expect(acking.has(fakeMsg({ seq: i + 1, deliveryCount: 2 }))).toBe(true);
    expect(acking.has(fakeMsg({ seq: 2050, deliveryCount: 2 }))).toBe(true);
    expect(acking.has(fakeMsg({ seq: 1500, deliveryCount: 2 }))).toBe(false);
    acking.end(keys[499]!, 0, false);
    expect(acking.has(fakeMsg({ seq: 500, deliveryCount: 2 }))).toBe(false);
    acking.end(batch, 0, false);
    expect(acking.size).toBe(999);
  });

  it("a stream made again under the same name reuses sequences: its new message is not taken for the committed one", () => {
    vi.useFakeTimers({ toFake: ["performance"] });
    const old = 1_764_700_000_000_000_000n;
    const remade = old + 3_000_000_000n;
    const acking = new AckingDeliveries();
    // Out (not yet answered): only the same stored message is known.
    const out = acking.begin([fakeMsg({ seq: 1, stampNanos: old }), fakeMsg({ seq: 2, stampNanos: old })]);
    expect(acking.has(fakeMsg({ seq: 1, deliveryCount: 2, stampNanos: old }))).toBe(true);
    expect(acking.has(fakeMsg({ seq: 1, stampNanos: remade }))).toBe(false);
    expect(acking.has(fakeMsg({ seq: 2, deliveryCount: 2, stampNanos: remade }))).toBe(false);
    // Confirmed and kept for redeliveries.
    acking.end(out);
    expect(acking.has(fakeMsg({ seq: 1, deliveryCount: 2, stampNanos: old }))).toBe(true);
    expect(acking.has(fakeMsg({ seq: 1, deliveryCount: 2, stampNanos: remade }))).toBe(false);
    // Late (held over a reconnect, answered late): the same.
    acking.end(acking.begin([fakeMsg({ seq: 3, stampNanos: old })]), LATE_GRACE_MS, true);
    expect(acking.has(fakeMsg({ seq: 3, stampNanos: old }))).toBe(true);
    expect(acking.has(fakeMsg({ seq: 3, stampNanos: remade }))).toBe(false);
    // Never confirmed: kept for its grace, still told apart.
    acking.end(acking.begin([fakeMsg({ seq: 4, stampNanos: old })]), UNCONFIRMED_GRACE_MS, false);
    expect(acking.has(fakeMsg({ seq: 4, stampNanos: old }))).toBe(true);
    expect(acking.has(fakeMsg({ seq: 4, deliveryCount: 5, stampNanos: remade }))).toBe(false);
  });

  it("after a stream is made again under a running loop, its first deliveries are not searched for among the old stream's confirmed ACKs, and the old bounds go with the old ACKs", () => {
    vi.useFakeTimers({ toFake: ["performance"] });
    const old = 1_764_700_000_000_000_000n;
    // Stamps a microsecond apart: they are compared as doubles, good to about 256 ns today.
    const US = 1_000n;
    const acking = new AckingDeliveries();
    // The old stream: 5,000 messages confirmed one by one (runEach: a batch each).
    for (let seq = 1; seq <= 5_000; seq++) acking.end(acking.begin([fakeMsg({ seq, stampNanos: old + BigInt(seq) * US })]));
    // A replay of the old stream is searched for and found.
    expect(acking.has(fakeMsg({ seq: 4_000, stampNanos: old + 4_000n * US }))).toBe(true);
    expect(acking.confirmedScans).toBe(1);
    // The stream made again: sequences restart below the old highest, stored later than any kept.
    const remade = old + 10_000_000_000n;
    for (let seq = 1; seq <= 100; seq++) {
      expect(acking.has(fakeMsg({ seq, stampNanos: remade + BigInt(seq) * US })), `seq ${seq}`).toBe(false);
      acking.end(acking.begin([fakeMsg({ seq, stampNanos: remade + BigInt(seq) * US })]));
    }
    expect(acking.confirmedScans).toBe(1);
    // A redelivery of the new stream is searched for, and found by its own timestamp only.
    expect(acking.has(fakeMsg({ seq: 50, deliveryCount: 2, stampNanos: remade + 50n * US }))).toBe(true);
    expect(acking.has(fakeMsg({ seq: 4_000, deliveryCount: 2, stampNanos: remade + 4_000n * US }))).toBe(false);
    expect(acking.confirmedScans).toBe(3);
    // Once the old stream's ACKs expire, their bounds go with them: a first delivery past the new
    // stream's kept ACKs is not searched for, though below the old stream's highest sequence.
    vi.advanceTimersByTime(CONFIRMED_KEPT_MS / 2);
    acking.end(acking.begin([fakeMsg({ seq: 101, stampNanos: remade + 101n * US })]));
    vi.advanceTimersByTime(CONFIRMED_KEPT_MS / 2 + 1);
    acking.end(acking.begin([fakeMsg({ seq: 102, stampNanos: remade + 102n * US })]));
    expect(acking.has(fakeMsg({ seq: 101, stampNanos: remade + 101n * US }))).toBe(true);
    expect(acking.confirmedScans).toBe(4);
    // An older stamp than any kept, below the old highest sequence: nothing kept is past 102.
    expect(acking.has(fakeMsg({ seq: 2_000, stampNanos: old + 2_000n * US }))).toBe(false);
    expect(acking.confirmedScans).toBe(4);
  });

  it("a sequence that was never begun is known for no delivery (its message, and so its timestamp, is unknown)", () => {
    const acking = new AckingDeliveries();
    acking.end([9], LATE_GRACE_MS, true);
    expect(acking.has(fakeMsg({ seq: 9 }))).toBe(false);
    expect(acking.has(fakeMsg({ seq: 9, deliveryCount: 2 }))).toBe(false);
  });
});

