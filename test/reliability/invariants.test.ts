/**
 * The invariant checker itself, on hand-made histories: a checker that misses a violation
 * would make every scenario pass vacuously.
 */
import type { ConsumerInfo } from "@nats-io/jetstream";
import { describe, expect, it } from "vitest";
import type { AckFrame, AckKind } from "../helpers/ack-spy.js";
import { assertInvariants, checkInvariants, type Observed } from "./invariants.js";
import { DeadLetterLedger, IdempotentSink } from "./sink.js";

const S = "ORDERS";

function frame(kind: AckKind, seq: number, dc: number, at: number, payload?: string): AckFrame {
  return { kind, payload: payload ?? (kind === "+ACK" ? "" : kind), stream: S, consumer: "C", deliveryCount: dc, streamSequence: seq, withReply: false, at };
}

/** A `-NAK` asking for `ms` milliseconds, as nats.js sends it. */
function nak(seq: number, dc: number, at: number, ms: number): AckFrame {
  return frame("-NAK", seq, dc, at, `-NAK ${JSON.stringify({ delay: ms * 1_000_000 })}`);
}

function drained(lastSeq: number, over: Partial<ConsumerInfo> = {}): ConsumerInfo {
  return { num_ack_pending: 0, num_pending: 0, ack_floor: { stream_seq: lastSeq, consumer_seq: lastSeq }, ...over } as ConsumerInfo;
}

/** A sink whose records carry chosen times (the real one stamps performance.now()). */
function sinkWith(records: Array<{ op: "deliver" | "commit" | "fail"; seq: number; dc: number; at: number; worker?: string }>): IdempotentSink {
  const sink = new IdempotentSink();
  for (const r of records) {
    const key = { stream: S, seq: r.seq, dc: r.dc };
    if (r.op === "deliver") sink.deliver(key, r.worker ?? "w");
    else if (r.op === "fail") sink.fail(key, r.worker ?? "w", "temporary");
    else sink.commit(key, r.worker ?? "w");
    const list = r.op === "deliver" ? sink.deliveries : r.op === "fail" ? sink.failures : sink.attempts;
    (list[list.length - 1] as { at: number }).at = r.at;
  }
  return sink;
}

function observe(over: Partial<Observed>): Observed {
  return { stream: S, published: [1, 2], sink: new IdempotentSink(), frames: [], consumer: drained(2), unhandled: [], ...over };
}

