// Early, explicit validation of the options the metrics adapters take: a typo or a bad value
// is a TypeError at construction naming the field, the value and the fix, never a silently
// different set of metric names.

/**
 * Reads an adapter's options object: `undefined` means defaults; anything else must be an
 * object whose keys are all known.
 *
 * @internal
 */
export function readAdapterOptions(fn: string, options: unknown, known: readonly string[]): Record<string, unknown> {
  if (options === undefined) return {};
  if (options === null || typeof options !== "object" || Array.isArray(options)) {
    throw new TypeError(`${fn}: options must be an object or undefined, got ${describe(options)}; pass for example { prefix: "myapp_" } or nothing`);
  }
  const record = options as Record<string, unknown>;
  for (const key of Object.keys(record)) {
    if (!known.includes(key)) {
      throw new TypeError(`${fn}: unknown option ${JSON.stringify(key)} (known: ${known.join(", ")}); check the spelling`);
    }
  }
  return record;
}

/**
 * Validates a name prefix against `pattern` (empty is always allowed).
 *
 * @internal
 */
export function readPrefix(fn: string, value: unknown, pattern: RegExp, rule: string, example: string): string {
  if (value === undefined) return "";
  if (typeof value !== "string") {
    throw new TypeError(`${fn}: prefix must be a string, got ${describe(value)}; use for example ${JSON.stringify(example)} or leave it out`);
  }
  if (value !== "" && !pattern.test(value)) {
    throw new TypeError(`${fn}: prefix ${describe(value)} is not a valid metric name prefix: ${rule}; use for example ${JSON.stringify(example)}`);
  }
  return value;
}

/**
 * Validates histogram bucket boundaries: a non-empty array of finite numbers in strictly
 * increasing order. Returns a frozen copy.
 *
 * @internal
 */
export function readBuckets(fn: string, field: string, value: unknown, fallback: readonly number[]): readonly number[] {
  if (value === undefined) return fallback;
  const fix = "use finite numbers in strictly increasing order, for example [0.01, 0.1, 1, 10]";
  if (!Array.isArray(value) || value.length === 0) {
    throw new TypeError(`${fn}: ${field} must be a non-empty array of numbers, got ${describe(value)}; ${fix}`);
  }
  const list: unknown[] = value;
  for (let i = 0; i < list.length; i++) {
    const b = list[i];
    if (typeof b !== "number" || !Number.isFinite(b)) {
      throw new TypeError(`${fn}: ${field}[${i}] is ${describe(b)}, not a finite number; ${fix}`);
    }
    const prev = list[i - 1];
    if (i > 0 && typeof prev === "number" && b <= prev) {
      throw new TypeError(`${fn}: ${field}[${i}] is ${b}, not greater than ${field}[${i - 1}] (${prev}); ${fix}`);
    }
  }
  return Object.freeze([...(list as number[])]);
}

/**
 * A short, printable description of any value for an error message.
 *
 * @internal
 */
export function describe(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(value.length > 80 ? `${value.slice(0, 77)}...` : value);
  if (typeof value === "number" || typeof value === "boolean" || typeof value === "bigint") return String(value);
  if (value === null || value === undefined) return String(value);
  if (Array.isArray(value)) return `an array of ${value.length}`;
  if (typeof value === "function") return "a function";
  if (typeof value === "symbol") return "a symbol";
  return "an object";
}
