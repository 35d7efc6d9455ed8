import { describe, expect, it } from "vitest";
import {
  COALESCE_MS,
  JOIN_MAX_MS,
  MAX_TIMER_DELAY_MS,
  Scheduler,
  joinWindowMs,
  timerDelay,
  type Clock,
  type Cohort,
  type ScheduledTask,
  type SchedulerEntry,
} from "../../../src/lease/scheduler.js";
import { ManualClock } from "../../helpers/fakes.js";

function task(log: string[], name: string, cohort?: Cohort): ScheduledTask & { name: string } {
  return { name, cohort, run: () => void log.push(name) };
}

describe("Scheduler", () => {
  it("runs due tasks in order, moves a rescheduled one, and disarms when empty", () => {
    const clock = new ManualClock();
    const s = new Scheduler(clock);
    const t0 = clock.now();
    const log: string[] = [];
    const a = task(log, "a");
    const b = task(log, "b");
    const c = task(log, "c");
    s.schedule(a, t0 + 3000);
    s.schedule(b, t0 + 2000);
    s.schedule(c, t0 + 4000);
    s.schedule(c, t0 + 1500); // earlier now
    expect(s.size).toBe(3);
    expect(clock.pendingTimers).toBe(1);
    clock.advance(2500);
    expect(log).toEqual(["c", "b"]);
    expect(s.has(a) && !s.has(b) && !s.has(c)).toBe(true);
    s.cancel(a);
    expect(s.size).toBe(0);
    expect(s.armed).toBe(false);
    expect(clock.pendingTimers).toBe(0);
    clock.advance(10_000);
    expect(log).toEqual(["c", "b"]);
  });

  it("a task known to one scheduler is not known to another", () => {
    const s1 = new Scheduler(new ManualClock());
    const s2 = new Scheduler(new ManualClock());
    const t = task([], "t");
    s1.schedule(t, 5000);
    expect(s1.has(t)).toBe(true);
    expect(s2.has(t)).toBe(false);
    s2.cancel(t); // not there: nothing happens
    expect(s1.has(t)).toBe(true);
    s1.cancel(t);
    expect(s1.has(t)).toBe(false);
  });

  describe("regression: a due time further away than setTimeout holds never makes the timer spin", () => {
    /** A ManualClock that records every delay it is asked to arm. */
    function recording(): { clock: ManualClock & Clock; delays: number[] } {
      const clock = new ManualClock();
      const delays: number[] = [];
      const setTimer = clock.setTimer.bind(clock);
      clock.setTimer = (fn: () => void, ms: number) => {
        delays.push(ms);
        return setTimer(fn, ms);
      };
      return { clock, delays };
    }

    it("a due time 2^40 ms away arms one timer no longer than 2^31 - 1 ms, and the task runs at its due time", () => {
      const { clock, delays } = recording();
      const s = new Scheduler(clock);
      const due = clock.now() + 2 ** 40;
      const runs: Array<[number, number]> = [];
      s.schedule({ run: (now, d) => void runs.push([now, d]) }, due);
      expect(delays).toHaveLength(1);
      expect(delays[0]).toBeLessThanOrEqual(2 ** 31 - 1);
      expect(clock.pendingTimers).toBe(1);

      // Nothing spins while waiting: no new timer in ten seconds.
      clock.advance(10_000);
      expect(delays).toHaveLength(1);
      expect(runs).toEqual([]);

      clock.advance(due - clock.now());
      expect(runs).toEqual([[due, due]]);
      // One re-arm per 2^31 - 1 ms, never more.
      expect(delays.length).toBeLessThanOrEqual(Math.ceil(2 ** 40 / MAX_TIMER_DELAY_MS) + 1);
      expect(Math.max(...delays)).toBeLessThanOrEqual(MAX_TIMER_DELAY_MS);
      expect(s.size).toBe(0);
      expect(clock.pendingTimers).toBe(0);
    });

    it("an earlier task scheduled behind a clamped timer still runs on time", () => {
      const { clock } = recording();
      const s = new Scheduler(clock);
      const log: string[] = [];
      s.schedule(task(log, "far"), clock.now() + 2 ** 40);
      s.schedule(task(log, "near"), clock.now() + 5000);
      clock.advance(5000);
      expect(log).toEqual(["near"]);
      expect(clock.pendingTimers).toBe(1);
    });

    it("NaN and Infinity due times never run and arm at most one long timer", () => {
      const { clock, delays } = recording();
      const s = new Scheduler(clock);
      const log: string[] = [];
      s.schedule(task(log, "nan"), Number.NaN);
      s.schedule(task(log, "inf"), Number.POSITIVE_INFINITY);
      expect(delays.every((d) => d === MAX_TIMER_DELAY_MS)).toBe(true);
      clock.advance(MAX_TIMER_DELAY_MS * 3);
      expect(log).toEqual([]);
      expect(delays.length).toBeLessThanOrEqual(4);
      expect(clock.pendingTimers).toBe(1);
    });

    it("timerDelay clamps what setTimeout cannot hold", () => {
      expect(timerDelay(-5)).toBe(0);
      expect(timerDelay(0)).toBe(0);
      expect(timerDelay(1500)).toBe(1500);
      expect(timerDelay(2 ** 31)).toBe(2 ** 31 - 1);
      expect(timerDelay(Number.POSITIVE_INFINITY)).toBe(2 ** 31 - 1);
      expect(timerDelay(Number.NaN)).toBe(2 ** 31 - 1);
    });
  });

  describe("a task that may run early joins a tick that runs anyway", () => {
    it("a head task due within its earlyMs runs in the tick; one beyond it, or without earlyMs past COALESCE_MS, waits for its own", () => {
      const clock = new ManualClock();
      const s = new Scheduler(clock);
      const t0 = clock.now();
      const log: string[] = [];
      const early = (name: string): ScheduledTask => ({ ...task(log, name), earlyMs: 100 });
      s.schedule(task(log, "a"), t0 + 1000);
      s.schedule(early("joins"), t0 + 1080);
      s.schedule(early("too far"), t0 + 1150);
      clock.advance(1000);
      expect(log).toEqual(["a", "joins"]);
      s.schedule(task(log, "b"), t0 + 1140);
      s.schedule(task(log, "plain"), t0 + 1140 + COALESCE_MS + 10);
      clock.advance(140);
      expect(log).toEqual(["a", "joins", "b", "too far"]);
      clock.advance(COALESCE_MS + 10);
      expect(log).toEqual(["a", "joins", "b", "too far", "plain"]);
    });

    it("joinWindowMs: a tenth of the interval, at least COALESCE_MS, at most JOIN_MAX_MS", () => {
      expect(joinWindowMs(1)).toBe(COALESCE_MS);
      expect(joinWindowMs(100)).toBe(COALESCE_MS);
      expect(joinWindowMs(500)).toBe(50);
      expect(joinWindowMs(1000)).toBe(JOIN_MAX_MS);
      expect(joinWindowMs(3_600_000)).toBe(JOIN_MAX_MS);
    });
  });

  describe("tasks of one cohort due in the same tick", () => {
    /** A scheduler on a manual clock, and a cohort that records the tasks each call ran (and can throw). */
    function setup(fail = false) {
      const clock = new ManualClock();
      const calls: string[][] = [];
      const cohort: Cohort = {
        runAll(due: readonly SchedulerEntry[], from: number, to: number): void {
          calls.push(due.slice(from, to).map((e) => (e.task as ScheduledTask & { name: string }).name));
          if (fail) throw new Error("cohort failed");
        },
      };
      return { clock, s: new Scheduler(clock), t0: clock.now(), calls, log: [] as string[], cohort };
    }

    it("runs consecutive members in one call, a lone member and a task without a cohort by `run`", () => {
      const { clock, s, t0, calls, log, cohort } = setup();
      s.schedule(task(log, "a", cohort), t0 + 1000);
      s.schedule(task(log, "b", cohort), t0 + 1001);
      s.schedule(task(log, "c", cohort), t0 + 1002);
      s.schedule(task(log, "plain"), t0 + 1003);
      s.schedule(task(log, "d", cohort), t0 + 1004);
      s.schedule(task(log, "later", cohort), t0 + 9000);
      clock.advance(1500);
      expect(calls).toEqual([["a", "b", "c"]]);
      expect(log).toEqual(["plain", "d"]);
      expect(s.size).toBe(1);
    });

    it("a cohort that throws stops neither the tasks after it nor the timer", () => {
      const { clock, s, t0, calls, log, cohort } = setup(true);
      s.schedule(task(log, "a", cohort), t0 + 1000);
      s.schedule(task(log, "b", cohort), t0 + 1001);
      s.schedule(task(log, "after"), t0 + 1002);
      s.schedule(task(log, "next tick"), t0 + 5000);
      clock.advance(1500);
      expect(calls).toEqual([["a", "b"]]);
      expect(log).toEqual(["after"]);
      clock.advance(5000);
      expect(log).toEqual(["after", "next tick"]);
    });
  });
});
