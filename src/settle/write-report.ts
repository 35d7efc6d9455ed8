/**
 * Reading what a write returned: which messages of the batch it reports as failed.
 */
import type { JsMsg } from "@nats-io/jetstream";
import type { WriteReport } from "./batch-result.js";

/** The failed messages a write's report names, with their errors; empty when all committed. */
export function readReport(report: unknown, list: readonly JsMsg[]): Map<JsMsg, unknown> {
  const failures = new Map<JsMsg, unknown>();
  if (report === undefined || report === null) return failures;
  const failed = (report as WriteReport).failed;
  const members = new Set(list);
  const malformed =
    typeof report !== "object" ||
    !Array.isArray(failed) ||
    failed.some((f) => !f || typeof f !== "object" || !members.has(f.msg));
  if (malformed) {
    // A report the library cannot read must not turn into an ACK: nothing counts as committed.
    const error = new TypeError("the write returned a malformed report: expected { failed: [{ msg, error }] } with messages of this batch");
    for (const m of list) failures.set(m, error);
    return failures;
  }
  for (const f of failed) failures.set(f.msg, f.error);
  return failures;
}

