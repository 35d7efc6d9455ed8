/**
 * A BackOff list from untrusted input: read within {@link MAX_BACKOFF_STEPS}, summarised in
 * one pass (no spread into `Math.min`, which overflows the stack on a long list), and
 * described in a message of bounded length.
 */
import { MAX_BACKOFF_STEPS } from "./timing-limits.js";
import { describe, fmt, readList } from "./untrusted.js";

/** One step and its place in the list. */
export interface Step {
  readonly index: number;
  readonly value: unknown;
}

/** What reading `backOffMs` found. */
export type BackOffReading =
  | { readonly kind: "none" }
  /** Every step a finite number above 0. */
  | { readonly kind: "valid"; readonly values: readonly number[]; readonly smallest: number; readonly longest: Step & { readonly value: number } }
  /** A list with at least one step that is not a finite number above 0 (`bad`, the first). */
  | { readonly kind: "bad_step"; readonly values: readonly unknown[]; readonly bad: Step; readonly negative: boolean }
  | { readonly kind: "too_long"; readonly length: number }
  | { readonly kind: "malformed"; readonly raw: unknown }
  | { readonly kind: "unreadable" };

/** Reads `raw` as a BackOff list; `undefined` and `[]` mean no BackOff. Never throws. */
export function readBackOff(raw: unknown): BackOffReading {
  if (raw === undefined) return { kind: "none" };
  const list = readList(raw, MAX_BACKOFF_STEPS);
  if (list.kind === "not_a_list") return { kind: "malformed", raw };
  if (list.kind === "unreadable") return { kind: "unreadable" };
  if (list.kind === "too_long") return { kind: "too_long", length: list.length };
  const values = list.values;
  if (values.length === 0) return { kind: "none" };

  let bad: Step | undefined;
  let negative = false;
  let smallest = Number.POSITIVE_INFINITY;
  let longest = { index: 0, value: 0 };
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (typeof v === "number" && Number.isFinite(v) && v > 0) {
      if (v < smallest) smallest = v;
      if (v > longest.value) longest = { index: i, value: v };
      continue;
    }
    bad ??= { index: i, value: v };
    if (typeof v === "number" && v < 0) negative = true;
  }
  if (bad !== undefined) return { kind: "bad_step", values, bad, negative };
  return { kind: "valid", values: values as number[], smallest, longest };
}

/** Steps shown in a message; the rest are counted. */
const SHOWN_STEPS = 4;

/** A rendering of the list for a message, never longer than a few steps. */
export function describeBackOff(b: BackOffReading): string {
  switch (b.kind) {
    case "valid":
    case "bad_step": {
      const shown = b.values.slice(0, SHOWN_STEPS).map((v) => (typeof v === "number" ? `${fmt(v)} ms` : describe(v)));
      const more = b.values.length - shown.length;
      return `[${shown.join(", ")}${more > 0 ? `, … and ${more} more` : ""}]`;
    }
    case "too_long":
      return `a list of more than ${MAX_BACKOFF_STEPS} steps`;
    case "malformed":
      return describe(b.raw);
    case "unreadable":
      return "an unreadable list (a revoked proxy or a throwing getter)";
    case "none":
      return "none";
  }
}
