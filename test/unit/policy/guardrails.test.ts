import { describe, expect, it } from "vitest";
import fc from "fast-check";
import {
  ACK_WAIT_SAFETY_RATIO,
  DEFAULT_IN_PROGRESS_POLICY,
  InProgressPolicyError,
  checkInProgressPolicy,
  consumerTimingFromConfig,
  verifyInProgressPolicy,
  type ConsumerTiming,
  type ViolationCode,
} from "../../../src/index.js";
import { isVerifiedPolicy } from "../../../src/policy/verified-policies.js";

const T30: ConsumerTiming = { ackWaitMs: 30_000, source: "configured" };
const codes = (policy: unknown, timing?: unknown, options?: unknown): ViolationCode[] => {
  const r = checkInProgressPolicy(policy, timing as ConsumerTiming | undefined, options as never);
  return r.ok ? [] : r.violations.map((v) => v.code);
};

describe("constants", () => {
  it("has the documented defaults and ratio", () => {
    expect(DEFAULT_IN_PROGRESS_POLICY).toEqual({ enabled: false, intervalMs: 5000, maxHeartbeats: 12, shutdownTimeoutMs: 5000 });
    expect(Object.isFrozen(DEFAULT_IN_PROGRESS_POLICY)).toBe(true);
    expect(ACK_WAIT_SAFETY_RATIO).toBe(0.8);
  });
});

