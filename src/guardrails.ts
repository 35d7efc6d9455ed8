/**
 * The guardrail module: pure checks of an InProgress policy against a consumer's effective
 * ack timing. No I/O, no timers, no clock, and nothing from NATS at run time.
 */
import { InProgressPolicyError } from "./errors.js";

/**
 * The InProgress (AckProgress, `+WPI`) heartbeat policy a host asks for. All durations are
 * milliseconds.
 *
 * @example
 * ```ts
 * const policy: Partial<InProgressPolicy> = { enabled: true, intervalMs: 10_000, maxHeartbeats: 30 };
 * ```
 */
export interface InProgressPolicy {
  /** Opt-in switch; heartbeats are never sent unless this is `true`. Default `false`. */
  readonly enabled: boolean;
  /** Time between heartbeats, integer 1 ..= 3,600,000. Must be below 80% of the effective AckWait. Default 5000. */
  readonly intervalMs: number;
  /** Upper bound of heartbeats per batch, integer 1 ..= 10,000. Default 12. */
  readonly maxHeartbeats: number;
  /** How long to wait for work to stop after an abort, integer 0 ..= 60,000. Default 5000. */
  readonly shutdownTimeoutMs: number;
}

/**
 * The defaults: disabled, 5 s interval, 12 heartbeats, 5 s shutdown bound.
 *
 * @example
 * ```ts
 * const policy = verifyInProgressPolicy({ ...DEFAULT_IN_PROGRESS_POLICY, enabled: true }, timing);
 * ```
 */
export const DEFAULT_IN_PROGRESS_POLICY: Readonly<InProgressPolicy> = Object.freeze({
  enabled: false,
  intervalMs: 5000,
  maxHeartbeats: 12,
  shutdownTimeoutMs: 5000,
});

/**
 * A heartbeat interval must be strictly below this share of the effective redelivery
 * window (AckWait, or the smallest BackOff step), so a beat lands before the deadline even
 * when it is late.
 *
 * @example
 * ```ts
 * const longestSafeIntervalMs = Math.ceil(ACK_WAIT_SAFETY_RATIO * 30_000) - 1; // 23999
 * ```
 */
export const ACK_WAIT_SAFETY_RATIO = 0.8;

/**
 * A consumer's effective ack timing, in milliseconds.
 *
 * @example
 * ```ts
 * const configured: ConsumerTiming = { ackWaitMs: 30_000, source: "configured" };
 * const inspected = consumerTimingFromConfig(await jsm.consumers.info("ORDERS", "writer"));
 * ```
 */
export interface ConsumerTiming {
  /** The consumer's AckWait in milliseconds. */
  readonly ackWaitMs?: number;
  /** The consumer's BackOff steps in milliseconds; absent or empty means no BackOff. */
  readonly backOffMs?: readonly number[];
  /** The consumer's MaxDeliver (`-1` or absent: unlimited), when known. */
  readonly maxDeliver?: number;
  /** `configured`: set by the host; `inspected`: read from the server. */
  readonly source: "configured" | "inspected";
}

/**
 * How BackOff is treated: `reject` (default) refuses any BackOff; `aware` times heartbeats
 * against the BackOff step of each delivery.
 *
 * @example
 * ```ts
 * checkInProgressPolicy(policy, timing, { backOff: "aware" });
 * ```
 */
export type BackOffMode = "reject" | "aware";

/**
 * Options of {@link checkInProgressPolicy} and {@link verifyInProgressPolicy}.
 *
 * @example
 * ```ts
 * const options: CheckOptions = { backOff: "aware" };
 * ```
 */
export interface CheckOptions {
  /** BackOff handling; default `reject`. */
  readonly backOff?: BackOffMode;
}

/**
 * Stable violation codes; see the README's table.
 *
 * @example
 * ```ts
 * const fatal: ViolationCode[] = ["ack_wait_unknown", "backoff_not_supported"];
 * ```
 */
export type ViolationCode =
  | "invalid_policy"
  | "unknown_field"
  | "invalid_enabled"
  | "invalid_interval"
  | "invalid_max_heartbeats"
  | "invalid_shutdown_timeout"
  | "invalid_backoff_mode"
  | "ack_wait_unknown"
  | "ack_wait_invalid"
  | "interval_too_close_to_ack_wait"
  | "backoff_not_supported"
  | "backoff_invalid"
  | "interval_too_close_to_backoff"
  | "policy_not_verified";

