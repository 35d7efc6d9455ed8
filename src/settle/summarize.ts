/**
 * Summing up a settled batch: the count of each action and the batch outcome.
 */
import type { BatchOutcome, BatchResult, MessageResult } from "./batch-result.js";

/** The batch result of settled messages. */
export function summarize(
  results: readonly MessageResult[],
  cancelled: boolean,
  error: unknown,
  heartbeats: number,
  writeMs: number,
): BatchResult & { readonly outcome: Exclude<BatchOutcome, "empty"> } {
  // One pass: the count of each action, and whether every message got the same one.
  const counts = { acked: 0, nacked: 0, termed: 0, dead_lettered: 0, left: 0 };
  const first = results[0]?.action;
  let same = first !== undefined;
  for (const r of results) {
    counts[r.action] += 1;
    if (r.action !== first) same = false;
  }
  const outcome: Exclude<BatchOutcome, "empty"> = cancelled ? "cancelled" : same && first !== undefined ? first : "partial";
  return {
    outcome,
    acked: counts.acked,
    nacked: counts.nacked,
    termed: counts.termed,
    deadLettered: counts.dead_lettered,
    left: counts.left,
    ...(error !== undefined ? { error } : {}),
    heartbeats,
    writeMs,
    messages: Object.freeze(results),
  };
}

export function firstError(results: readonly MessageResult[]): unknown {
  return results.find((r) => r.error !== undefined)?.error;
}

/** The result of an empty batch: nothing ran, nothing was sent. */
export function emptyResult(): BatchResult {
  return { outcome: "empty", acked: 0, nacked: 0, termed: 0, deadLettered: 0, left: 0, heartbeats: 0, writeMs: 0, messages: [] };
}

