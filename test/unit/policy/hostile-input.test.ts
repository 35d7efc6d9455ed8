/**
 * Regression tests: hostile input never throws out of the guardrails, and reading it is
 * bounded in time and memory. Each case is one that once threw, spun or ran out of memory.
 */
import { describe, expect, it } from "vitest";
import {
  InProgressPolicyError,
  checkInProgressPolicy,
  consumerTimingFromConfig,
  verifyInProgressPolicy,
  type ConsumerTiming,
  type PolicyCheck,
  type ViolationCode,
} from "../../../src/index.js";
import { maxDeliverProblem } from "../../../src/policy/max-deliver.js";
import { MAX_NAK_DELAY_MS, nakDelay } from "../../../src/policy/nak-delay.js";
import { windowFor, windowIsShared } from "../../../src/policy/redelivery-window.js";
import { atLeast, parseVersion } from "../../../src/policy/server-version.js";
import { checkConsumerTiming } from "../../../src/policy/timing-checks.js";
import { MAX_BACKOFF_STEPS } from "../../../src/policy/timing-limits.js";

const AWARE = { backOff: "aware" } as const;
const POLICY = { enabled: true, intervalMs: 100 };

const codes = (r: PolicyCheck): ViolationCode[] => (r.ok ? [] : r.violations.map((v) => v.code));
const messages = (r: PolicyCheck): string[] => (r.ok ? [] : r.violations.map((v) => v.message));
const check = (policy: unknown, timing: unknown, options?: unknown) => checkInProgressPolicy(policy, timing as ConsumerTiming, options as never);
/** Stands in for a verified policy built by hand, for the functions that take one. */
const asVerified = (p: unknown) => p as Parameters<typeof windowFor>[0];

function revoked<T extends object>(target: T): T {
  const { proxy, revoke } = Proxy.revocable(target, {});
  revoke();
  return proxy;
}
function throwingGetter(key: string): object {
  return Object.defineProperty({}, key, {
    enumerable: true,
    get() {
      throw new Error("boom");
    },
  });
}
/** A list whose item reads are counted. */
function counted(list: unknown[]): { list: unknown[]; reads: () => number } {
  let reads = 0;
  const proxy = new Proxy(list, {
    get(target, key, receiver) {
      if (typeof key === "string" && /^\d+$/.test(key)) reads++;
      return Reflect.get(target, key, receiver) as unknown;
    },
  });
  return { list: proxy, reads: () => reads };
}

describe("regression: a BackOff of 130,000 steps (Math.min spread overflowed the stack)", () => {
  const steps = Array.from({ length: 130_000 }, (_, i) => 1000 + i);

  it("is refused with the limit named, never a RangeError", () => {
    const r = check(POLICY, { backOffMs: steps, source: "inspected" }, AWARE);
    expect(codes(r)).toEqual(["ack_wait_unknown", "backoff_invalid"]);
    expect(messages(r)[1]).toContain(`more than ${MAX_BACKOFF_STEPS} steps`);
    expect(codes(check(POLICY, { ackWaitMs: 1000, backOffMs: steps, source: "inspected" }))).toEqual(["backoff_not_supported"]);
    expect(checkConsumerTiming({ backOffMs: steps, source: "inspected" }, "aware").map((v) => v.code)).toEqual(["ack_wait_unknown", "backoff_invalid"]);
  });

  it("the longest accepted list is checked in loops, and its smallest step found", () => {
    const longest = Array.from({ length: MAX_BACKOFF_STEPS }, (_, i) => 10_000 - (i % 7_001));
    const r = check({ enabled: true, intervalMs: 2399 }, { backOffMs: longest, source: "inspected" }, AWARE);
    expect(r.ok).toBe(true);
    expect(codes(check({ enabled: true, intervalMs: 2400 }, { backOffMs: longest, source: "inspected" }, AWARE))).toEqual(["interval_too_close_to_backoff"]);
  });

  it("windowFor, windowIsShared and nakDelay loop instead of spreading", () => {
    const policy = asVerified({ enabled: true, intervalMs: 100, backOff: "aware", timing: { backOffMs: steps, source: "inspected" } });
    expect(() => windowFor(policy, undefined)).not.toThrow();
    expect(windowFor(policy, undefined)).toBe(1000);
    expect(windowFor(policy, 2)).toBe(1001);
    expect(windowIsShared(policy)).toBe(false);
    expect(nakDelay(5000, undefined, steps).sendMs).toBeGreaterThanOrEqual(1);
  });

  it("consumerTimingFromConfig reads no more than one step past the limit", () => {
    const { list, reads } = counted(steps.map((ms) => ms * 1e6));
    const t = consumerTimingFromConfig({ config: { ack_wait: 1e9, backoff: list } });
    expect(reads()).toBeLessThanOrEqual(MAX_BACKOFF_STEPS + 1);
    expect(t.backOffMs?.length).toBe(MAX_BACKOFF_STEPS + 1);
    expect(codes(check(POLICY, t, AWARE))).toEqual(["backoff_invalid"]);
  });
});

