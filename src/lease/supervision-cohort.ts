/**
 * The supervisions that fall due in the same scheduler tick, run together: first each one's
 * tick up to its frames, then every plain round's frames in one loop, then each one's books.
 * Each batch keeps its own lease, counts, events and limit, as when it runs alone; only the
 * order across batches changes (every frame of the tick leaves before any book is kept), which
 * keeps the send loop and the bookkeeping loop each hot instead of interleaving them.
 */
import type { RoundResult } from "./heartbeat-round.js";
import type { Clock, Cohort, SchedulerEntry } from "./scheduler.js";

/** What the cohort needs of a supervision (structural, so the two files do not import each other's values). */
interface CohortMember {
  beginTick(now: number, due: number): number;
  sendPlainRound(): RoundResult;
  completeTick(result: RoundResult, now: number, latenessMs: number, durationMs: number): void;
}

export const supervisionCohort: Cohort = {
  runAll(due: readonly SchedulerEntry[], from: number, to: number, now: number, clock: Clock): void {
    const sending: CohortMember[] = [];
    const lateness: number[] = [];
    for (let k = from; k < to; k++) {
      const entry = due[k]!;
      const member = entry.task as unknown as CohortMember;
      try {
        const latenessMs = member.beginTick(now, entry.due);
        if (latenessMs >= 0) {
          sending.push(member);
          lateness.push(latenessMs);
        }
      } catch {
        // As the scheduler does for one task: the others still run.
      }
    }
    // Each round's duration is its own send, from one clock reading to the next. sendRound
    // catches what a frame throws; a round that threw anyway gets no books, as under `run`.
    const results: (RoundResult | undefined)[] = [];
    const durations: number[] = [];
    let last = clock.now();
    for (const member of sending) {
      try {
        results.push(member.sendPlainRound());
      } catch {
        results.push(undefined);
      }
      const at = clock.now();
      durations.push(at - last);
      last = at;
    }
    for (let k = 0; k < sending.length; k++) {
      const result = results[k];
      if (result === undefined) continue;
      try {
        sending[k]!.completeTick(result, now, lateness[k]!, durations[k]!);
      } catch {
        // The others' books are still kept.
      }
    }
  },
};
