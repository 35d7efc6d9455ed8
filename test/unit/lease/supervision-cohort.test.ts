import { describe, expect, it } from "vitest";
import type { RoundResult } from "../../../src/lease/heartbeat-round.js";
import type { Clock, SchedulerEntry } from "../../../src/lease/scheduler.js";
import { supervisionCohort } from "../../../src/lease/supervision-cohort.js";

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
