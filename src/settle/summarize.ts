/**
 * Summing up a settled batch: the count of each action and the batch outcome.
 */
import type { BatchOutcome, BatchResult, MessageResult } from "./batch-result.js";

/** What the batch result says besides its messages. */
export interface BatchFacts {
  readonly cancelled: boolean;
  readonly error: unknown;
  readonly heartbeats: number;
  readonly writeMs: number;
  readonly leaseLost: boolean;
  readonly reportError: TypeError | undefined;
}

/** The batch result of settled messages. */
export function summarize(results: readonly MessageResult[], facts: BatchFacts): BatchResult & { readonly outcome: Exclude<BatchOutcome, "empty"> } {
  // One pass: the count of each action, and whether every message got the same one.
  const counts = { acked: 0, nacked: 0, termed: 0, dead_lettered: 0, left: 0, exhausted: 0, abandoned: 0 };
  const first = results[0]?.action;
  let same = first !== undefined;
  for (const r of results) {
    counts[r.action] += 1;
    if (r.action !== first) same = false;
  }
  const outcome: Exclude<BatchOutcome, "empty"> = facts.cancelled ? "cancelled" : same && first !== undefined ? first : "partial";
  return {
    outcome,
    acked: counts.acked,
    nacked: counts.nacked,
    termed: counts.termed,
    deadLettered: counts.dead_lettered,
    left: counts.left,
    exhausted: counts.exhausted,
    abandoned: counts.abandoned,
    leaseLost: facts.leaseLost,
    ...(facts.error !== undefined ? { error: facts.error } : {}),
    ...(facts.reportError !== undefined ? { reportError: facts.reportError } : {}),
    heartbeats: facts.heartbeats,
    writeMs: facts.writeMs,
    messages: Object.freeze(results),
  };
}

/** The first failure's error among settled messages. */
export function firstError(results: readonly MessageResult[]): unknown {
  return results.find((r) => r.error !== undefined)?.error;
}

/** The result of an empty batch: nothing ran, nothing was sent. */
export function emptyResult(): BatchResult {
  return { outcome: "empty", acked: 0, nacked: 0, termed: 0, deadLettered: 0, left: 0, exhausted: 0, abandoned: 0, leaseLost: false, heartbeats: 0, writeMs: 0, messages: [] };
}
