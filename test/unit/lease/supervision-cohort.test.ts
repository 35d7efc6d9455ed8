import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { MetricNames, verifyInProgressPolicy, withInProgress, type MetricsSink } from "../../../src/index.js";
import type { RoundResult } from "../../../src/lease/heartbeat-round.js";
import { Scheduler, type Clock, type Cohort, type ScheduledTask, type SchedulerEntry } from "../../../src/lease/scheduler.js";
import { supervisionCohort } from "../../../src/lease/supervision-cohort.js";
import { ManualClock, deferred, fakeMsg } from "../../helpers/fakes.js";

const policy = (over: Record<string, unknown> = {}) =>
  verifyInProgressPolicy({ enabled: true, intervalMs: 5000, maxHeartbeats: 5, shutdownTimeoutMs: 1000, ...over }, { ackWaitMs: 30_000, source: "configured" });

/** A cohort that records the names of the tasks each call ran, and can be told to throw. */
function recordingCohort(calls: string[][], fail = false): Cohort {
  return {
    runAll(due: readonly SchedulerEntry[], from: number, to: number): void {
      calls.push(due.slice(from, to).map((e) => (e.task as ScheduledTask & { name: string }).name));
      if (fail) throw new Error("cohort failed");
    },
  };
}

function named(log: string[], name: string, cohort?: Cohort): ScheduledTask & { name: string } {
  return { name, cohort, run: () => void log.push(name) };
}

describe("Scheduler: tasks of one cohort due in the same tick", () => {
  it("runs consecutive members in one call, a lone member and a task without a cohort by `run`", () => {
    const clock = new ManualClock();
    const s = new Scheduler(clock);
    const t0 = clock.now();
    const calls: string[][] = [];
    const log: string[] = [];
    const cohort = recordingCohort(calls);
    s.schedule(named(log, "a", cohort), t0 + 1000);
    s.schedule(named(log, "b", cohort), t0 + 1001);
    s.schedule(named(log, "c", cohort), t0 + 1002);
    s.schedule(named(log, "plain", undefined), t0 + 1003);
    s.schedule(named(log, "d", cohort), t0 + 1004);
    s.schedule(named(log, "later", cohort), t0 + 9000);
    clock.advance(1500);
    expect(calls).toEqual([["a", "b", "c"]]);
    expect(log).toEqual(["plain", "d"]);
    expect(s.size).toBe(1);
  });

  it("a cohort that throws stops neither the tasks after it nor the timer", () => {
    const clock = new ManualClock();
    const s = new Scheduler(clock);
    const t0 = clock.now();
    const calls: string[][] = [];
    const log: string[] = [];
    const cohort = recordingCohort(calls, true);
    s.schedule(named(log, "a", cohort), t0 + 1000);
    s.schedule(named(log, "b", cohort), t0 + 1001);
    s.schedule(named(log, "after", undefined), t0 + 1002);
    s.schedule(named(log, "next tick", undefined), t0 + 5000);
    clock.advance(1500);
    expect(calls).toEqual([["a", "b"]]);
    expect(log).toEqual(["after"]);
    clock.advance(5000);
    expect(log).toEqual(["after", "next tick"]);
  });
});

type Step = "begin" | "send" | "complete";

/** A stand-in for a supervision: records its steps, can throw at one of them. */
function member(log: string[], name: string, opts: { throwAt?: Step; skip?: boolean } = {}) {
  const seen: { durationMs?: number; latenessMs?: number } = {};
  const task = {
    name,
    seen,
    run: () => void log.push(`${name}:run`),
    beginTick(now: number, due: number): number {
      log.push(`${name}:begin`);
      if (opts.throwAt === "begin") throw new Error("begin");
      return opts.skip ? -1 : now - due;
    },
    sendPlainRound(): RoundResult {
      log.push(`${name}:send`);
      if (opts.throwAt === "send") throw new Error("send");
      return { refreshed: "all", failed: 0, closed: false } as unknown as RoundResult;
    },
    completeTick(_r: RoundResult, _now: number, latenessMs: number, durationMs: number): void {
      log.push(`${name}:complete`);
      seen.durationMs = durationMs;
      seen.latenessMs = latenessMs;
      if (opts.throwAt === "complete") throw new Error("complete");
    },
  };
  return task;
}