/**
 * One problem found by the guardrails.
 *
 * @example
 * ```ts
 * const v: PolicyViolation = { code: "invalid_interval", field: "intervalMs", message: "..." };
 * ```
 */
export interface PolicyViolation {
  /** Stable code, safe to match on. */
  readonly code: ViolationCode;
  /** The field at fault, for example `intervalMs` or `timing.ackWaitMs`. */
  readonly field: string;
  /** The field, the value, the limit and the way out, for a person. */
  readonly message: string;
}

declare const verifiedBrand: unique symbol;

/**
 * A policy that passed {@link verifyInProgressPolicy}: frozen, carrying the timing it was
 * checked against. Only such a policy (or a disabled one) is accepted by `withInProgress`.
 *
 * @example
 * ```ts
 * const policy: VerifiedInProgressPolicy = verifyInProgressPolicy({ enabled: true }, { ackWaitMs: 30_000, source: "configured" });
 * ```
 */
export interface VerifiedInProgressPolicy extends InProgressPolicy {
  /** The timing the policy was verified against; `undefined` when disabled. */
  readonly timing: ConsumerTiming | undefined;
  /** The BackOff mode it was verified under. */
  readonly backOff: BackOffMode;
  /** @internal */
  readonly [verifiedBrand]: true;
}

/**
 * A policy that sends no heartbeat; accepted by `withInProgress` and `CommitThenAck` without
 * verification.
 *
 * @example
 * ```ts
 * const off: DisabledInProgressPolicy = { enabled: false };
 * ```
 */
export interface DisabledInProgressPolicy {
  /** Always `false`. */
  readonly enabled: false;
}

/**
 * The result of {@link checkInProgressPolicy}.
 *
 * @example
 * ```ts
 * const check: PolicyCheck = checkInProgressPolicy(raw, timing);
 * if (!check.ok) console.error(check.violations);
 * ```
 */
export type PolicyCheck =
  | {
      /** The policy is safe. */
      readonly ok: true;
      /** The verified, frozen policy, to hand to `withInProgress` or `CommitThenAck`. */
      readonly policy: VerifiedInProgressPolicy;
    }
  | {
      /** The policy is unsafe or malformed. */
      readonly ok: false;
      /** Every violation found (at least one). */
      readonly violations: readonly PolicyViolation[];
    };

const POLICY_FIELDS = ["enabled", "intervalMs", "maxHeartbeats", "shutdownTimeoutMs"] as const;

const LIMITS = {
  intervalMs: { min: 1, max: 3_600_000, code: "invalid_interval" },
  maxHeartbeats: { min: 1, max: 10_000, code: "invalid_max_heartbeats" },
  shutdownTimeoutMs: { min: 0, max: 60_000, code: "invalid_shutdown_timeout" },
} as const satisfies Record<string, { min: number; max: number; code: ViolationCode }>;

// Shared across every copy of this module in a process (ESM and CommonJS builds loaded side
// by side), so a policy verified by one copy is recognised by the other. A WeakSet cannot be
// forged by copying or spreading a policy object.
const REGISTRY_KEY = Symbol.for("jetstream-inprogress.verified-policies");
const verified: WeakSet<object> = ((globalThis as Record<symbol, unknown>)[REGISTRY_KEY] as
  | WeakSet<object>
  | undefined) ?? new WeakSet<object>();
(globalThis as Record<symbol, unknown>)[REGISTRY_KEY] = verified;

/**
 * True when `policy` is an object returned by {@link verifyInProgressPolicy} or
 * {@link checkInProgressPolicy}. Not part of the public barrel.
 *
 * @internal
 */
export function isVerifiedPolicy(policy: unknown): policy is VerifiedInProgressPolicy {
  return typeof policy === "object" && policy !== null && verified.has(policy);
}

/**
 * Converts a JetStream duration (nanoseconds) to milliseconds. The one place where
 * nanoseconds enter the library; anything that is not a number becomes `NaN`, so the
 * guardrails report it instead of guessing.
 *
 * @internal
 */
export function nanosToMillis(ns: unknown): number {
  if (typeof ns === "bigint") return Number(ns) / 1e6;
  return typeof ns === "number" ? ns / 1e6 : Number.NaN;
}

