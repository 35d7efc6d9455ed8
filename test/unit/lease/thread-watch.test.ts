import type { JsMsg } from "@nats-io/jetstream";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { CONTROL, createControl, publishHeadDue } from "../../../src/lease/heartbeat-thread-protocol.js";
import { Scheduler } from "../../../src/lease/scheduler.js";
import { ThreadWatch, type WatchMember } from "../../../src/lease/thread-watch.js";
import { ManualClock } from "../../helpers/fakes.js";

interface TestMember extends WatchMember {
  looks: number;
  settled: number;
  tallies: number;
  deadline: number;
}

function msg(): JsMsg & { didAck: boolean } {
  return { didAck: false } as unknown as JsMsg & { didAck: boolean };
}

function member(watch: () => ThreadWatch, msgs: (JsMsg & { didAck: boolean })[], o: { closer?: { isClosed(): unknown }; deadline?: number; tally?: "counts" | "throws" } = {}): TestMember {
  const m: TestMember = {
    intervalMs: 1000,
    slackMs: 1000,
    watchMsgs: msgs,
    closer: o.closer,
    registration: 0,
    firstDueAt: Number.NEGATIVE_INFINITY,
    watchSlots: undefined,
    looks: 0,
    settled: 0,
    tallies: 0,
    deadline: o.deadline ?? Number.POSITIVE_INFINITY,
    // As a supervision: a lease past its deadline is lost, and leaves.
    look: (now) => {
      m.looks += 1;
      if (m.deadline > now) return m.deadline;
      watch().leave(m);
      return Number.POSITIVE_INFINITY;
    },
    settledSeen: () => {
      m.settled += 1;
    },
    tally:
      o.tally === undefined
        ? undefined
        : () => {
            m.tallies += 1;
            if (o.tally === "throws") throw new Error("a sink that throws");
          },
  };
  return m;
}

// The thread's epoch clock moves with the manual one.
const EPOCH = 1.7e12;
let clockNow: () => number = () => 0;
const nowEpochMs = (): number => EPOCH + clockNow();

function setup(): { clock: ManualClock; scheduler: Scheduler; control: ReturnType<typeof createControl>; watch: ThreadWatch } {
  const clock = new ManualClock();
  clockNow = () => clock.now();
  const scheduler = new Scheduler(clock);
  const control = createControl();
  return { clock, scheduler, control, watch: ThreadWatch.of(scheduler, control, nowEpochMs) };
}