describe("regression: a sparse BackOff of 2^24 steps (built a 184 MB message)", () => {
  const sparse: number[] = [];
  sparse.length = 2 ** 24;
  sparse[0] = 1000;

  it("is refused with a short message, in bounded time, without reading its items", () => {
    const { list, reads } = counted(sparse);
    for (const options of [AWARE, undefined]) {
      const r = check(POLICY, { ackWaitMs: 1000, backOffMs: list, source: "inspected" }, options);
      expect(r.ok).toBe(false);
      for (const m of messages(r)) expect(m.length).toBeLessThan(400);
    }
    expect(reads()).toBe(0);
  });

  it("a sparse list within the limit is described by its first steps and a count", () => {
    const holes: number[] = [];
    holes.length = MAX_BACKOFF_STEPS;
    holes[0] = 1000;
    const r = check(POLICY, { ackWaitMs: 1000, backOffMs: holes, source: "inspected" }, AWARE);
    expect(codes(r)).toEqual(["backoff_invalid"]);
    expect(messages(r)[0]).toContain(`[1000 ms, undefined, undefined, undefined, … and ${MAX_BACKOFF_STEPS - 4} more]`);
    expect(messages(r)[0]).toContain("; BackOff[1] is undefined: fix");
    expect(messages(r)[0]!.length).toBeLessThan(400);
    const rejected = check(POLICY, { ackWaitMs: 1000, backOffMs: holes, source: "inspected" });
    expect(messages(rejected)[0]!.length).toBeLessThan(400);
  });

  it("consumerTimingFromConfig and windowFor stay bounded on it: they read at most the limit's steps, never its 2^24", () => {
    // Counted reads, not a stopwatch: the bound holds however busy the machine is.
    const config = counted(sparse);
    const t = consumerTimingFromConfig({ config: { ack_wait: 1e9, backoff: config.list } });
    expect(t.backOffMs?.length).toBe(MAX_BACKOFF_STEPS + 1);
    expect(config.reads()).toBeGreaterThan(0);
    expect(config.reads()).toBeLessThanOrEqual(MAX_BACKOFF_STEPS + 1);
    const timing = counted(sparse);
    const policy = asVerified({ enabled: true, backOff: "aware", timing: { backOffMs: timing.list } });
    expect(windowFor(policy, undefined)).toBe(1000);
    expect(timing.reads()).toBeLessThanOrEqual(MAX_BACKOFF_STEPS + 1);
  });

  it("a list that lies about its length is refused without a read", () => {
    const liar = new Proxy([1000], { get: (t, k) => (k === "length" ? 2 ** 32 - 1 : Reflect.get(t, k)) });
    expect(codes(check(POLICY, { backOffMs: liar, source: "inspected" }, AWARE))).toEqual(["ack_wait_unknown", "backoff_invalid"]);
    const nonsense = new Proxy([1000], { get: (t, k) => (k === "length" ? "many" : Reflect.get(t, k)) });
    expect(messages(check(POLICY, { ackWaitMs: 1000, backOffMs: nonsense, source: "inspected" }, AWARE))[0]).toContain("unreadable list");
  });
});

