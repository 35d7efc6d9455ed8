/**
 * A durable consumer's `inactive_threshold` against the heartbeat interval, by server version.
 * Before nats-server 2.11.7 a consumer in the middle of a write is active only when it pulls or
 * acks; a write pulls nothing, so its `+WPI` frames are all that keep the consumer, and a gap
 * between two of them longer than the threshold deletes the consumer (measured: a durable with
 * a 2 s threshold, one message beaten every 4 s, deleted 2.2–3.0 s into the write on 2.9.10 and
 * 2.10.27; kept on 2.15.1, where the pending ack counts).
 */
import { PENDING_ACKS_ACTIVE_SINCE, atLeast, parseVersion } from "./server-version.js";
import { belowSafetyRatio, largestSafeInterval } from "./safety-ratio.js";
import { describe, fmt, truncate } from "./untrusted.js";

/**
 * The problem, for a person, when beats every `intervalMs` can let a consumer with
 * `inactiveThresholdMs` be deleted on the connected server; `undefined` when they cannot:
 * heartbeats off, no threshold (0 or absent), a server from 2.11.7, or an interval below 80% of
 * the threshold (the margin the AckWait rule keeps). An unknown version (a pre-release counts as
 * before its release) gets the older rule; a threshold that is not a duration is a problem
 * there too. Never throws.
 */
export function inactiveThresholdProblem(inactiveThresholdMs: unknown, intervalMs: number | undefined, serverVersion: unknown): string | undefined {
  if (typeof intervalMs !== "number" || !(intervalMs > 0) || inactiveThresholdMs === undefined || inactiveThresholdMs === 0) return undefined;
  if (atLeast(serverVersion, PENDING_ACKS_ACTIVE_SINCE) === true) return undefined;
  if (typeof inactiveThresholdMs !== "number" || !Number.isFinite(inactiveThresholdMs) || inactiveThresholdMs < 0) {
    return `its inactive_threshold ${describe(inactiveThresholdMs)} is not a duration: read the consumer's info again, or remove its inactive_threshold`;
  }
  if (belowSafetyRatio(intervalMs, inactiveThresholdMs)) return undefined;
  const server = parseVersion(serverVersion) ? `server ${truncate(String(serverVersion).trim())} (before 2.11.7)` : "a server of unknown version (taken as before 2.11.7)";
  const most = largestSafeInterval(inactiveThresholdMs);
  const use = most >= 1 ? `use an intervalMs of at most ${most}, ` : "";
  return (
    `its inactive_threshold is ${fmt(inactiveThresholdMs)} ms and intervalMs is ${fmt(intervalMs)}: on ${server} a write's +WPI frames alone keep the consumer, so it is deleted between two beats: ` +
    `${use}raise inactive_threshold above ${fmt(intervalMs * 1.25)} ms, remove it, or upgrade to 2.11.7 or later`
  );
}