/**
 * Reads a consumer's effective ack timing from untrusted input: a `ConsumerInfo` (as
 * returned by `jsm.consumers.info`) or a `ConsumerConfig`, with `ack_wait` and `backoff` in
 * nanoseconds. Malformed values are carried through as `NaN` so the guardrails reject them;
 * this function never throws.
 *
 * @param config - a ConsumerInfo or ConsumerConfig, from the server or from the host.
 * @param source - where it came from; default `inspected`.
 * @returns the timing in milliseconds.
 *
 * @example
 * ```ts
 * const info = await jsm.consumers.info("ORDERS", "writer");
 * const timing = consumerTimingFromConfig(info); // { ackWaitMs: 30000, source: "inspected" }
 * ```
 */
export function consumerTimingFromConfig(
  config: unknown,
  source: ConsumerTiming["source"] = "inspected",
): ConsumerTiming {
  const src: ConsumerTiming["source"] = source === "configured" ? "configured" : "inspected";
  const outer = readRecord(config);
  if (outer === undefined) return { source: src };
  const inner = "config" in outer ? readRecord(outer["config"]) : outer;
  if (inner === undefined) return { source: src };

  const timing: { ackWaitMs?: number; backOffMs?: readonly number[]; maxDeliver?: number } = {};
  const ackWait = inner["ack_wait"];
  if (ackWait !== undefined) timing.ackWaitMs = nanosToMillis(ackWait);
  const backoff = inner["backoff"];
  if (backoff !== undefined && backoff !== null) {
    timing.backOffMs = Array.isArray(backoff) ? backoff.map(nanosToMillis) : [Number.NaN];
  }
  const maxDeliver = inner["max_deliver"];
  if (typeof maxDeliver === "number") timing.maxDeliver = maxDeliver;
  return { ...timing, source: src };
}

/**
 * Checks an InProgress policy against a consumer's effective ack timing. Pure: no I/O, no
 * timers, no clock. Any input is accepted and it never throws; every problem is reported at
 * once.
 *
 * Missing policy fields take their defaults ({@link DEFAULT_IN_PROGRESS_POLICY}), so
 * heartbeats are enabled only by an explicit `enabled: true`. A disabled policy needs no
 * timing, but its own fields are still validated.
 *
 * @param policy - untrusted policy input (`undefined` means all defaults: disabled).
 * @param timing - the consumer's effective timing; required when enabled.
 * @param options - BackOff handling (default `reject`).
 * @returns `{ ok: true, policy }` with a verified, frozen policy, or `{ ok: false, violations }`.
 *
 * @example
 * ```ts
 * const check = checkInProgressPolicy({ enabled: true, intervalMs: 24_000 }, { ackWaitMs: 30_000, source: "configured" });
 * if (!check.ok) {
 *   // intervalMs 24000 must be below 24000 ms (80% of AckWait 30000 ms): use at most 23999 or raise the consumer's ack_wait
 *   console.error(check.violations[0]?.message);
 * }
 * ```
 */
export function checkInProgressPolicy(
  policy: unknown,
  timing: ConsumerTiming | undefined,
  options?: CheckOptions,
): PolicyCheck {
  const violations: PolicyViolation[] = [];
  const add = (code: ViolationCode, field: string, message: string): void => {
    violations.push(Object.freeze({ code, field, message }));
  };

  const mode = readBackOffMode(options, add);
  const fields = readPolicy(policy, add);
  if (fields === undefined) return { ok: false, violations: Object.freeze(violations) };

  const enabled = fields.enabled;
  if (enabled !== undefined && typeof enabled !== "boolean") {
    add("invalid_enabled", "enabled", `enabled must be a boolean, got ${describe(enabled)}: use true or false`);
  }
  const intervalMs = checkInteger("intervalMs", fields.intervalMs, add);
  const maxHeartbeats = checkInteger("maxHeartbeats", fields.maxHeartbeats, add);
  const shutdownTimeoutMs = checkInteger("shutdownTimeoutMs", fields.shutdownTimeoutMs, add);

  const resolved = {
    enabled: enabled === true,
    intervalMs: intervalMs ?? DEFAULT_IN_PROGRESS_POLICY.intervalMs,
    maxHeartbeats: maxHeartbeats ?? DEFAULT_IN_PROGRESS_POLICY.maxHeartbeats,
    shutdownTimeoutMs: shutdownTimeoutMs ?? DEFAULT_IN_PROGRESS_POLICY.shutdownTimeoutMs,
  };

  let verifiedTiming: ConsumerTiming | undefined;
  if (resolved.enabled) {
    // A missing interval is checked at its default; a malformed one has nothing meaningful to
    // compare, and its own violation says so.
    const intervalToCheck = fields.intervalMs === undefined ? resolved.intervalMs : intervalMs;
    verifiedTiming = checkTiming(timing, mode, intervalToCheck, add);
  }

  if (violations.length > 0 || mode === undefined) {
    return { ok: false, violations: Object.freeze(violations) };
  }
  const result = Object.freeze({ ...resolved, timing: verifiedTiming, backOff: mode });
  verified.add(result);
  return { ok: true, policy: result as unknown as VerifiedInProgressPolicy };
}