describe("the invariant checker", () => {
  it("passes a clean history and counts it", () => {
    const sink = sinkWith([
      { op: "deliver", seq: 1, dc: 1, at: 1 },
      { op: "commit", seq: 1, dc: 1, at: 10 },
      { op: "deliver", seq: 2, dc: 1, at: 1 },
      { op: "commit", seq: 2, dc: 1, at: 10 },
    ]);
    const frames = [frame("+WPI", 1, 1, 5), frame("+WPI", 2, 1, 5), frame("+ACK", 1, 1, 11), frame("+ACK", 2, 1, 11)];
    const report = checkInvariants(observe({ sink, frames }));
    expect(report.violations).toEqual([]);
    expect(report.counts).toMatchObject({ published: 2, committed: 2, commitAttempts: 2, duplicateCommits: 0, acks: 2, beats: 2, redeliveries: 0 });
    expect(() => assertInvariants(report, "clean")).not.toThrow();
  });

  it("reports a lost message with its history", () => {
    const sink = sinkWith([{ op: "deliver", seq: 1, dc: 1, at: 1 }, { op: "commit", seq: 1, dc: 1, at: 2 }, { op: "deliver", seq: 2, dc: 1, at: 1 }]);
    const report = checkInvariants(observe({ sink, frames: [nak(2, 1, 3, 1000)] }));
    expect(report.violations).toEqual(["seq 2 lost: neither committed nor dead-lettered (deliveries [dc1@w], failures [], frames [-NAK@dc1])"]);
  });

  it("reports an +ACK that arrived before the commit of the same delivery, and one with no commit at all", () => {
    const sink = sinkWith([
      { op: "commit", seq: 1, dc: 1, at: 20 },
      { op: "commit", seq: 2, dc: 1, at: 5 },
    ]);
    // seq 2: the ACK of delivery 2 is not justified by the commit of delivery 1.
    const frames = [frame("+ACK", 1, 1, 15), frame("+ACK", 2, 2, 30)];
    const report = checkInvariants(observe({ sink, frames }));
    expect(report.violations).toEqual([
      "seq 1 dc 1: +ACK received at 15.0 ms, 5.0 ms before its commit by w was recorded at 20.0 ms",
      "seq 2 dc 2: +ACK received at 30.0 ms but that delivery was never committed or dead-lettered",
    ]);
  });

  it("accepts a dead-letter copy confirmed before the +ACK, and reports a message both committed and dead-lettered", () => {
    const ledger = new DeadLetterLedger();
    ledger.records.push({ stream: S, seq: 1, dc: 1, at: 4 }, { stream: S, seq: 2, dc: 1, at: 4 });
    const sink = sinkWith([{ op: "commit", seq: 2, dc: 1, at: 3 }]);
    const report = checkInvariants(observe({ sink, deadLetters: ledger, frames: [frame("+ACK", 1, 1, 5)] }));
    expect(report.violations).toEqual(["seq 2 both committed (dc 1) and dead-lettered (dc 1)"]);
    expect(report.counts.deadLettered).toBe(2);
  });

  it("reports a +WPI after the final frame of its delivery, but not one of an older delivery", () => {
    const sink = sinkWith([
      { op: "commit", seq: 1, dc: 1, at: 1 },
      { op: "commit", seq: 2, dc: 2, at: 1 },
    ]);
    const frames = [frame("+ACK", 1, 1, 2), frame("+WPI", 1, 1, 3), frame("+ACK", 2, 2, 2), frame("+WPI", 2, 1, 4)];
    const report = checkInvariants(observe({ sink, frames }));
    expect(report.violations).toEqual(["seq 1 dc 1: 1 +WPI after its +ACK at 2.0 ms (first at 3.0 ms)"]);
    expect(report.counts.staleBeats).toBe(1);
  });

  it("reports a consumer that is not drained, an unexpected +TERM and unhandled rejections", () => {
    const sink = sinkWith([{ op: "commit", seq: 1, dc: 1, at: 1 }, { op: "commit", seq: 2, dc: 1, at: 1 }]);
    const report = checkInvariants(
      observe({
        sink,
        frames: [frame("+TERM", 2, 1, 2)],
        consumer: drained(1, { num_ack_pending: 1, num_pending: 3 }),
        unhandled: [new TypeError("boom"), "plain"],
      }),
    );
    expect(report.violations).toEqual([
      "seq 2 dc 1: unexpected +TERM",
      "consumer: 1 message(s) still awaiting an ack",
      "consumer: 3 message(s) never delivered",
      "consumer: ack floor at stream seq 1, last published 2",
      "unhandled rejection: TypeError: boom",
      "unhandled rejection: plain",
    ]);
    const { consumer: _omitted, ...withoutInfo } = observe({ sink });
    expect(checkInvariants(withoutInfo).violations).toEqual([
      "consumer info was not read: the drained-consumer check did not run",
    ]);
  });

  it("judges redeliveries by the scenario's causes and counts duplicates", () => {
    const sink = sinkWith([
      { op: "deliver", seq: 1, dc: 1, at: 1, worker: "a" },
      { op: "commit", seq: 1, dc: 1, at: 2, worker: "a" },
      { op: "deliver", seq: 1, dc: 2, at: 3, worker: "b" },
      { op: "commit", seq: 1, dc: 2, at: 4, worker: "b" },
      { op: "deliver", seq: 2, dc: 3, at: 3, worker: "b" },
      { op: "commit", seq: 2, dc: 3, at: 4, worker: "b" },
    ]);
    const report = checkInvariants(observe({ sink, explainRedelivery: (seq) => (seq === 1 ? "killed" : undefined) }));
    expect(report.violations).toEqual([
      "seq 2 delivered again (dc 3) with no recorded cause (deliveries [dc3@b], failures [], frames [])",
    ]);
    expect(report.redeliveries).toEqual([
      { seq: 1, dc: 2, cause: "killed" },
      { seq: 2, dc: 3, cause: undefined },
    ]);
    expect(report.duplicates).toEqual([{ seq: 1, attempts: ["dc1@a", "dc2@b"] }]);
    expect(report.counts).toMatchObject({ committed: 2, commitAttempts: 3, duplicateCommits: 1, redeliveries: 2, maxDeliveryCount: 3 });
    expect(() => assertInvariants(report, "x")).toThrow(/x: 1 invariant violation\(s\)\n {2}- seq 2 delivered again/);
  });

  describe("rule 7: nothing ends on its last allowed delivery without a final frame or a copy", () => {
    // seq 1 failed on dc 1 and 2 and committed on dc 3 (MaxDeliver 3): fine. seq 2 failed on
    // dc 1 to 3 and got nothing on dc 3: the server will never deliver it again.
    const history = [
      { op: "deliver" as const, seq: 1, dc: 1, at: 1 },
      { op: "fail" as const, seq: 1, dc: 1, at: 2 },
      { op: "deliver" as const, seq: 1, dc: 2, at: 1000 },
      { op: "fail" as const, seq: 1, dc: 2, at: 1001 },
      { op: "deliver" as const, seq: 1, dc: 3, at: 3000 },
      { op: "commit" as const, seq: 1, dc: 3, at: 3001 },
      { op: "deliver" as const, seq: 2, dc: 1, at: 1 },
      { op: "deliver" as const, seq: 2, dc: 2, at: 1000 },
      { op: "deliver" as const, seq: 2, dc: 3, at: 3000 },
      { op: "fail" as const, seq: 2, dc: 3, at: 3001 },
    ];
    const frames = [nak(1, 1, 3, 500), nak(1, 2, 1002, 1000), frame("+ACK", 1, 3, 3002), nak(2, 1, 3, 500), nak(2, 2, 1002, 1000)];

    it("reports a sequence that reached MaxDeliver with neither +ACK/+TERM nor a copy", () => {
      const report = checkInvariants(observe({ sink: sinkWith(history), frames, maxDeliver: 3 }));
      expect(report.violations).toEqual([
        "seq 2 lost: neither committed nor dead-lettered (deliveries [dc1@w dc2@w dc3@w], failures [temporary@dc3], frames [-NAK@dc1 -NAK@dc2])",
        "seq 2 ended on its last allowed delivery (dc 3, MaxDeliver 3) with neither +ACK/+TERM nor a dead-letter copy (deliveries [dc1@w dc2@w dc3@w], failures [temporary@dc3], frames [-NAK@dc1 -NAK@dc2])",
      ]);
    });

    it("accepts a +TERM, a dead-letter copy, or deliveries still left", () => {
      const termed = checkInvariants(observe({ sink: sinkWith(history), frames: [...frames, frame("+TERM", 2, 3, 3002)], maxDeliver: 3, allowTerm: true }));
      expect(termed.violations).toEqual(["seq 2 lost: neither committed nor dead-lettered (deliveries [dc1@w dc2@w dc3@w], failures [temporary@dc3], frames [-NAK@dc1 -NAK@dc2 +TERM@dc3])"]);
      const ledger = new DeadLetterLedger();
      ledger.records.push({ stream: S, seq: 2, dc: 3, at: 3002 });
      const copied = checkInvariants(observe({ sink: sinkWith(history), frames: [...frames, frame("+ACK", 2, 3, 3003)], deadLetters: ledger, maxDeliver: 3 }));
      expect(copied.violations).toEqual([]);
      // MaxDeliver 4, or unlimited: dc 3 was not the last delivery, so rule 7 has nothing to say.
      for (const maxDeliver of [4, -1, 0]) {
        const report = checkInvariants(observe({ sink: sinkWith(history), frames, maxDeliver }));
        expect(report.violations.filter((v) => v.includes("last allowed delivery"))).toEqual([]);
      }
    });

    it("a sequence exhausted on purpose passes, counted, but only once it reached MaxDeliver", () => {
      const report = checkInvariants(observe({ sink: sinkWith(history), frames, maxDeliver: 3, exhaustedOnPurpose: (seq) => seq === 2 }));
      expect(report.violations).toEqual([]);
      expect(report.counts.exhausted).toBe(1);
      const early = checkInvariants(observe({ sink: sinkWith(history), frames, maxDeliver: 5, exhaustedOnPurpose: (seq) => seq === 2 }));
      expect(early.violations).toEqual([
        "seq 2 lost: neither committed nor dead-lettered (deliveries [dc1@w dc2@w dc3@w], failures [temporary@dc3], frames [-NAK@dc1 -NAK@dc2])",
        "seq 2 declared exhausted on purpose but its last delivery seen is dc 3 of MaxDeliver 5",
      ]);
    });

    it("the last delivery counts from any evidence: a frame of a later delivery the sink never saw", () => {
      // seq 2 committed on dc 1, but its +ACK never arrived; the spy saw a +WPI of dc 3.
      const sink = sinkWith([
        { op: "commit", seq: 1, dc: 1, at: 1 },
        { op: "commit", seq: 2, dc: 1, at: 1 },
      ]);
      const report = checkInvariants(observe({ sink, frames: [frame("+ACK", 1, 1, 2), frame("+WPI", 2, 3, 9000)], maxDeliver: 3 }));
      expect(report.violations).toEqual([
        "seq 2 ended on its last allowed delivery (dc 3, MaxDeliver 3) with neither +ACK/+TERM nor a dead-letter copy (deliveries [], failures [], frames [+WPI@dc3])",
      ]);
    });
  });

  describe("rule 8: no retry faster than the NAK asked, and no bare NAK", () => {
    const committedOn = (dc: number, at: number) => [
      { op: "deliver" as const, seq: 1, dc: 1, at: 1 },
      { op: "fail" as const, seq: 1, dc: 1, at: 5 },
      { op: "deliver" as const, seq: 1, dc, at },
      { op: "commit" as const, seq: 1, dc, at: at + 1 },
      { op: "commit" as const, seq: 2, dc: 1, at: 1 },
    ];
    const acks = (dc: number, at: number) => [frame("+ACK", 1, dc, at + 2), frame("+ACK", 2, 1, 2)];

    it("passes a redelivery that came after the delay, and counts the margin", () => {
      const report = checkInvariants(observe({ sink: sinkWith(committedOn(2, 1010)), frames: [nak(1, 1, 10, 1000), ...acks(2, 1010)] }));
      expect(report.violations).toEqual([]);
      expect(report.counts).toMatchObject({ nakRetries: 1, minNakMarginMs: 0 });
    });

    it("reports a redelivery that came before the NAK's delay (beyond the tolerance)", () => {
      const report = checkInvariants(observe({ sink: sinkWith(committedOn(2, 600)), frames: [nak(1, 1, 10, 1000), ...acks(2, 600)] }));
      expect(report.violations).toEqual(["seq 1: delivery 2 seen 590.0 ms after the -NAK of delivery 1 at 10.0 ms, which asked for 1000.0 ms"]);
      // Within the tolerance: the spy's clock and the server's differ slightly.
      const close = checkInvariants(observe({ sink: sinkWith(committedOn(2, 980)), frames: [nak(1, 1, 10, 1000), ...acks(2, 980)] }));
      expect(close.violations).toEqual([]);
      expect(checkInvariants(observe({ sink: sinkWith(committedOn(2, 980)), frames: [nak(1, 1, 10, 1000), ...acks(2, 980)], nakToleranceMs: 10 })).violations).toHaveLength(1);
    });

    it("an early redelivery is seen by any evidence of it: a +WPI of the next delivery the sink had not recorded yet", () => {
      const report = checkInvariants(observe({ sink: sinkWith(committedOn(2, 1500)), frames: [nak(1, 1, 10, 1000), frame("+WPI", 1, 2, 300), ...acks(2, 1500)] }));
      expect(report.violations).toEqual(["seq 1: delivery 2 seen 290.0 ms after the -NAK of delivery 1 at 10.0 ms, which asked for 1000.0 ms"]);
    });

    it("reports a bare NAK (and a zero delay) unless the scenario allows it", () => {
      const frames = [frame("-NAK", 1, 1, 10), ...acks(2, 12)];
      const report = checkInvariants(observe({ sink: sinkWith(committedOn(2, 12)), frames }));
      expect(report.violations).toEqual(["seq 1 dc 1: bare -NAK at 10.0 ms (immediate redelivery: a failing sink retries as fast as it fails)"]);
      const zero = [frame("-NAK", 1, 1, 10, '-NAK {"delay":0}'), ...acks(2, 12)];
      expect(checkInvariants(observe({ sink: sinkWith(committedOn(2, 12)), frames: zero })).violations).toHaveLength(1);
      expect(checkInvariants(observe({ sink: sinkWith(committedOn(2, 12)), frames, allowBareNak: true })).violations).toEqual([]);
    });

    it("ignores a delivery seen before the NAK (it was not caused by it) and a NAK never followed by a delivery", () => {
      // dc 2 arrived (AckWait) before the late NAK of dc 1.
      const report = checkInvariants(observe({ sink: sinkWith(committedOn(2, 5)), frames: [nak(1, 1, 10, 1000), ...acks(2, 5)] }));
      expect(report.violations).toEqual([]);
      expect(report.counts).toMatchObject({ nakRetries: 0, minNakMarginMs: -1 });
    });
  });
});
