/**
 * The checks of a consumer's timing: AckWait present and valid, BackOff acceptable under the
 * chosen mode, both short enough for heartbeat timers, and the interval below 80% of the
 * effective redelivery window. Where nats-server refuses the same condition, its own words
 * are quoted so an operator can search for them.
 */
import type { PolicyViolation, ViolationCode } from "../errors.js";
import { describeBackOff, readBackOff, type BackOffReading } from "./backoff-reading.js";
import { ACK_WAIT_SAFETY_RATIO, type BackOffMode, type ConsumerTiming } from "./in-progress-policy.js";
import { normalise } from "./nearest-key.js";
import { belowSafetyRatio, largestSafeInterval } from "./safety-ratio.js";
import { LOOKS_LIKE_NANOS_MS, MAX_BACKOFF_STEPS, MAX_WINDOW_MS } from "./timing-limits.js";
import { describe, fmt, isPositiveFinite, readRecord, truncate } from "./untrusted.js";

/** Collects one violation. */
export type Add = (code: ViolationCode, field: string, message: string) => void;

/**
 * Checks a consumer's timing on its own (no interval): AckWait present and valid, and BackOff
 * acceptable under `mode`. Used where heartbeats are off but the timing still matters (NAK
 * delays, fail-closed setup); the one-day limit of heartbeat windows does not apply. Never
 * throws.
 */
export function checkConsumerTiming(timing: ConsumerTiming | undefined, mode: BackOffMode): readonly PolicyViolation[] {
  const violations: PolicyViolation[] = [];
  checkTiming(timing, mode, undefined, (code, field, message) => violations.push(Object.freeze({ code, field, message })), false);
  return Object.freeze(violations);
}

/**
 * Checks `timing` for an interval (`undefined`: none to compare) under `mode`; returns the
 * frozen timing that passed, or `undefined` with the violations added. `heartbeats` (default
 * true) also holds every window to {@link MAX_WINDOW_MS}.
 */
export function checkTiming(
  timing: unknown,
  mode: BackOffMode | undefined,
  intervalMs: number | undefined,
  add: Add,
  heartbeats = true,
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
  let refused = false;
  const refuse: Add = (code, field, message) => {
    refused = true;
    add(code, field, message);
  };

  const backOff = readBackOff(record["backOffMs"]);
  const ackWaitRaw = record["ackWaitMs"];
  // With a valid BackOff in aware mode, the server's effective AckWait is BackOff[0].
  const backOffCarriesWindow = mode === "aware" && backOff.kind === "valid";

  let ackWaitMs: number | undefined;
  if (ackWaitRaw === undefined) {
    if (!backOffCarriesWindow) {
      const hint = Object.keys(record).find((k) => k !== "ackWaitMs" && k.length <= 64 && normalise(k).startsWith("ackwait"));
      refuse(
        "ack_wait_unknown",
        "timing.ackWaitMs",
        `InProgress is enabled but the consumer timing has no ackWaitMs${hint ? ` (found ${JSON.stringify(truncate(hint))}; the field is ackWaitMs, in milliseconds)` : ""}: set ackWaitMs to the consumer's AckWait or inspect it with CommitThenAck.forConsumer`,
      );
    }
  } else if (!isPositiveFinite(ackWaitRaw)) {
    refuse(
      "ack_wait_invalid",
      "timing.ackWaitMs",
      `AckWait must be a finite number of milliseconds above 0, got ${describe(ackWaitRaw)}${invalidNote(ackWaitRaw, "ack wait")}: fix the consumer's ack_wait (or the configured ackWaitMs)`,
    );
  } else if (backOffCarriesWindow) {
    ackWaitMs = ackWaitRaw;
    const first = backOff.values[0]!;
    if (ackWaitMs !== first) {
      refuse(
        "ack_wait_backoff_mismatch",
        "timing.ackWaitMs",
        `ackWaitMs ${fmt(ackWaitMs)} differs from BackOff[0] ${fmt(first)} ms: with a BackOff the server ignores ack_wait and waits BackOff[0], and a pedantic nats-server (2.11+) refuses such a consumer ("pedantic mode: first backoff value has to equal batch AckWait"): set ackWaitMs to ${fmt(first)} or read the timing with consumerTimingFromConfig`,
      );
    }
  } else {
    ackWaitMs = ackWaitRaw;
    if (heartbeats && ackWaitMs > MAX_WINDOW_MS) {
      refuse("ack_wait_too_long", "timing.ackWaitMs", tooLong("AckWait", ackWaitMs, "ack_wait"));
    } else if (intervalMs !== undefined && !belowSafetyRatio(intervalMs, ackWaitMs)) {
      refuse(
        "interval_too_close_to_ack_wait",
        "intervalMs",
        `intervalMs ${intervalMs} must be below ${fmt(ACK_WAIT_SAFETY_RATIO * ackWaitMs)} ms (80% of AckWait ${fmt(ackWaitMs)} ms): ${wayOut(ackWaitMs, intervalMs, "ack_wait")}`,
      );
    }
  }

  if (backOff.kind === "none") {
    return refused ? undefined : freezeTiming(record, ackWaitMs, undefined);
  }
  if (mode === "reject") {
    refuse(
      "backoff_not_supported",
      "timing.backOffMs",
      `the consumer has a BackOff (${describeBackOff(backOff)}), which overrides AckWait per delivery${ignoredAckWait(ackWaitRaw, backOff)}${negativeStep(backOff)}: remove the consumer's backoff, or opt into BackOff-aware mode with { backOff: "aware" }`,
    );
    return undefined;
  }
  if (mode === undefined) return undefined;
  if (backOff.kind !== "valid") {
    refuse("backoff_invalid", "timing.backOffMs", backOffProblem(backOff));
    return undefined;
  }
  if (heartbeats && backOff.longest.value > MAX_WINDOW_MS) {
    refuse("ack_wait_too_long", "timing.backOffMs", tooLong(`BackOff[${backOff.longest.index}]`, backOff.longest.value, "backoff"));
  }
  const smallest = backOff.smallest;
  if (intervalMs !== undefined && !belowSafetyRatio(intervalMs, smallest)) {
    refuse(
      "interval_too_close_to_backoff",
      "intervalMs",
      `intervalMs ${intervalMs} must be below ${fmt(ACK_WAIT_SAFETY_RATIO * smallest)} ms (80% of the smallest BackOff step ${fmt(smallest)} ms): ${wayOut(smallest, intervalMs, "smallest backoff step")}`,
    );
  }
  return refused ? undefined : freezeTiming(record, ackWaitMs, backOff.values);
}

