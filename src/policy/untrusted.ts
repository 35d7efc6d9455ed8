/**
 * Reading and describing untrusted values: every read is guarded (a throwing getter or a
 * revoked proxy becomes "unreadable"), and every rendering is short and never echoes more
 * than a few characters of a string.
 */

/** Reads own enumerable properties once each; a throwing getter or proxy becomes `undefined`. */
export function readRecord(value: unknown): Record<string, unknown> | undefined {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return undefined;
  try {
    const out: Record<string, unknown> = Object.create(null) as Record<string, unknown>;
    for (const key of Object.keys(value)) {
      out[key] = (value as Record<string, unknown>)[key];
    }
    return out;
  } catch {
    return undefined;
  }
}

/** Formats milliseconds without floating-point noise (24000, 1.5, 0.001). */
export function fmt(n: number): string {
  return Number.isInteger(n) ? String(n) : String(Number(n.toFixed(3)));
}

/** Cuts `s` to `max` characters, marking the cut. */
export function truncate(s: string, max = 32): string {
  return s.length > max ? `${s.slice(0, max)}…` : s;
}

/** A short, safe rendering of an untrusted value for a message. */
export function describe(value: unknown): string {
  switch (typeof value) {
    case "number":
      return String(value);
    case "string":
      return `the string ${JSON.stringify(truncate(value))}`;
    case "boolean":
      return String(value);
    case "undefined":
      return "undefined";
    case "bigint":
      return `the bigint ${value}n`;
    case "symbol":
      return "a symbol";
    case "function":
      return "a function";
    default:
      if (value === null) return "null";
      return Array.isArray(value) ? "an array" : "an object";
  }
}