describe("checkInProgressPolicy: table of cases", () => {
  const cases: Array<[string, unknown, unknown, unknown, ViolationCode[]]> = [
    // [name, policy, timing, options, expected codes]
    ["undefined policy is the disabled default", undefined, undefined, undefined, []],
    ["empty object is the disabled default", {}, undefined, undefined, []],
    ["disabled needs no timing", { enabled: false, intervalMs: 1000 }, undefined, undefined, []],
    ["disabled ignores an unsafe timing", { enabled: false }, { ackWaitMs: 1, backOffMs: [1], source: "configured" }, undefined, []],
    ["null policy", null, T30, undefined, ["invalid_policy"]],
    ["string policy", "enabled", T30, undefined, ["invalid_policy"]],
    ["array policy", [true], T30, undefined, ["invalid_policy"]],
    ["number policy", 5, T30, undefined, ["invalid_policy"]],
    ["misspelt field", { enabled: true, intervalMS: 1000 }, T30, undefined, ["unknown_field"]],
    ["snake_case field", { interval_ms: 1000 }, undefined, undefined, ["unknown_field"]],
    ["enabled as string", { enabled: "true" }, T30, undefined, ["invalid_enabled"]],
    ["enabled as 1", { enabled: 1 }, T30, undefined, ["invalid_enabled"]],
    ["enabled null", { enabled: null }, T30, undefined, ["invalid_enabled"]],
    ["interval 0", { intervalMs: 0 }, undefined, undefined, ["invalid_interval"]],
    ["interval 1 (lower bound)", { enabled: true, intervalMs: 1 }, T30, undefined, []],
    ["interval negative", { intervalMs: -5 }, undefined, undefined, ["invalid_interval"]],
    ["interval fractional", { intervalMs: 1000.5 }, undefined, undefined, ["invalid_interval"]],
    ["interval NaN", { intervalMs: Number.NaN }, undefined, undefined, ["invalid_interval"]],
    ["interval Infinity", { intervalMs: Number.POSITIVE_INFINITY }, undefined, undefined, ["invalid_interval"]],
    ["interval string", { intervalMs: "5000" }, undefined, undefined, ["invalid_interval"]],
    ["interval null", { intervalMs: null }, undefined, undefined, ["invalid_interval"]],
    ["interval upper bound", { intervalMs: 3_600_000 }, undefined, undefined, []],
    ["interval above upper bound", { intervalMs: 3_600_001 }, undefined, undefined, ["invalid_interval"]],
    ["interval huge", { intervalMs: Number.MAX_SAFE_INTEGER }, undefined, undefined, ["invalid_interval"]],
    ["interval bigint", { intervalMs: 5000n }, undefined, undefined, ["invalid_interval"]],
    ["maxHeartbeats 0", { maxHeartbeats: 0 }, undefined, undefined, ["invalid_max_heartbeats"]],
    ["maxHeartbeats 1", { maxHeartbeats: 1 }, undefined, undefined, []],
    ["maxHeartbeats 10000", { maxHeartbeats: 10_000 }, undefined, undefined, []],
    ["maxHeartbeats 10001", { maxHeartbeats: 10_001 }, undefined, undefined, ["invalid_max_heartbeats"]],
    ["maxHeartbeats fractional", { maxHeartbeats: 2.5 }, undefined, undefined, ["invalid_max_heartbeats"]],
    ["shutdownTimeout 0", { shutdownTimeoutMs: 0 }, undefined, undefined, []],
    ["shutdownTimeout 60000", { shutdownTimeoutMs: 60_000 }, undefined, undefined, []],
    ["shutdownTimeout 60001", { shutdownTimeoutMs: 60_001 }, undefined, undefined, ["invalid_shutdown_timeout"]],
    ["shutdownTimeout negative", { shutdownTimeoutMs: -1 }, undefined, undefined, ["invalid_shutdown_timeout"]],
    ["enabled, no timing", { enabled: true }, undefined, undefined, ["ack_wait_unknown"]],
    ["enabled, null timing", { enabled: true }, null, undefined, ["ack_wait_unknown"]],
    ["enabled, timing without ackWait", { enabled: true }, { source: "configured" }, undefined, ["ack_wait_unknown"]],
    ["enabled, ackWait 0", { enabled: true }, { ackWaitMs: 0, source: "inspected" }, undefined, ["ack_wait_invalid"]],
    ["enabled, ackWait negative", { enabled: true }, { ackWaitMs: -30_000, source: "inspected" }, undefined, ["ack_wait_invalid"]],
    ["enabled, ackWait NaN", { enabled: true }, { ackWaitMs: Number.NaN, source: "inspected" }, undefined, ["ack_wait_invalid"]],
    ["enabled, ackWait Infinity", { enabled: true }, { ackWaitMs: Number.POSITIVE_INFINITY, source: "inspected" }, undefined, ["ack_wait_invalid"]],
    ["enabled, ackWait string", { enabled: true }, { ackWaitMs: "30s", source: "configured" }, undefined, ["ack_wait_invalid"]],
    ["interval just below 80%", { enabled: true, intervalMs: 23_999 }, T30, undefined, []],
    ["interval exactly 80% is unsafe", { enabled: true, intervalMs: 24_000 }, T30, undefined, ["interval_too_close_to_ack_wait"]],
    ["interval above AckWait", { enabled: true, intervalMs: 40_000 }, T30, undefined, ["interval_too_close_to_ack_wait"]],
    ["default interval vs 5 s AckWait", { enabled: true }, { ackWaitMs: 5000, source: "configured" }, undefined, ["interval_too_close_to_ack_wait"]],
    ["BackOff rejected by default", { enabled: true, intervalMs: 500 }, { ackWaitMs: 1000, backOffMs: [1000, 4000], source: "inspected" }, undefined, ["backoff_not_supported"]],
    ["BackOff rejected in reject mode", { enabled: true, intervalMs: 500 }, { ackWaitMs: 1000, backOffMs: [1000], source: "inspected" }, { backOff: "reject" }, ["backoff_not_supported"]],
    ["malformed BackOff (null) rejected", { enabled: true }, { ackWaitMs: 30_000, backOffMs: null, source: "inspected" }, undefined, ["backoff_not_supported"]],
    ["malformed BackOff (string) rejected", { enabled: true }, { ackWaitMs: 30_000, backOffMs: "1s", source: "inspected" }, undefined, ["backoff_not_supported"]],
    ["empty BackOff means none", { enabled: true }, { ackWaitMs: 30_000, backOffMs: [], source: "inspected" }, undefined, []],
    ["aware: valid BackOff", { enabled: true, intervalMs: 700 }, { ackWaitMs: 1000, backOffMs: [1000, 4000], source: "inspected" }, { backOff: "aware" }, []],
    ["aware: BackOff alone carries the window", { enabled: true, intervalMs: 700 }, { backOffMs: [1000, 4000], source: "inspected" }, { backOff: "aware" }, []],
    ["aware: 80% of the smallest step is unsafe", { enabled: true, intervalMs: 800 }, { ackWaitMs: 1000, backOffMs: [1000, 4000], source: "inspected" }, { backOff: "aware" }, ["interval_too_close_to_backoff"]],
    ["aware: smallest step need not be first", { enabled: true, intervalMs: 700 }, { backOffMs: [4000, 800], source: "inspected" }, { backOff: "aware" }, ["interval_too_close_to_backoff"]],
    ["aware: BackOff with NaN", { enabled: true, intervalMs: 100 }, { ackWaitMs: 1000, backOffMs: [1000, Number.NaN], source: "inspected" }, { backOff: "aware" }, ["backoff_invalid"]],
    ["aware: BackOff with 0", { enabled: true, intervalMs: 100 }, { ackWaitMs: 1000, backOffMs: [0], source: "inspected" }, { backOff: "aware" }, ["backoff_invalid"]],
    ["aware: BackOff with negative", { enabled: true, intervalMs: 100 }, { ackWaitMs: 1000, backOffMs: [-1000], source: "inspected" }, { backOff: "aware" }, ["backoff_invalid"]],
    ["aware: BackOff not a list", { enabled: true, intervalMs: 100 }, { ackWaitMs: 1000, backOffMs: { a: 1 }, source: "inspected" }, { backOff: "aware" }, ["backoff_invalid"]],
    ["aware: BackOff of strings", { enabled: true, intervalMs: 100 }, { ackWaitMs: 1000, backOffMs: ["1s"], source: "inspected" }, { backOff: "aware" }, ["backoff_invalid"]],
    ["aware: no BackOff falls back to AckWait", { enabled: true, intervalMs: 24_000 }, T30, { backOff: "aware" }, ["interval_too_close_to_ack_wait"]],
    ["aware: invalid BackOff and no AckWait", { enabled: true, intervalMs: 100 }, { backOffMs: [Number.NaN], source: "inspected" }, { backOff: "aware" }, ["ack_wait_unknown", "backoff_invalid"]],
    ["ackWait of one day", { enabled: true }, { ackWaitMs: 86_400_000, source: "configured" }, undefined, []],
    ["ackWait above one day", { enabled: true }, { ackWaitMs: 86_400_001, source: "configured" }, undefined, ["ack_wait_too_long"]],
    ["ackWait in nanoseconds", { enabled: true }, { ackWaitMs: 30_000_000_000, source: "configured" }, undefined, ["ack_wait_too_long"]],
    ["aware: BackOff step above one day", { enabled: true, intervalMs: 700 }, { backOffMs: [1000, 86_400_001], source: "inspected" }, { backOff: "aware" }, ["ack_wait_too_long"]],
    ["aware: AckWait differs from BackOff[0]", { enabled: true, intervalMs: 700 }, { ackWaitMs: 30_000, backOffMs: [1000, 4000], source: "configured" }, { backOff: "aware" }, ["ack_wait_backoff_mismatch"]],
    ["aware: BackOff of 10,001 steps", { enabled: true, intervalMs: 700 }, { ackWaitMs: 1000, backOffMs: Array(10_001).fill(1000), source: "inspected" }, { backOff: "aware" }, ["backoff_invalid"]],
    ["aware: BackOff of 10,000 steps", { enabled: true, intervalMs: 700 }, { ackWaitMs: 1000, backOffMs: Array(10_000).fill(1000), source: "inspected" }, { backOff: "aware" }, []],
    ["unknown BackOff mode", { enabled: true }, T30, { backOff: "ignore" }, ["invalid_backoff_mode"]],
    ["options not an object", { enabled: true }, T30, "aware", ["invalid_backoff_mode"]],
    [
      "everything wrong at once",
      { enabled: "yes", intervalMs: -1, maxHeartbeats: 1e9, shutdownTimeoutMs: Number.NaN, extra: 1 },
      undefined,
      undefined,
      ["unknown_field", "invalid_enabled", "invalid_interval", "invalid_max_heartbeats", "invalid_shutdown_timeout"],
    ],
    [
      "enabled with several timing problems",
      { enabled: true, intervalMs: 40_000 },
      { ackWaitMs: 30_000, backOffMs: [1000], source: "inspected" },
      undefined,
      ["interval_too_close_to_ack_wait", "backoff_not_supported"],
    ],
    ["reject mode still reports a missing AckWait", { enabled: true }, { backOffMs: [1000], source: "inspected" }, undefined, ["ack_wait_unknown", "backoff_not_supported"]],
  ];

  it.each(cases)("%s", (_name, policy, timing, options, expected) => {
    expect(codes(policy, timing, options)).toEqual(expected);
  });
});

