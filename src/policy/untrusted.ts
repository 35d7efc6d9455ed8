/**
 * Reading and describing untrusted values: every read is guarded (a throwing getter or a
 * revoked proxy becomes "unreadable"), every list is read up to a bound, and every rendering
 * is short and never echoes more than a few characters of a string.
 */

/**
 * Reads own enumerable properties once each; anything that is not a plain (non-array)
 * object, a throwing getter or a revoked proxy becomes `undefined`.
 */
export function readRecord(value: unknown): Record<string, unknown> | undefined {
  if (typeof value !== "object" || value === null) return undefined;
  try {
    // Inside the try: Array.isArray throws on a revoked proxy.
    if (Array.isArray(value)) return undefined;
    const out: Record<string, unknown> = Object.create(null) as Record<string, unknown>;
    for (const key of Object.keys(value)) {
      out[key] = (value as Record<string, unknown>)[key];
    }
    return out;
  } catch {
    return undefined;
  }
}

/** What reading a list found. */
export type ListReading =
  | { readonly kind: "list"; readonly values: readonly unknown[] }
  /** Longer than the bound: only its first `head` items were read. */
  | { readonly kind: "too_long"; readonly length: number; readonly head: readonly unknown[] }
  | { readonly kind: "not_a_list" }
  | { readonly kind: "unreadable" };

/**
 * Reads an array of at most `max` items, item by item (a sparse array's holes read as
 * `undefined`; nothing is allocated beyond the items read). A longer one is not read past its
 * first `head` items. A revoked proxy, a throwing getter or an impossible length is
 * `unreadable`.
 */
export function readList(value: unknown, max: number, head = 0): ListReading {
  if (typeof value !== "object" || value === null) return { kind: "not_a_list" };
  try {
    if (!Array.isArray(value)) return { kind: "not_a_list" };
    const list = value as readonly unknown[];
    const length: unknown = list.length;
    if (typeof length !== "number" || !Number.isSafeInteger(length) || length < 0) return { kind: "unreadable" };
    const count = length > max ? Math.min(head, length) : length;
    const items: unknown[] = [];
    for (let i = 0; i < count; i++) items.push(list[i]);
    return length > max ? { kind: "too_long", length, head: items } : { kind: "list", values: items };
  } catch {
    return { kind: "unreadable" };
  }
}

/** Formats milliseconds without floating-point noise (24000, 1.5, 0.001, -0). */
export function fmt(n: number): string {
  if (Object.is(n, -0)) return "-0";
  return Number.isInteger(n) || !Number.isFinite(n) ? String(n) : String(Number(n.toFixed(3)));
}

/** Cuts `s` to `max` characters, marking the cut. */
export function truncate(s: string, max = 32): string {
  return s.length > max ? `${s.slice(0, max)}…` : s;
}

const BIGINT_SHOWN = 10n ** 24n;

/** A short, safe rendering of an untrusted value for a message. */
export function describe(value: unknown): string {
  switch (typeof value) {
    case "number":
      return Object.is(value, -0) ? "-0" : String(value);
    case "string":
      return `the string ${JSON.stringify(truncate(value))}`;
    case "boolean":
      return String(value);
    case "undefined":
      return "undefined";
    case "bigint":
      return value > -BIGINT_SHOWN && value < BIGINT_SHOWN ? `the bigint ${value}n` : "a bigint of more than 24 digits";
    case "symbol":
      return "a symbol";
    case "function":
      return "a function";
    default:
      if (value === null) return "null";
      try {
        return Array.isArray(value) ? "an array" : "an object";
      } catch {
        return "an unreadable object (a revoked proxy)";
      }
  }
}

/** A finite number above 0: a usable duration (AckWait, a BackOff step, a redelivery window). */
export function isPositiveFinite(v: unknown): v is number {
  return typeof v === "number" && Number.isFinite(v) && v > 0;
}

/** An integer in `min ..= max`. */
export function isIntegerIn(value: unknown, min: number, max: number): value is number {
  return typeof value === "number" && Number.isInteger(value) && value >= min && value <= max;
}
