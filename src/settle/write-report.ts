/**
 * Reading what a write returned. An object with a `failed` key is a report; anything else —
 * `undefined`, a driver's result, an insert count, an array of ids — means the whole batch
 * committed. A report must be `{ failed: [{ msg, error }, …] }` naming messages of the batch;
 * one the library cannot read in full fails closed: every message of the batch counts as a
 * temporary failure (a report in a slightly wrong shape must never ACK the messages it meant
 * to fail).
 */
import type { JsMsg } from "@nats-io/jetstream";
import { describe } from "../policy/untrusted.js";

/** What a write's result says about its batch. */
export interface ReadReport {
  /** The messages reported as failed, with their errors. */
  readonly failures: ReadonlyMap<JsMsg, unknown>;
  /** Set when the report could not be read: every message failed, and this says why. */
  readonly error: TypeError | undefined;
}

/** Nothing failed; shared by every batch that reports nothing, so readers only read it. */
const NONE: ReadReport = Object.freeze({ failures: new Map<JsMsg, unknown>(), error: undefined });

const SHAPE = "a report is { failed: [{ msg, error }, …] } with messages of this batch";

/** Every message failed: the report could not be read. */
function failClosed(list: readonly JsMsg[], what: string, cause?: unknown): ReadReport {
  const error = new TypeError(
    `the write's report ${what}: ${SHAPE}. Every message of the batch was treated as a temporary failure; when the batch committed, resolve with nothing (or a value without a failed key)`,
    cause === undefined ? undefined : { cause },
  );
  return { failures: new Map(list.map((m) => [m, error])), error };
}

/** The failures a write's result reports for `list`. */
export function readReport(result: unknown, list: readonly JsMsg[]): ReadReport {
  if (typeof result !== "object" || result === null) return NONE;
  let failed: unknown;
  let entries: unknown[];
  try {
    if (Array.isArray(result) || !("failed" in result)) return NONE;
    failed = (result as { failed?: unknown }).failed;
    // An absent value is no report (`{ failed: undefined }` reads as `{}`).
    if (failed === undefined) return NONE;
    if (!Array.isArray(failed)) return failClosed(list, `has failed = ${describe(failed)}, not an array`);
    entries = Array.from(failed as unknown[]);
  } catch (err) {
    return failClosed(list, "cannot be read (a revoked proxy or a throwing getter)", err);
  }
  if (entries.length === 0) return NONE;
  const members = new Set<unknown>(list);
  const failures = new Map<JsMsg, unknown>();
  let notEntries = 0;
  let outside = 0;
  for (const entry of entries) {
    let msg: unknown;
    try {
      msg = typeof entry === "object" && entry !== null && "msg" in entry ? (entry as { msg?: unknown }).msg : undefined;
    } catch {
      msg = undefined;
    }
    if (msg === undefined || msg === null) {
      notEntries += 1;
      continue;
    }
    if (!members.has(msg)) {
      outside += 1;
      continue;
    }
    let error: unknown;
    try {
      error = (entry as { error?: unknown }).error;
    } catch (err) {
      // The entry names its message: it failed, whatever its error says.
      error = new TypeError("the write's report entry has an error that cannot be read", { cause: err });
    }
    if (!failures.has(msg as JsMsg)) failures.set(msg as JsMsg, error);
  }
  if (notEntries === 0 && outside === 0) return { failures, error: undefined };
  const parts = [
    notEntries > 0 ? `${notEntries} entr${notEntries === 1 ? "y that is" : "ies that are"} not { msg, error }` : "",
    outside > 0 ? `${outside} entr${outside === 1 ? "y naming a message" : "ies naming messages"} not of this batch` : "",
  ].filter(Boolean);
  return failClosed(list, `has ${parts.join(" and ")}`);
}