describe("messages a person can act on", () => {
  it("names the field, the value, the limit and the way out at the 80% boundary", () => {
    const r = checkInProgressPolicy({ enabled: true, intervalMs: 24_000 }, T30);
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.violations[0]).toMatchObject({ code: "interval_too_close_to_ack_wait", field: "intervalMs" });
    expect(r.violations[0]?.message).toMatch(
      /^intervalMs 24000 must be below 24000 ms \(80% of AckWait 30000 ms\): use at most 23999 or raise the consumer's ack_wait/,
    );
  });

  it("suggests the field a typo meant", () => {
    const r = checkInProgressPolicy({ interval_ms: 1000 }, undefined);
    expect(!r.ok && r.violations[0]?.message).toContain('did you mean "intervalMs"');
    const r2 = checkInProgressPolicy({ maxHeartbeat: 3 }, undefined);
    expect(!r2.ok && r2.violations[0]?.message).toContain('did you mean "maxHeartbeats"');
  });

  it("gives the range and a concrete fix for out-of-range integers", () => {
    const r = checkInProgressPolicy({ maxHeartbeats: 20_000 }, undefined);
    expect(!r.ok && r.violations[0]?.message).toBe("maxHeartbeats must be an integer in 1 ..= 10000, got 20000: use at most 10000");
    const r2 = checkInProgressPolicy({ intervalMs: "5000" }, undefined);
    expect(!r2.ok && r2.violations[0]?.message).toContain('got the string "5000": use a number');
  });

  it("explains BackOff rejection and the opt-in", () => {
    const r = checkInProgressPolicy({ enabled: true, intervalMs: 500 }, { ackWaitMs: 1000, backOffMs: [1000, 4000], source: "inspected" });
    expect(!r.ok && r.violations[0]?.message).toContain('[1000 ms, 4000 ms]');
    expect(!r.ok && r.violations[0]?.message).toContain('{ backOff: "aware" }');
  });

  it("says when no interval can fit a tiny window", () => {
    const r = checkInProgressPolicy({ enabled: true, intervalMs: 1 }, { ackWaitMs: 1, source: "configured" });
    expect(!r.ok && r.violations[0]?.message).toContain("no interval fits this window");
  });

  it("hints at a misnamed ackWait field in the timing", () => {
    const r = checkInProgressPolicy({ enabled: true }, { ackWait: 30_000, source: "configured" } as unknown as ConsumerTiming);
    expect(!r.ok && r.violations[0]?.message).toContain('found "ackWait"');
  });
});

