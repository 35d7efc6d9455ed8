import { describe, expect, it } from "vitest";
import { Scheduler, type ScheduledTask } from "../../../src/lease/scheduler.js";
import { ManualClock } from "../../helpers/fakes.js";

function task(log: string[], name: string): ScheduledTask {
  return { run: () => void log.push(name) };
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
});
