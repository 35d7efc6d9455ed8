/**
 * Reading what a write returned. Only an object with a `failed` array is a report; anything
 * else — `undefined`, a driver's result, an insert count, an array of ids — means the whole
 * batch committed. A report says which messages failed; what it cannot say (an entry without
 * `msg`, a message outside the batch) is set aside and reported, never turned into a failure
 * of the messages it does not name.
 */
import type { JsMsg } from "@nats-io/jetstream";

/** What a write's result says about its batch. */
export interface ReadReport {
  /** The messages reported as failed, with their errors. */
  readonly failures: ReadonlyMap<JsMsg, unknown>;
  /** Set when some entries could not be read; names what was set aside. */
  readonly error: TypeError | undefined;
}

/** Nothing failed; shared by every batch that reports nothing, so readers only read it. */
const NONE: ReadReport = Object.freeze({ failures: new Map<JsMsg, unknown>(), error: undefined });

/** The failures a write's result reports for `list`. */
export function readReport(result: unknown, list: readonly JsMsg[]): ReadReport {
  if (typeof result !== "object" || result === null) return NONE;
  let failed: unknown;
  let entries: unknown[];
  try {
    if (Array.isArray(result)) return NONE;
    failed = (result as { failed?: unknown }).failed;
    if (!Array.isArray(failed)) return NONE;
    entries = Array.from(failed as unknown[]);
  } catch (err) {
    // A report that cannot be read says nothing reliable: every message counts as failed.
    const error = new TypeError("the write returned a report that cannot be read (a revoked proxy or a throwing getter); every message of the batch is treated as failed", { cause: err });
    return { failures: new Map(list.map((m) => [m, error])), error };
  }
  if (entries.length === 0) return NONE;
  const members = new Set<unknown>(list);
  const failures = new Map<JsMsg, unknown>();
  let withoutMsg = 0;
  let outside = 0;
  for (const entry of entries) {
    let msg: unknown;
    let error: unknown;
    try {
      msg = typeof entry === "object" && entry !== null ? (entry as { msg?: unknown }).msg : undefined;
    } catch {
      msg = undefined;
    }
    if (msg !== undefined && msg !== null) {
      try {
        error = (entry as { error?: unknown }).error;
      } catch (err) {
        // The entry names its message: it failed, whatever its error says.
        error = new TypeError("the write's report entry has an error that cannot be read", { cause: err });
      }
    }
    if (msg === undefined || msg === null) withoutMsg += 1;
    else if (!members.has(msg)) outside += 1;
    else if (!failures.has(msg as JsMsg)) failures.set(msg as JsMsg, error);
  }
  if (withoutMsg === 0 && outside === 0) return { failures, error: undefined };
  const parts = [
    withoutMsg > 0 ? `${withoutMsg} entr${withoutMsg === 1 ? "y" : "ies"} without msg` : "",
    outside > 0 ? `${outside} message${outside === 1 ? "" : "s"} not of this batch` : "",
  ].filter(Boolean);
  const error = new TypeError(
    `the write's report named ${parts.join(" and ")}: those entries were set aside, the messages it names were settled as failed and the rest as committed; report { failed: [{ msg, error }] } with messages of this batch`,
  );
  return { failures, error };
}
