/**
 * The guardrails: pure checks of an InProgress policy against a consumer's effective ack
 * timing. No I/O, no timers, no clock, and nothing from NATS at run time.
 */
import { InProgressPolicyError, type PolicyViolation, type ViolationCode } from "../errors.js";
import {
  DEFAULT_IN_PROGRESS_POLICY,
  type BackOffMode,
  type CheckOptions,
  type ConsumerTiming,
  type PolicyCheck,
  type VerifiedInProgressPolicy,
} from "./in-progress-policy.js";
import { nearestKey } from "./nearest-key.js";
import { optionHome } from "./option-homes.js";
import { checkTiming, type Add } from "./timing-checks.js";
import { describe, readRecord, truncate } from "./untrusted.js";
import { markVerified } from "./verified-policies.js";

const POLICY_FIELDS = ["enabled", "intervalMs", "maxHeartbeats", "shutdownTimeoutMs"] as const;

/** Unknown fields described one by one; the rest are counted in one more violation. */
const UNKNOWN_FIELDS_SHOWN = 5;

const LIMITS = {
  intervalMs: { min: 1, max: 3_600_000, code: "invalid_interval" },
  maxHeartbeats: { min: 1, max: 10_000, code: "invalid_max_heartbeats" },
  shutdownTimeoutMs: { min: 0, max: 60_000, code: "invalid_shutdown_timeout" },
} as const satisfies Record<string, { min: number; max: number; code: ViolationCode }>;

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
  const checked = result as unknown as VerifiedInProgressPolicy;
  markVerified(checked);
  return { ok: true, policy: checked };
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
  // Every unknown key is refused, but only the first few are described: a policy with a
  // million keys must not make a million violations.
  const unknown = Object.keys(record).filter((key) => !(POLICY_FIELDS as readonly string[]).includes(key));
  for (const key of unknown.slice(0, UNKNOWN_FIELDS_SHOWN)) {
    const home = optionHome("policy", key);
    const guess = home === undefined ? nearestKey(key, POLICY_FIELDS) : undefined;
    add(
      "unknown_field",
      truncate(key, 64),
      home !== undefined
        ? `unknown field ${JSON.stringify(truncate(key))}: it is not a policy field but belongs in ${home}; move it there (policy fields: ${POLICY_FIELDS.join(", ")})`
        : `unknown field ${JSON.stringify(truncate(key))}${guess ? `: did you mean "${guess}"?` : "."} A misspelt field would silently keep its default; rename or remove it (known fields: ${POLICY_FIELDS.join(", ")})`,
    );
  }
  if (unknown.length > UNKNOWN_FIELDS_SHOWN) {
    add(
      "unknown_field",
      "policy",
      `… and ${unknown.length - UNKNOWN_FIELDS_SHOWN} more unknown fields: a policy has only ${POLICY_FIELDS.join(", ")}`,
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
  // `-0 + 0` is 0: a verified policy never carries -0.
  if (typeof value === "number" && Number.isInteger(value) && value >= min && value <= max) return value + 0;
  let fix: string;
  if (typeof value !== "number") fix = "use a number";
  else if (!Number.isFinite(value)) fix = `use a finite integer between ${min} and ${max}`;
  else if (!Number.isInteger(value)) fix = `use a whole number of ${field === "maxHeartbeats" ? "heartbeats" : "milliseconds"}, for example ${clamp(Math.round(value), min, max)}`;
  else fix = `use ${value < min ? `at least ${min}` : `at most ${max}`}`;
  add(code, field, `${field} must be an integer in ${min} ..= ${max}, got ${describe(value)}: ${fix}`);
  return undefined;
}

function clamp(n: number, min: number, max: number): number {
  return Math.min(max, Math.max(min, n));
}