/**
 * Same check as {@link checkInProgressPolicy}, for setup code that should stop on an unsafe
 * policy: returns the verified policy or throws {@link InProgressPolicyError} carrying every
 * violation.
 *
 * @param policy - untrusted policy input (`undefined` means all defaults: disabled).
 * @param timing - the consumer's effective timing; required when enabled.
 * @param options - BackOff handling (default `reject`).
 * @returns the verified, frozen policy.
 * @throws {@link InProgressPolicyError} when the policy is unsafe or malformed.
 *
 * @example
 * ```ts
 * const policy = verifyInProgressPolicy(
 *   { enabled: true, intervalMs: 10_000, maxHeartbeats: 30 },
 *   { ackWaitMs: 30_000, source: "configured" },
 * );
 * ```
 */
export function verifyInProgressPolicy(
  policy: unknown,
  timing: ConsumerTiming | undefined,
  options?: CheckOptions,
): VerifiedInProgressPolicy {
  const check = checkInProgressPolicy(policy, timing, options);
  if (!check.ok) throw new InProgressPolicyError(check.violations);
  return check.policy;
}

/**
 * Checks a consumer's timing on its own (no interval): AckWait present and valid, and BackOff
 * acceptable under `mode`. Used where heartbeats are off but the timing still matters (NAK
 * delays, fail-closed setup).
 *
 * @internal
 */
export function checkConsumerTiming(timing: ConsumerTiming | undefined, mode: BackOffMode): readonly PolicyViolation[] {
  const violations: PolicyViolation[] = [];
  checkTiming(timing, mode, undefined, (code, field, message) => violations.push(Object.freeze({ code, field, message })));
  return Object.freeze(violations);
}

type Add = (code: ViolationCode, field: string, message: string) => void;