describe("verified policies", () => {
  it("returns a frozen, marked policy with defaults filled in", () => {
    const p = verifyInProgressPolicy({ enabled: true, intervalMs: 10_000 }, T30);
    expect(p).toMatchObject({ enabled: true, intervalMs: 10_000, maxHeartbeats: 12, shutdownTimeoutMs: 5000, backOff: "reject" });
    expect(p.timing).toEqual({ ackWaitMs: 30_000, source: "configured" });
    expect(Object.isFrozen(p)).toBe(true);
    expect(Object.isFrozen(p.timing)).toBe(true);
    expect(isVerifiedPolicy(p)).toBe(true);
    expect(isVerifiedPolicy({ ...p })).toBe(false);
    expect(isVerifiedPolicy(DEFAULT_IN_PROGRESS_POLICY)).toBe(false);
  });

  it("disabled policies verify without timing and carry none", () => {
    const p = verifyInProgressPolicy(undefined, undefined);
    expect(p.enabled).toBe(false);
    expect(p.timing).toBeUndefined();
    expect(isVerifiedPolicy(p)).toBe(true);
  });

  it("verifyInProgressPolicy throws every violation at once", () => {
    let caught: unknown;
    try {
      verifyInProgressPolicy({ enabled: true, intervalMs: 0, maxHeartbeats: 0 }, undefined);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(InProgressPolicyError);
    const e = caught as InProgressPolicyError;
    expect(e.name).toBe("InProgressPolicyError");
    expect(e.violations.map((v) => v.code)).toEqual(["invalid_interval", "invalid_max_heartbeats", "ack_wait_unknown"]);
    expect(e.message).toContain("3 violations");
  });

  it("a policy that failed is never enabled by accident", () => {
    const r = checkInProgressPolicy({ enabled: true, intervalMs: "x" }, T30);
    expect(r.ok).toBe(false);
  });
});

describe("consumerTimingFromConfig", () => {
  it("reads ConsumerInfo and ConsumerConfig, converting nanoseconds to milliseconds", () => {
    expect(consumerTimingFromConfig({ config: { ack_wait: 30_000_000_000 } })).toEqual({ ackWaitMs: 30_000, source: "inspected" });
    expect(consumerTimingFromConfig({ ack_wait: 1_500_000, backoff: [1e9, 4e9], max_deliver: 5 }, "configured")).toEqual({
      ackWaitMs: 1.5,
      backOffMs: [1000, 4000],
      maxDeliver: 5,
      source: "configured",
    });
    expect(consumerTimingFromConfig({ ack_wait: 2_000_000_000n })).toEqual({ ackWaitMs: 2000, source: "inspected" });
  });

  it("carries malformed server values through so the check rejects them", () => {
    const t = consumerTimingFromConfig({ config: { ack_wait: "30s", backoff: "1s" } });
    expect(t.ackWaitMs).toBeNaN();
    expect(t.backOffMs).toEqual([Number.NaN]);
    expect(codes({ enabled: true }, t)).toEqual(["ack_wait_invalid", "backoff_not_supported"]);
    expect(codes({ enabled: true }, consumerTimingFromConfig({ config: { ack_wait: 1e10, backoff: [1e9, null] } }), { backOff: "aware" })).toEqual([
      "backoff_invalid",
    ]);
  });

  it("returns an empty timing for anything that is not a config", () => {
    for (const input of [undefined, null, 42, "x", [], { config: null }]) {
      expect(consumerTimingFromConfig(input)).toEqual({ source: "inspected" });
    }
    expect(codes({ enabled: true }, consumerTimingFromConfig(null))).toEqual(["ack_wait_unknown"]);
  });

  it("treats a null BackOff from the server as none", () => {
    expect(consumerTimingFromConfig({ config: { ack_wait: 1e9, backoff: null } })).toEqual({ ackWaitMs: 1000, source: "inspected" });
  });
});

describe("properties", () => {
  it("for any valid AckWait and interval: ok exactly when interval < 0.8 × AckWait (exact arithmetic)", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 3_600_000 }), fc.integer({ min: 1, max: 10_000_000 }), (intervalMs, ackWaitMs) => {
        const r = checkInProgressPolicy({ enabled: true, intervalMs }, { ackWaitMs, source: "configured" });
        // 0.8 = 4/5: compare in integers so the oracle has no rounding.
        const safe = BigInt(intervalMs) * 5n < BigInt(ackWaitMs) * 4n;
        expect(r.ok).toBe(safe);
        if (!r.ok) expect(r.violations.map((v) => v.code)).toEqual(["interval_too_close_to_ack_wait"]);
      }),
      { numRuns: 2000 },
    );
  });

  it("the boundary itself is always unsafe, one below is always safe", () => {
    fc.assert(
      fc.property(fc.integer({ min: 2, max: 4_500_000 }), (k) => {
        const ackWaitMs = 5 * k;
        expect(checkInProgressPolicy({ enabled: true, intervalMs: Math.min(4 * k, 3_600_000) }, { ackWaitMs, source: "configured" }).ok).toBe(
          4 * k > 3_600_000,
        );
        expect(checkInProgressPolicy({ enabled: true, intervalMs: Math.min(4 * k - 1, 3_600_000) }, { ackWaitMs, source: "configured" }).ok).toBe(true);
      }),
    );
  });

  it("the suggested interval is itself accepted", () => {
    fc.assert(
      fc.property(fc.integer({ min: 2, max: 3_600_000 }), fc.integer({ min: 2, max: 4_000_000 }), (intervalMs, ackWaitMs) => {
        const r = checkInProgressPolicy({ enabled: true, intervalMs }, { ackWaitMs, source: "configured" });
        if (r.ok) return;
        const m = /use at most (\d+)/.exec(r.violations[0]?.message ?? "");
        if (!m) return;
        const suggested = Number(m[1]);
        expect(checkInProgressPolicy({ enabled: true, intervalMs: suggested }, { ackWaitMs, source: "configured" }).ok).toBe(true);
        expect(checkInProgressPolicy({ enabled: true, intervalMs: suggested + 1 }, { ackWaitMs, source: "configured" }).ok).toBe(false);
      }),
    );
  });

  it("aware mode: ok exactly when interval < 0.8 × the smallest BackOff step", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 100_000 }),
        fc.array(fc.integer({ min: 1, max: 1_000_000 }), { minLength: 1, maxLength: 8 }),
        (intervalMs, backOffMs) => {
          const r = checkInProgressPolicy({ enabled: true, intervalMs }, { backOffMs, source: "inspected" }, { backOff: "aware" });
          const smallest = Math.min(...backOffMs);
          expect(r.ok).toBe(intervalMs * 5 < smallest * 4);
          // Reject mode refuses every non-empty BackOff.
          const rejected = checkInProgressPolicy({ enabled: true, intervalMs }, { ackWaitMs: 1e9, backOffMs, source: "inspected" });
          expect(!rejected.ok && rejected.violations.some((v) => v.code === "backoff_not_supported")).toBe(true);
        },
      ),
    );
  });

  it("for any input whatsoever, check returns and never throws, and never enables without a verified timing", () => {
    fc.assert(
      fc.property(fc.anything({ withBigInt: true, withNullPrototype: true, withObjectString: true, withSparseArray: true }), fc.anything(), fc.anything(), (policy, timing, options) => {
        const r = checkInProgressPolicy(policy, timing as ConsumerTiming, options as never);
        expect(typeof r.ok).toBe("boolean");
        if (r.ok) {
          expect(Object.isFrozen(r.policy)).toBe(true);
          if (r.policy.enabled) expect(r.policy.timing?.ackWaitMs ?? r.policy.timing?.backOffMs?.[0]).toBeGreaterThan(0);
        } else {
          expect(r.violations.length).toBeGreaterThan(0);
          for (const v of r.violations) expect(typeof v.message).toBe("string");
        }
      }),
      { numRuns: 3000 },
    );
  });

  it("for any enabled policy object, a verified result never has interval >= 80% of AckWait", () => {
    fc.assert(
      fc.property(
        fc.record({ enabled: fc.constant(true), intervalMs: fc.oneof(fc.integer(), fc.double(), fc.string()) }, { requiredKeys: ["enabled"] }),
        fc.oneof(fc.double(), fc.integer(), fc.constant(undefined)),
        (policy, ackWaitMs) => {
          const r = checkInProgressPolicy(policy, { ackWaitMs, source: "configured" } as ConsumerTiming);
          if (r.ok) expect(r.policy.intervalMs * 5).toBeLessThan((ackWaitMs as number) * 4);
        },
      ),
    );
  });

  it("survives hostile objects: throwing getters and proxies", () => {
    const hostile = new Proxy(
      {},
      {
        ownKeys: () => {
          throw new Error("boom");
        },
      },
    );
    const getter = Object.defineProperty({}, "enabled", {
      enumerable: true,
      get() {
        throw new Error("boom");
      },
    });
    expect(codes(hostile, T30)).toEqual(["invalid_policy"]);
    expect(codes(getter, T30)).toEqual(["invalid_policy"]);
    expect(codes({ enabled: true }, hostile)).toEqual(["ack_wait_unknown"]);
    expect(codes({ enabled: true, intervalMs: 100 }, { ackWaitMs: 1000, backOffMs: new Proxy([1], { get: () => { throw new Error("x"); } }), source: "inspected" }, { backOff: "aware" })).toEqual([
      "backoff_invalid",
    ]);
  });
});