describe("ThreadWatch", () => {
  it("is one watch per scheduler and thread", () => {
    const { scheduler, control, watch } = setup();
    expect(ThreadWatch.of(scheduler, control)).toBe(watch);
    expect(ThreadWatch.of(scheduler, createControl())).not.toBe(watch);
    expect(ThreadWatch.of(new Scheduler(new ManualClock()), control)).not.toBe(watch);
  });

  it("while the thread's head is ahead, reads the deliveries and calls no member", () => {
    const { clock, scheduler, control, watch } = setup();
    const a = member(() => watch, [msg(), msg()]);
    const b = member(() => watch, [msg()]);
    watch.join(a, clock.now(), Number.POSITIVE_INFINITY);
    watch.join(b, clock.now(), Number.POSITIVE_INFINITY);
    expect(scheduler.has(watch)).toBe(true);
    for (let i = 0; i < 5; i++) {
      // The thread ticked: its next round is an interval away.
      publishHeadDue(control, nowEpochMs() + 1000);
      clock.advance(1000);
    }
    expect(a.looks + b.looks).toBe(0);
    expect(scheduler.has(watch)).toBe(true);
  });

  it("counts the rounds of the members with a metrics sink at each look that asks no member for its own, and only theirs", () => {
    const { clock, control, watch } = setup();
    const counted = member(() => watch, [msg()], { tally: "counts" });
    const throwing = member(() => watch, [msg()], { tally: "throws" });
    const plain = member(() => watch, [msg()]);
    for (const m of [throwing, counted, plain]) watch.join(m, clock.now(), Number.POSITIVE_INFINITY);
    for (let i = 0; i < 4; i++) {
      publishHeadDue(control, nowEpochMs() + 1000);
      clock.advance(1000);
    }
    // A count that throws stops neither the watch nor the other counts.
    expect([counted.tallies, throwing.tallies, counted.looks + throwing.looks + plain.looks]).toEqual([4, 4, 0]);
    // A look at everyone is each member's own (its own look counts): no count besides.
    Atomics.add(control.ints, CONTROL.LIMITS, 1);
    publishHeadDue(control, nowEpochMs() + 1000);
    clock.advance(1000);
    expect([counted.tallies, counted.looks, plain.looks]).toEqual([4, 1, 1]);
    // A member that left is counted no more.
    watch.leave(counted);
    publishHeadDue(control, nowEpochMs() + 1000);
    clock.advance(1000);
    expect([counted.tallies, throwing.tallies]).toEqual([4, 5]);
  });

  it("looks at every member once the horizon passed (the thread stopped ticking), and at the first deadline after", () => {
    const { clock, control, watch } = setup();
    const t0 = clock.now();
    const a = member(() => watch, [msg()], { deadline: t0 + 1700 });
    const b = member(() => watch, [msg()], { deadline: t0 + 1900 });
    watch.join(a, t0, Number.POSITIVE_INFINITY);
    watch.join(b, t0, Number.POSITIVE_INFINITY);
    publishHeadDue(control, nowEpochMs() + 500);
    // Horizon: head + slack = t0 + 1500; the look at +1000 is before it.
    clock.advance(1000);
    expect([a.looks, b.looks]).toEqual([0, 0]);
    clock.advance(500);
    expect([a.looks, b.looks]).toEqual([1, 1]);
    // Next at the first deadline (a's, t0 + 1700), not an interval on: a is lost then, b stays.
    clock.advance(200);
    expect([a.looks, b.looks]).toEqual([2, 2]);
    expect(watch.has(a)).toBe(false);
    clock.advance(200);
    expect(b.looks).toBe(3);
    expect(watch.has(b)).toBe(false);
  });

  it("a member with a shorter interval brings the next look forward", () => {
    const { clock, control, watch } = setup();
    const slow = Object.assign(member(() => watch, [msg()]), { intervalMs: 5000, slackMs: 5000 });
    watch.join(slow, clock.now(), Number.POSITIVE_INFINITY);
    publishHeadDue(control, nowEpochMs() + 60_000);
    const fast = member(() => watch, [msg()]);
    watch.join(fast, clock.now(), Number.POSITIVE_INFINITY);
    const settledMsg = fast.watchMsgs[0] as JsMsg & { didAck: boolean };
    settledMsg.didAck = true;
    // Seen at the fast member's interval (1 s), not the slow one's (5 s).
    clock.advance(1000);
    expect(fast.settled).toBe(1);
  });

  it("a member that joins before the thread scheduled its slot and sent its first round is bounded by its own deadline until then", () => {
    const { clock, control, watch } = setup();
    publishHeadDue(control, nowEpochMs() + 60_000);
    const t0 = clock.now();
    const a = Object.assign(member(() => watch, [msg()]), { registration: 1, firstDueAt: nowEpochMs() + 1000 });
    watch.join(a, t0, t0 + 2000);
    // Not scheduled by the thread yet: its own deadline, not the head, says when to look.
    clock.advance(1000);
    clock.advance(1000);
    expect(a.looks).toBe(1);
  });

  it("a member whose slot the thread scheduled but has not beaten yet is bounded by its own deadline; once beaten, by the head", () => {
    const { clock, control, watch } = setup();
    const b = Object.assign(member(() => watch, [msg()]), { registration: 2, firstDueAt: nowEpochMs() + 500 });
    watch.join(b, clock.now(), clock.now() + 1500);
    Atomics.store(control.ints, CONTROL.REGISTERED, 2);
    publishHeadDue(control, nowEpochMs() + 400);
    clock.advance(1600);
    expect(b.looks).toBe(1);
    // Past it (the first round went out): the head bounds it, no look at everyone.
    publishHeadDue(control, nowEpochMs() + 60_000);
    clock.advance(1000);
    clock.advance(1000);
    expect(b.looks).toBe(1);
  });

  it("looks at every member while a slot's round failed, and once for each new limit", () => {
    const { clock, control, watch } = setup();
    const a = member(() => watch, [msg()]);
    watch.join(a, clock.now(), Number.POSITIVE_INFINITY);
    publishHeadDue(control, nowEpochMs() + 60_000);
    Atomics.store(control.ints, CONTROL.FAILING, 1);
    clock.advance(1000);
    clock.advance(1000);
    expect(a.looks).toBe(2);
    Atomics.store(control.ints, CONTROL.FAILING, 0);
    Atomics.add(control.ints, CONTROL.LIMITS, 1);
    clock.advance(1000);
    expect(a.looks).toBe(3);
    clock.advance(1000);
    expect(a.looks).toBe(3);
    Atomics.store(control.ints, CONTROL.CLOSED, 1);
    clock.advance(1000);
    expect(a.looks).toBe(4);
  });

  it("looks at every member when a host connection closed", () => {
    const { clock, control, watch } = setup();
    let closed = false;
    const a = member(() => watch, [msg()], { closer: { isClosed: () => closed } });
    watch.join(a, clock.now(), Number.POSITIVE_INFINITY);
    publishHeadDue(control, nowEpochMs() + 60_000);
    clock.advance(1000);
    expect(a.looks).toBe(0);
    closed = true;
    clock.advance(1000);
    expect(a.looks).toBe(1);
  });

  it("tells a member once when the work settled one of its deliveries", () => {
    const { clock, control, watch } = setup();
    const msgs = [msg(), msg(), msg()];
    const a = member(() => watch, msgs);
    watch.join(a, clock.now(), Number.POSITIVE_INFINITY);
    publishHeadDue(control, nowEpochMs() + 60_000);
    msgs[1]!.didAck = true;
    clock.advance(1000);
    expect(a.settled).toBe(1);
    expect(a.watchSlots![1]).toBe(-1);
    clock.advance(1000);
    expect(a.settled).toBe(1);
    expect(a.looks).toBe(0);
  });

  it("keeps every delivery's place right through joins, settles and leaves (property)", () => {
    fc.assert(
      fc.property(
        fc.array(fc.oneof(fc.record({ op: fc.constant("join" as const), size: fc.integer({ min: 1, max: 4 }) }), fc.record({ op: fc.constantFrom("leave" as const, "settle" as const), at: fc.nat() })), { maxLength: 40 }),
        (ops) => {
          const { clock, scheduler, control, watch } = setup();
          publishHeadDue(control, nowEpochMs() + 3_600_000);
          const live: TestMember[] = [];
          for (const o of ops) {
            if (o.op === "join") {
              const m = member(() => watch, Array.from({ length: o.size }, msg));
              watch.join(m, clock.now(), Number.POSITIVE_INFINITY);
              live.push(m);
            } else if (live.length > 0) {
              const m = live[o.at % live.length]!;
              if (o.op === "leave") {
                watch.leave(m);
                live.splice(live.indexOf(m), 1);
                expect(m.watchSlots).toBeUndefined();
              } else {
                const i = o.at % m.watchMsgs.length;
                (m.watchMsgs[i] as JsMsg & { didAck: boolean }).didAck = true;
                const before = m.settled;
                clock.advance(1000);
                expect(m.watchSlots![i]).toBe(-1);
                expect(m.settled).toBeLessThanOrEqual(before + 1);
              }
            }
          }
          // Every unsettled delivery of a member still watched has a distinct place.
          const places = new Set<number>();
          let expected = 0;
          for (const m of live) {
            m.watchMsgs.forEach((x, i) => {
              const at = m.watchSlots![i]!;
              if ((x as JsMsg & { didAck: boolean }).didAck) expect(at).toBe(-1);
              else {
                expect(at).toBeGreaterThanOrEqual(0);
                places.add(at);
                expected += 1;
              }
            });
          }
          expect(places.size).toBe(expected);
          expect(scheduler.has(watch)).toBe(live.length > 0);
        },
      ),
      { numRuns: 200 },
    );
  });
});