/** Reads own enumerable properties once each; a throwing getter or proxy becomes `undefined`. */
function readRecord(value: unknown): Record<string, unknown> | undefined {
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

function readBackOffMode(options: unknown, add: Add): BackOffMode | undefined {
  if (options === undefined) return "reject";
  const record = readRecord(options);
  if (record === undefined) {
    add("invalid_backoff_mode", "options", `options must be an object, got ${describe(options)}: pass { backOff: "reject" } or { backOff: "aware" }`);
    return undefined;
  }
  const mode = record["backOff"];
  if (mode === undefined || mode === "reject") return "reject";
  if (mode === "aware") return "aware";
  add("invalid_backoff_mode", "options.backOff", `options.backOff must be "reject" or "aware", got ${describe(mode)}`);
  return undefined;
}

function readPolicy(policy: unknown, add: Add): Partial<Record<(typeof POLICY_FIELDS)[number], unknown>> | undefined {
  if (policy === undefined) return {};
  const record = readRecord(policy);
  if (record === undefined) {
    add("invalid_policy", "policy", `policy must be an object, got ${describe(policy)}: pass { enabled, intervalMs, maxHeartbeats, shutdownTimeoutMs } or omit it for the disabled default`);
    return undefined;
  }
  for (const key of Object.keys(record)) {
    if ((POLICY_FIELDS as readonly string[]).includes(key)) continue;
    const guess = closestField(key);
    add(
      "unknown_field",
      key,
      `unknown field ${JSON.stringify(truncate(key))}${guess ? `: did you mean "${guess}"?` : ""} A misspelt field would silently keep its default; rename or remove it (known fields: ${POLICY_FIELDS.join(", ")})`,
    );
  }
  return {
    enabled: record["enabled"],
    intervalMs: record["intervalMs"],
    maxHeartbeats: record["maxHeartbeats"],
    shutdownTimeoutMs: record["shutdownTimeoutMs"],
  };
}

function checkInteger(field: keyof typeof LIMITS, value: unknown, add: Add): number | undefined {
  if (value === undefined) return undefined;
  const { min, max, code } = LIMITS[field];
  if (typeof value === "number" && Number.isInteger(value) && value >= min && value <= max) return value;
  let fix: string;
  if (typeof value !== "number") fix = "use a number";
  else if (!Number.isFinite(value)) fix = `use a finite integer between ${min} and ${max}`;
  else if (!Number.isInteger(value)) fix = `use a whole number of ${field === "maxHeartbeats" ? "heartbeats" : "milliseconds"}, for example ${clamp(Math.round(value), min, max)}`;
  else fix = `use ${value < min ? `at least ${min}` : `at most ${max}`}`;
  add(code, field, `${field} must be an integer in ${min} ..= ${max}, got ${describe(value)}: ${fix}`);
  return undefined;
}

function checkTiming(
  timing: unknown,
  mode: BackOffMode | undefined,
  intervalMs: number | undefined,
  add: Add,
): ConsumerTiming | undefined {
  const record = readRecord(timing);
  if (record === undefined) {
    add(
      "ack_wait_unknown",
      "timing.ackWaitMs",
      `InProgress is enabled but no consumer timing was given${timing === undefined ? "" : ` (got ${describe(timing)})`}: pass the consumer's AckWait ({ ackWaitMs, source: "configured" }) or inspect it with CommitThenAck.forConsumer`,
    );
    return undefined;
  }

  const backOff = readBackOff(record["backOffMs"]);
  const ackWaitRaw = record["ackWaitMs"];
  // With a valid BackOff in aware mode, the server's effective AckWait is BackOff[0].
  const backOffCarriesWindow = mode === "aware" && backOff.kind === "list" && backOff.valid;

  let ackWaitMs: number | undefined;
  if (ackWaitRaw === undefined) {
    if (!backOffCarriesWindow) {
      const hint = Object.keys(record).find((k) => k !== "ackWaitMs" && normalise(k).startsWith("ackwait"));
      add(
        "ack_wait_unknown",
        "timing.ackWaitMs",
        `InProgress is enabled but the consumer timing has no ackWaitMs${hint ? ` (found ${JSON.stringify(truncate(hint))}; the field is ackWaitMs, in milliseconds)` : ""}: set ackWaitMs to the consumer's AckWait or inspect it with CommitThenAck.forConsumer`,
      );
    }
  } else if (typeof ackWaitRaw !== "number" || !Number.isFinite(ackWaitRaw) || ackWaitRaw <= 0) {
    add(
      "ack_wait_invalid",
      "timing.ackWaitMs",
      `AckWait must be a finite number of milliseconds above 0, got ${describe(ackWaitRaw)}: fix the consumer's ack_wait (or the configured ackWaitMs)`,
    );
  } else {
    ackWaitMs = ackWaitRaw;
    // When a BackOff carries the window, the server ignores AckWait (it becomes BackOff[0]) and
    // the BackOff check below is the stricter one.
    if (!backOffCarriesWindow && intervalMs !== undefined && !belowSafetyRatio(intervalMs, ackWaitMs)) {
      add(
        "interval_too_close_to_ack_wait",
        "intervalMs",
        `intervalMs ${intervalMs} must be below ${fmt(ACK_WAIT_SAFETY_RATIO * ackWaitMs)} ms (80% of AckWait ${fmt(ackWaitMs)} ms): ${wayOut(ackWaitMs, intervalMs, "ack_wait")}`,
      );
    }
  }

  if (backOff.kind === "none") {
    return freezeTiming(record, ackWaitMs, undefined);
  }
  if (mode === "reject") {
    add(
      "backoff_not_supported",
      "timing.backOffMs",
      `the consumer has a BackOff (${describeBackOff(backOff)}), which overrides AckWait per delivery: remove the consumer's backoff, or opt into BackOff-aware mode with { backOff: "aware" }`,
    );
    return undefined;
  }
  if (mode === undefined) return undefined;
  if (!backOff.valid || backOff.kind !== "list") {
    add(
      "backoff_invalid",
      "timing.backOffMs",
      `BackOff must be a list of finite durations above 0 ms, got ${describeBackOff(backOff)}: fix the consumer's backoff`,
    );
    return undefined;
  }
  const smallest = Math.min(...backOff.values);
  if (intervalMs !== undefined && !belowSafetyRatio(intervalMs, smallest)) {
    add(
      "interval_too_close_to_backoff",
      "intervalMs",
      `intervalMs ${intervalMs} must be below ${fmt(ACK_WAIT_SAFETY_RATIO * smallest)} ms (80% of the smallest BackOff step ${fmt(smallest)} ms): ${wayOut(smallest, intervalMs, "smallest backoff step")}`,
    );
  }
  return freezeTiming(record, ackWaitMs, backOff.values);
}

type BackOffReading =
  | { readonly kind: "none" }
  | { readonly kind: "list"; readonly values: readonly number[]; readonly valid: boolean }
  | { readonly kind: "malformed"; readonly valid: false; readonly raw: unknown };

function readBackOff(raw: unknown): BackOffReading {
  if (raw === undefined) return { kind: "none" };
  if (!Array.isArray(raw)) return { kind: "malformed", valid: false, raw };
  let values: unknown[];
  try {
    values = Array.from(raw as unknown[]);
  } catch {
    return { kind: "malformed", valid: false, raw: "unreadable list" };
  }
  if (values.length === 0) return { kind: "none" };
  const valid = values.every((v) => typeof v === "number" && Number.isFinite(v) && v > 0);
  return { kind: "list", values: values as number[], valid };
}

function freezeTiming(
  record: Record<string, unknown>,
  ackWaitMs: number | undefined,
  backOffMs: readonly number[] | undefined,
): ConsumerTiming {
  const out: { ackWaitMs?: number; backOffMs?: readonly number[]; maxDeliver?: number; source: ConsumerTiming["source"] } = {
    source: record["source"] === "inspected" ? "inspected" : "configured",
  };
  if (ackWaitMs !== undefined) out.ackWaitMs = ackWaitMs;
  if (backOffMs !== undefined) out.backOffMs = Object.freeze([...backOffMs]);
  const maxDeliver = record["maxDeliver"];
  if (typeof maxDeliver === "number" && Number.isInteger(maxDeliver)) out.maxDeliver = maxDeliver;
  return Object.freeze(out);
}

/**
 * `interval < 0.8 × window`, compared exactly (`5·interval < 4·window`): multiplying by 0.8
 * in floating point can round a boundary value up and let it through.
 */
function belowSafetyRatio(intervalMs: number, windowMs: number): boolean {
  return intervalMs * 5 < windowMs * 4;
}

/** The largest integer interval below 80% of `windowMs`. */
function largestSafeInterval(windowMs: number): number {
  let n = Math.floor((windowMs * 4) / 5);
  while (n > 0 && !belowSafetyRatio(n, windowMs)) n -= 1;
  return n;
}

function wayOut(windowMs: number, intervalMs: number, what: string): string {
  const most = largestSafeInterval(windowMs);
  const raise = `raise the consumer's ${what} above ${fmt(intervalMs * 1.25)} ms`;
  return most >= 1 ? `use at most ${most} or ${raise}` : `no interval fits this window; ${raise}`;
}

function describeBackOff(b: BackOffReading): string {
  if (b.kind === "list") return `[${b.values.map((v) => (typeof v === "number" ? `${fmt(v)} ms` : describe(v))).join(", ")}]`;
  if (b.kind === "malformed") return describe(b.raw);
  return "none";
}

function closestField(key: string): string | undefined {
  const n = normalise(key);
  let best: string | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const field of POLICY_FIELDS) {
    const f = normalise(field);
    const d = f === n || f.startsWith(n) || n.startsWith(f) ? 0 : levenshtein(n, f);
    if (d < bestDistance) {
      bestDistance = d;
      best = field;
    }
  }
  return bestDistance <= 3 ? best : undefined;
}

function normalise(s: string): string {
  return s.toLowerCase().replace(/[_\-\s]/g, "");
}

function levenshtein(a: string, b: string): number {
  if (a.length > 64 || b.length > 64) return Number.POSITIVE_INFINITY;
  let prev = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      cur[j] = Math.min((prev[j] ?? 0) + 1, (cur[j - 1] ?? 0) + 1, (prev[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = cur;
  }
  return prev[b.length] ?? Number.POSITIVE_INFINITY;
}

function clamp(n: number, min: number, max: number): number {
  return Math.min(max, Math.max(min, n));
}

/** Formats milliseconds without floating-point noise (24000, 1.5, 0.001). */
function fmt(n: number): string {
  return Number.isInteger(n) ? String(n) : String(Number(n.toFixed(3)));
}

function truncate(s: string, max = 32): string {
  return s.length > max ? `${s.slice(0, max)}…` : s;
}

/** A short, safe rendering of an untrusted value for a message. */
function describe(value: unknown): string {
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