/** A clock that moves 1 ms each time it is read. */
function steppingClock(): Clock {
  let t = 0;
  return { now: () => ++t, setTimer: () => 0, clearTimer: () => undefined };
}

describe("supervisionCohort", () => {
  const entries = (tasks: ReturnType<typeof member>[], due: number) => tasks.map((task) => ({ task, due }) as unknown as SchedulerEntry);

  it("sends every plain round before keeping any book, and skips a member whose tick ended early", () => {
    const log: string[] = [];
    const tasks = [member(log, "a"), member(log, "b", { skip: true }), member(log, "c")];
    supervisionCohort.runAll(entries(tasks, 100), 0, 3, 104, steppingClock());
    expect(log).toEqual(["a:begin", "b:begin", "c:begin", "a:send", "c:send", "a:complete", "c:complete"]);
    expect(tasks[0]!.seen.latenessMs).toBe(4);
  });

  it("gives each round its own send time, not the time since the tick began", () => {
    const tasks = [member([], "a"), member([], "b"), member([], "c")];
    supervisionCohort.runAll(entries(tasks, 0), 0, 3, 0, steppingClock());
    // One reading before the sends and one after each: each round spans exactly 1 ms.
    expect(tasks.map((t) => t.seen.durationMs)).toEqual([1, 1, 1]);
  });

  for (const throwAt of ["begin", "send", "complete"] as const) {
    it(`a member that throws in ${throwAt} leaves the others their whole tick`, () => {
      const log: string[] = [];
      const tasks = [member(log, "a", { throwAt }), member(log, "b")];
      expect(() => supervisionCohort.runAll(entries(tasks, 0), 0, 2, 0, steppingClock())).not.toThrow();
      expect(log.filter((l) => l.startsWith("b:"))).toEqual(["b:begin", "b:send", "b:complete"]);
      // A member whose round threw keeps no books for it, as when it runs alone.
      if (throwAt !== "complete") expect(log).not.toContain("a:complete");
    });
  }

  it("only the given range runs", () => {
    const log: string[] = [];
    const tasks = [member(log, "a"), member(log, "b"), member(log, "c"), member(log, "d")];
    supervisionCohort.runAll(entries(tasks, 0), 1, 3, 0, steppingClock());
    expect(log).toEqual(["b:begin", "c:begin", "b:send", "c:send", "b:complete", "c:complete"]);
  });
});

describe("withInProgress: batches due in the same tick", () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("every batch's +WPI leaves before any batch's round is booked, and each batch keeps its own books", async () => {
    const order: string[] = [];
    const observed: number[] = [];
    const metrics: MetricsSink = {
      addCounter: () => undefined,
      setGauge: () => undefined,
      recordObservation: (name, value) => {
        if (name !== MetricNames.IN_PROGRESS_HEARTBEAT_SECONDS) return;
        order.push("book");
        observed.push(value);
      },
    };
    const msgs = Array.from({ length: 4 }, () => fakeMsg());
    for (const m of msgs) {
      const working = m.working.bind(m);
      m.working = () => (order.push("wpi"), working());
    }
    // The third batch's write fails every beat: its failure is its own.
    msgs[2]!.failWorking = new Error("connection closed");
    const dones = msgs.map(() => deferred());
    const ps = msgs.map((m, i) => withInProgress(m, () => dones[i]!.promise, policy(), { metrics }).catch((e: unknown) => e));
    await vi.advanceTimersByTimeAsync(5000);
    expect(order).toEqual(["wpi", "wpi", "wpi", "wpi", "book", "book", "book", "book"]);
    expect(observed.every((v) => v >= 0)).toBe(true);
    expect(msgs.map((m) => m.calls.working)).toEqual([1, 1, 0, 1]);
    for (const d of dones) d.resolve();
    const results = await Promise.all(ps);
    expect(results.filter((r) => r instanceof Error)).toEqual([]);
    expect(msgs.map((m) => m.calls.working)).toEqual([1, 1, 0, 1]);
  });
});
