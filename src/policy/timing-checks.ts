/**
 * The checks of a consumer's timing: AckWait present and valid, BackOff acceptable under the
 * chosen mode, and the interval below 80% of the effective redelivery window.
 */
import type { PolicyViolation, ViolationCode } from "../errors.js";
import { ACK_WAIT_SAFETY_RATIO, type BackOffMode, type ConsumerTiming } from "./in-progress-policy.js";
import { normalise } from "./nearest-key.js";
import { describe, fmt, readRecord, truncate } from "./untrusted.js";

/** Collects one violation. */
export type Add = (code: ViolationCode, field: string, message: string) => void;

/**
 * Checks a consumer's timing on its own (no interval): AckWait present and valid, and BackOff
 * acceptable under `mode`. Used where heartbeats are off but the timing still matters (NAK
 * delays, fail-closed setup).
 */
export function checkConsumerTiming(timing: ConsumerTiming | undefined, mode: BackOffMode): readonly PolicyViolation[] {
  const violations: PolicyViolation[] = [];
  checkTiming(timing, mode, undefined, (code, field, message) => violations.push(Object.freeze({ code, field, message })));
  return Object.freeze(violations);
}

/**
 * Checks `timing` for an interval (`undefined`: the timing alone) under `mode`; returns the
 * frozen timing that passed, or `undefined` with the violations added.
 */
export function checkTiming(
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