describe("regression: revoked proxies (Array.isArray threw before the try)", () => {
  it("as the policy, the timing, the options or the BackOff: a violation, never a TypeError", () => {
    expect(codes(check(revoked({}), { ackWaitMs: 30_000, source: "configured" }))).toEqual(["invalid_policy"]);
    expect(codes(check(revoked([]), { ackWaitMs: 30_000, source: "configured" }))).toEqual(["invalid_policy"]);
    expect(messages(check(revoked({}), undefined))[0]).toContain("revoked proxy");
    expect(codes(check({ enabled: true }, revoked({})))).toEqual(["ack_wait_unknown"]);
    expect(codes(check({ enabled: true }, { ackWaitMs: 30_000, source: "configured" }, revoked({})))).toEqual(["invalid_backoff_mode"]);
    expect(codes(check(POLICY, { ackWaitMs: 1000, backOffMs: revoked([]), source: "inspected" }, AWARE))).toEqual(["backoff_invalid"]);
    expect(codes(check(POLICY, { ackWaitMs: 1000, backOffMs: revoked([]), source: "inspected" }))).toEqual(["backoff_not_supported"]);
    expect(codes(check(POLICY, { ackWaitMs: revoked({}), source: "inspected" }))).toEqual(["ack_wait_invalid"]);
    expect(checkConsumerTiming(revoked({}) as ConsumerTiming, "reject").map((v) => v.code)).toEqual(["ack_wait_unknown"]);
  });

  it("verifyInProgressPolicy throws only InProgressPolicyError", () => {
    expect(() => verifyInProgressPolicy(revoked({}), undefined)).toThrow(InProgressPolicyError);
    expect(() => verifyInProgressPolicy({ enabled: true }, revoked({}) as ConsumerTiming)).toThrow(InProgressPolicyError);
    expect(() => verifyInProgressPolicy({ enabled: true }, undefined, revoked({}) as never)).toThrow(InProgressPolicyError);
  });

  it("consumerTimingFromConfig reads nothing from a revoked proxy", () => {
    expect(consumerTimingFromConfig(revoked({}))).toEqual({ source: "inspected" });
    expect(consumerTimingFromConfig(revoked({}), "configured")).toEqual({ source: "configured" });
    expect(consumerTimingFromConfig({ config: revoked({}) })).toEqual({ source: "inspected" });
    const t = consumerTimingFromConfig({ config: { ack_wait: 1e9, backoff: revoked([]) } });
    expect(t.ackWaitMs).toBe(1000);
    expect(t.backOffMs).toEqual([Number.NaN]);
  });

  it("windowFor, windowIsShared, nakDelay, maxDeliverProblem and atLeast", () => {
    expect(windowFor(revoked({}) as never, 1)).toBe(0);
    expect(windowIsShared(revoked({}) as never)).toBe(true);
    expect(windowFor(asVerified({ backOff: "aware", timing: revoked({}) }), 1)).toBe(0);
    expect(nakDelay(5000, 2, revoked([]))).toEqual({ sendMs: 5000, effectiveMs: 5000, adjusted: false });
    expect(maxDeliverProblem(revoked({}) as never, 2, "2.10.23")).toContain("not a whole number");
    expect(maxDeliverProblem(3, revoked({}) as never, revoked({}) as never)).toContain("not a whole number");
    expect(atLeast(revoked({}), [2, 10, 4])).toBeUndefined();
    expect(parseVersion(revoked({}))).toBeUndefined();
  });
});

describe("regression: throwing getters", () => {
  it("anywhere in the input are reported, not thrown", () => {
    expect(codes(check(throwingGetter("intervalMs"), undefined))).toEqual(["invalid_policy"]);
    expect(codes(check({ enabled: true }, throwingGetter("ackWaitMs")))).toEqual(["ack_wait_unknown"]);
    expect(codes(check({ enabled: true }, { ackWaitMs: 30_000, source: "configured" }, throwingGetter("backOff")))).toEqual(["invalid_backoff_mode"]);
    const list = Object.defineProperty([1000, 2000], 1, {
      get() {
        throw new Error("boom");
      },
    });
    expect(codes(check(POLICY, { ackWaitMs: 1000, backOffMs: list, source: "inspected" }, AWARE))).toEqual(["backoff_invalid"]);
    expect(consumerTimingFromConfig(throwingGetter("config"))).toEqual({ source: "inspected" });
    expect(consumerTimingFromConfig({ config: { ack_wait: 1e9, backoff: list } }).backOffMs).toEqual([Number.NaN]);
    expect(windowFor(asVerified(throwingGetter("timing")), 1)).toBe(0);
    expect(nakDelay(5000, 2, list)).toEqual({ sendMs: 5000, effectiveMs: 5000, adjusted: false });
  });
});