/** Why a duration is refused, in the server's words where it refuses it too. */
function invalidNote(v: unknown, what: "ack wait" | "backoff"): string {
  if (typeof v === "bigint") return ", a bigint: durations are numbers of milliseconds (convert it with Number())";
  if (typeof v === "number" && v < 0) return `, which nats-server 2.12+ refuses ("consumer ${what} needs to be positive")`;
  if (typeof v === "number" && v === 0 && what === "backoff") return ", which makes the server redeliver at once";
  return "";
}

function backOffProblem(b: Exclude<BackOffReading, { kind: "none" | "valid" }>): string {
  if (b.kind === "too_long") {
    return `BackOff has more than ${MAX_BACKOFF_STEPS} steps, the most this library reads: the server repeats the last step for every later delivery, so shorten the consumer's backoff`;
  }
  const which = b.kind === "bad_step" ? `; BackOff[${b.bad.index}] is ${describe(b.bad.value)}${invalidNote(b.bad.value, "backoff")}` : "";
  return `BackOff must be a list of finite durations above 0 ms, got ${describeBackOff(b)}${which}: fix the consumer's backoff`;
}

/** In reject mode: when AckWait and BackOff[0] differ, the server goes by BackOff[0]. */
function ignoredAckWait(ackWait: unknown, b: BackOffReading): string {
  if (b.kind !== "valid" || !isPositiveFinite(ackWait) || ackWait === b.values[0]) return "";
  return `; the server ignores ack_wait ${fmt(ackWait)} ms and waits BackOff[0] ${fmt(b.values[0]!)} ms`;
}

/** In reject mode: a negative step, which newer servers refuse outright. */
function negativeStep(b: BackOffReading): string {
  return b.kind === "bad_step" && b.negative ? `; a negative step, which nats-server 2.12+ refuses ("consumer backoff needs to be positive")` : "";
}

/** An AckWait or BackOff step above one day, with the nanosecond suspicion when it fits. */
function tooLong(what: string, valueMs: number, setting: "ack_wait" | "backoff"): string {
  const nanos = valueMs >= LOOKS_LIKE_NANOS_MS;
  const why = nanos ? `; it looks like nanoseconds passed as milliseconds (${fmt(valueMs)} ns is ${fmt(valueMs / 1e6)} ms)` : "";
  const fix = nanos
    ? `pass milliseconds (consumerTimingFromConfig converts a ConsumerConfig's nanoseconds)`
    : `lower the consumer's ${setting} to at most a day, or leave InProgress off for this consumer`;
  return `${what} ${fmt(valueMs)} ms is above the one-day limit for heartbeats (${MAX_WINDOW_MS} ms)${why}: ${fix}`;
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

function wayOut(windowMs: number, intervalMs: number, what: string): string {
  const most = largestSafeInterval(windowMs);
  const raise = `raise the consumer's ${what} above ${fmt(intervalMs * 1.25)} ms`;
  return most >= 1 ? `use at most ${most} or ${raise}` : `no interval fits this window; ${raise}`;
}
