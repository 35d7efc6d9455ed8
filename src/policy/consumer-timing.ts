/**
 * Reading a consumer's ack timing from untrusted input. The one place where JetStream's
 * nanoseconds become the library's milliseconds.
 */
import type { ConsumerTiming } from "./in-progress-policy.js";
import { MAX_BACKOFF_STEPS } from "./timing-limits.js";
import { readList, readRecord } from "./untrusted.js";

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
 * this function never throws. Input that cannot be read at all (a revoked proxy, a throwing
 * getter) gives `{ source }` alone. A BackOff list longer than the guardrails accept is read
 * no further than one step past their limit, so they refuse it without the whole list being
 * copied.
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
    const list = readList(backoff, MAX_BACKOFF_STEPS, MAX_BACKOFF_STEPS + 1);
    const steps = list.kind === "list" ? list.values : list.kind === "too_long" ? list.head : [undefined];
    timing.backOffMs = steps.map(nanosToMillis);
  }
  const maxDeliver = inner["max_deliver"];
  if (typeof maxDeliver === "number") timing.maxDeliver = maxDeliver;
  return { ...timing, source: src };
}