describe("regression: odd numbers and non-numbers", () => {
  it("bigint durations are reported with the conversion to use", () => {
    const r = check({ enabled: true }, { ackWaitMs: 30_000n, source: "configured" });
    expect(codes(r)).toEqual(["ack_wait_invalid"]);
    expect(messages(r)[0]).toContain("got the bigint 30000n");
    expect(messages(r)[0]).toContain("Number()");
    expect(codes(check(POLICY, { backOffMs: [1000n], source: "inspected" }, AWARE))).toEqual(["ack_wait_unknown", "backoff_invalid"]);
    expect(messages(check({ intervalMs: 10n ** 400n }, undefined))[0]).toContain("a bigint of more than 24 digits");
    expect(consumerTimingFromConfig({ ack_wait: 30_000_000_000n, backoff: [1_000_000_000n] })).toEqual({ ackWaitMs: 30_000, backOffMs: [1000], source: "inspected" });
  });

  it("-0 is no duration, and a valid -0 never reaches a verified policy", () => {
    expect(codes(check({ intervalMs: -0 }, undefined))).toEqual(["invalid_interval"]);
    expect(messages(check({ intervalMs: -0 }, undefined))[0]).toContain("got -0");
    const r = check({ shutdownTimeoutMs: -0 }, undefined);
    expect(r.ok && Object.is(r.policy.shutdownTimeoutMs, 0)).toBe(true);
    expect(codes(check({ enabled: true }, { ackWaitMs: -0, source: "configured" }))).toEqual(["ack_wait_invalid"]);
    expect(codes(check(POLICY, { ackWaitMs: 1000, backOffMs: [1000, -0], source: "inspected" }, AWARE))).toEqual(["backoff_invalid"]);
  });

  it("NaN, Infinity, strings and huge numbers never enable heartbeats", () => {
    for (const ackWaitMs of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, "30000", Number.MAX_VALUE, 1e300, null, {}, []]) {
      const r = check({ enabled: true, intervalMs: 1000 }, { ackWaitMs, source: "configured" });
      expect(r.ok, String(ackWaitMs)).toBe(false);
      for (const m of messages(r)) expect(m.length).toBeLessThan(400);
    }
    for (const step of [Number.NaN, Number.POSITIVE_INFINITY, "1s", Number.MAX_VALUE, null]) {
      expect(check(POLICY, { backOffMs: [1000, step], source: "inspected" }, AWARE).ok).toBe(false);
    }
    const huge = check({ enabled: true, interval_ms: 1, ["k".repeat(1_000_000)]: 1 }, undefined);
    for (const v of huge.ok ? [] : huge.violations) {
      expect(v.message.length).toBeLessThan(400);
      expect(v.field.length).toBeLessThanOrEqual(65);
    }
  });

  it("a policy with a thousand unknown fields gives a bounded list of violations", () => {
    const policy = Object.fromEntries(Array.from({ length: 1000 }, (_, i) => [`field${i}`, i]));
    const r = check(policy, undefined);
    expect(codes(r)).toEqual(Array(6).fill("unknown_field"));
    expect(messages(r)[5]).toContain("… and 995 more unknown fields");
  });

  it("nakDelay sends only delays the server can parse", () => {
    expect(nakDelay(Number.NaN, 2, [1000, 4000])).toEqual({ sendMs: 0, effectiveMs: 0, adjusted: false });
    expect(nakDelay(-5, 2, undefined)).toEqual({ sendMs: 0, effectiveMs: 0, adjusted: false });
    expect(nakDelay("5000" as never, 2, undefined)).toEqual({ sendMs: 0, effectiveMs: 0, adjusted: false });
    expect(nakDelay(Number.POSITIVE_INFINITY, 2, undefined)).toEqual({ sendMs: MAX_NAK_DELAY_MS, effectiveMs: MAX_NAK_DELAY_MS, adjusted: true });
    expect(nakDelay(5000, Number.NaN, [1000, 4000])).toEqual({ sendMs: 2000, effectiveMs: 5000, adjusted: false });
    expect(nakDelay(5000, 0, [1000, 4000])).toEqual({ sendMs: 2000, effectiveMs: 5000, adjusted: false });
    expect(nakDelay(5000, 2.5, [1000, 4000])).toEqual({ sendMs: 2000, effectiveMs: 5000, adjusted: false });
    expect(nakDelay(5000, 2, [Number.NaN, 4000])).toEqual({ sendMs: 5000, effectiveMs: 5000, adjusted: false });
  });

  it("windowFor takes the smallest step for an unusable delivery count", () => {
    const policy = asVerified({ enabled: true, backOff: "aware", timing: { backOffMs: [4000, 1000, 8000] } });
    for (const n of [undefined, Number.NaN, 0, -3, "2" as never]) expect(windowFor(policy, n)).toBe(1000);
    expect(windowFor(policy, 1.9)).toBe(4000);
    expect(windowFor(policy, Number.POSITIVE_INFINITY)).toBe(8000);
  });

  it("maxDeliverProblem and parseVersion take any value", () => {
    expect(maxDeliverProblem(Symbol("x") as never, 2, undefined)).toContain("not a whole number");
    expect(maxDeliverProblem(Number.NaN, 2, "2.10.23")).toContain("not a whole number");
    expect(maxDeliverProblem(3, Number.NaN, "2.10.23")).toContain("not a whole number");
    expect(maxDeliverProblem(3, 2, "x".repeat(1_000_000))).toBeUndefined();
    expect(maxDeliverProblem(-1, 2, `2.9.10${"x".repeat(1_000_000)}`)!.length).toBeLessThan(400);
    expect(parseVersion(`2.10.4${" ".repeat(1_000_000)}`)).toBeUndefined();
    expect(parseVersion("99999999999999999999.0.0")?.release[0]).toBe(1e20);
    expect(atLeast(42, [2, 10, 4])).toBeUndefined();
  });
});
