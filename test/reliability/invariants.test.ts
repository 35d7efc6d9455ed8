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

function frame(kind: AckKind, seq: number, dc: number, at: number): AckFrame {
  return { kind, payload: kind === "+ACK" ? "" : kind, stream: S, consumer: "C", deliveryCount: dc, streamSequence: seq, withReply: false, at };
}

function drained(lastSeq: number, over: Partial<ConsumerInfo> = {}): ConsumerInfo {
  return { num_ack_pending: 0, num_pending: 0, ack_floor: { stream_seq: lastSeq, consumer_seq: lastSeq }, ...over } as ConsumerInfo;
}

/** A sink whose records carry chosen times (the real one stamps performance.now()). */
function sinkWith(records: Array<{ op: "deliver" | "commit"; seq: number; dc: number; at: number; worker?: string }>): IdempotentSink {
  const sink = new IdempotentSink();
  for (const r of records) {
    const key = { stream: S, seq: r.seq, dc: r.dc };
    if (r.op === "deliver") sink.deliver(key, r.worker ?? "w");
    else sink.commit(key, r.worker ?? "w");
    const list = r.op === "deliver" ? sink.deliveries : sink.attempts;
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
    const report = checkInvariants(observe({ sink, frames: [frame("-NAK", 2, 1, 3)] }));
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
});
