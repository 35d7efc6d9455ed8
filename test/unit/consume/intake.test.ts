/**
 * The intake's batches: one delivery per stream sequence (the latest), in arrival order, and
 * each message's refresh time (its arrival, with heartbeats off).
 */
import { describe, expect, it } from "vitest";
import { Intake } from "../../../src/consume/intake.js";
import { fakeMsg } from "../../helpers/fakes.js";
import type { JsMsg } from "@nats-io/jetstream";

const seqsOf = (msgs: readonly JsMsg[]): string[] => msgs.map((m) => `${m.seq}@${m.info.deliveryCount}`);

describe("Intake.take", () => {
  it("keeps every message of a batch in stream order, in arrival order, with its arrival as its refresh time", () => {
    const intake = new Intake(undefined);
    const msgs = [fakeMsg({ seq: 101, stampNanos: 11n }), fakeMsg({ seq: 102, stampNanos: 12n }), fakeMsg({ seq: 105, stampNanos: 15n })];
    msgs.forEach((m, i) => intake.arrive(m as unknown as JsMsg, 1000 + i));
    // Read in the order that makes a preemption between the two clock reads widen the bounds,
    // never narrow them (a whole-suite run saw 6 ms between two adjacent reads under load).
    const before = Date.now() - performance.now();
    const batch = intake.take(10);
    const mono1 = performance.now();
    const after = Date.now() - mono1;
    expect(seqsOf(batch.msgs)).toEqual(["101@1", "102@1", "105@1"]);
    // Read once at arrival, handed on with the batch for its ACKs.
    expect(batch.sequences).toEqual([101, 102, 105]);
    // With the stored messages' timestamps, which tell a reused sequence apart.
    expect(batch.stamps).toEqual([11, 12, 15]);
    // One clock offset for the whole batch: the arrivals keep their spacing exactly. The offset
    // itself is read around the call; the intake's own two reads can be preempted between them
    // too (Date.now has whole milliseconds), so it is held to 50 ms either side: a monotonic
    // time or a missing offset is off by decades.
    batch.refreshedAt.forEach((t, i) => {
      expect(t - batch.refreshedAt[0]!).toBeCloseTo(i, 6);
      expect(t).toBeGreaterThanOrEqual(before + 1000 + i - 50);
      expect(t).toBeLessThanOrEqual(after + 1000 + i + 50);
    });
    expect(intake.held).toBe(3);
    expect(intake.waiting).toBe(0);
  });

  it("takes at most max, the rest waits in order", () => {
    const intake = new Intake(undefined);
    for (let s = 1; s <= 5; s++) intake.arrive(fakeMsg({ seq: s }) as unknown as JsMsg, s);
    expect(seqsOf(intake.take(2).msgs)).toEqual(["1@1", "2@1"]);
    expect(intake.waiting).toBe(3);
    expect(seqsOf(intake.take(10).msgs)).toEqual(["3@1", "4@1", "5@1"]);
  });

  it("a message delivered twice into one batch is kept once, its latest delivery, where that delivery came", () => {
    const intake = new Intake(undefined);
    const arrivals = [fakeMsg({ seq: 5, stampNanos: 5n }), fakeMsg({ seq: 6, stampNanos: 6n }), fakeMsg({ seq: 5, deliveryCount: 2, stampNanos: 5n }), fakeMsg({ seq: 7, stampNanos: 7n })];
    arrivals.forEach((m, i) => intake.arrive(m as unknown as JsMsg, i));
    const batch = intake.take(10);
    expect(seqsOf(batch.msgs)).toEqual(["6@1", "5@2", "7@1"]);
    expect(batch.sequences).toEqual([6, 5, 7]);
    expect(batch.stamps).toEqual([6, 5, 7]);
    expect(batch.refreshedAt).toHaveLength(3);
    expect(intake.held).toBe(3);
  });

  it("distinct messages out of stream order are all kept, in arrival order", () => {
    const intake = new Intake(undefined);
    [9, 3, 7].forEach((s, i) => intake.arrive(fakeMsg({ seq: s }) as unknown as JsMsg, i));
    const batch = intake.take(10);
    expect(seqsOf(batch.msgs)).toEqual(["9@1", "3@1", "7@1"]);
    expect(batch.sequences).toEqual([9, 3, 7]);
  });

  it("messages whose sequence cannot be read are all kept", () => {
    const intake = new Intake(undefined);
    const odd = [fakeMsg({ seq: 1 }), fakeMsg({ seq: 1 })].map((m) => ({ ...m, reply: "", info: undefined }) as unknown as JsMsg);
    odd.forEach((m, i) => intake.arrive(m, i));
    const batch = intake.take(10);
    expect(batch.msgs).toEqual(odd);
    // No sequences to hand on: the ACKs read each message themselves.
    expect(batch.sequences).toBeUndefined();
    expect(batch.stamps).toBeUndefined();
  });
});

describe("Intake.dispose", () => {
  it("a message that arrives after the loop ended is neither queued nor kept alive: it is left for redelivery", () => {
    const held: JsMsg[] = [];
    let disposed = 0;
    const holding = { hold: (m: JsMsg) => void held.push(m), release: () => undefined, dispose: () => void (disposed += 1) };
    const intake = new Intake(holding as unknown as ConstructorParameters<typeof Intake>[0]);
    intake.arrive(fakeMsg({ seq: 1 }) as unknown as JsMsg, 1);
    expect(held).toHaveLength(1);
    intake.dispose();
    expect(disposed).toBe(1);
    intake.arrive(fakeMsg({ seq: 2 }) as unknown as JsMsg, 2);
    expect(held).toHaveLength(1);
    expect(intake.waiting).toBe(1);
  });
});
