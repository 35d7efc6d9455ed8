/**
 * Properties over arbitrary values, proxies and throwing getters included: the guardrails
 * never throw (verify throws only InProgressPolicyError), an enabled verified policy always
 * beats below 80% of every window it can meet, and every message stays short.
 */
import { describe, expect, it } from "vitest";
import fc from "fast-check";
import {
  InProgressPolicyError,
  checkInProgressPolicy,
  consumerTimingFromConfig,
  verifyInProgressPolicy,
  type ConsumerTiming,
  type PolicyViolation,
} from "../../../src/index.js";
import { inactiveThresholdProblem } from "../../../src/policy/inactive-threshold.js";
import { maxDeliverProblem } from "../../../src/policy/max-deliver.js";
import { MAX_NAK_DELAY_MS, nakDelay } from "../../../src/policy/nak-delay.js";
import { windowFor, windowIsShared } from "../../../src/policy/redelivery-window.js";
import { atLeast, parseVersion } from "../../../src/policy/server-version.js";
import { checkConsumerTiming } from "../../../src/policy/timing-checks.js";
import { MAX_BACKOFF_STEPS, MAX_WINDOW_MS } from "../../../src/policy/timing-limits.js";

/** Every message and field is short, whatever the input. */
const MAX_MESSAGE = 400;
const MAX_FIELD = 65;

const boom = (): never => {
  throw new Error("boom");
};

/**
 * Hostile values are generated as plain markers and built inside the property: fast-check
 * itself inspects and prints what it generates, and a revoked proxy would throw there.
 */
type Marker = { readonly $hostile: string; readonly key?: string; readonly base?: unknown };
const isMarker = (v: unknown): v is Marker =>
  typeof v === "object" && v !== null && Object.getPrototypeOf(v) === Object.prototype && typeof (v as Marker).$hostile === "string";

function revoked(target: object): object {
  const r = Proxy.revocable(target, {});
  r.revoke();
  return r.proxy;
}
function sparseOf(length: number, first: unknown): unknown[] {
  const a: unknown[] = [];
  a.length = length;
  a[0] = first;
  return a;
}
const SPARSE_HUGE = sparseOf(2 ** 24, 1000);
const SPARSE_MAX = sparseOf(MAX_BACKOFF_STEPS, 1000);
const FILLED_TOO_LONG = Array(MAX_BACKOFF_STEPS + 1).fill(5000);

/** Builds the value a spec stands for (markers become proxies, getters and huge lists). */
function build(spec: unknown): unknown {
  if (isMarker(spec)) {
    switch (spec.$hostile) {
      case "revokedObject":
        return revoked({});
      case "revokedArray":
        return revoked([]);
      case "trapsObject":
        return new Proxy({}, { get: boom, has: boom, ownKeys: boom, getOwnPropertyDescriptor: boom, getPrototypeOf: boom });
      case "trapsArray":
        return new Proxy([1000], { get: boom, has: boom, ownKeys: boom, getOwnPropertyDescriptor: boom, getPrototypeOf: boom });
      case "lyingLength":
        return new Proxy([1000], { get: (t, k) => (k === "length" ? 2 ** 32 - 1 : Reflect.get(t, k)) });
      case "withGetter": {
        const base = build(spec.base);
        const target = typeof base === "object" && base !== null && !Array.isArray(base) ? { ...base } : {};
        return Object.defineProperty(target, spec.key ?? "x", { enumerable: true, get: boom });
      }
      case "sparseHuge":
        return SPARSE_HUGE;
      case "sparseMax":
        return SPARSE_MAX;
      case "filledTooLong":
        return FILLED_TOO_LONG;
    }
  }
  if (Array.isArray(spec)) return spec.map(build);
  if (typeof spec === "object" && spec !== null && Object.getPrototypeOf(spec) === Object.prototype) {
    return Object.fromEntries(Object.entries(spec).map(([k, v]) => [k, build(v)]));
  }
  return spec;
}
const marker = (name: string): fc.Arbitrary<Marker> => fc.constant({ $hostile: name });

const FIELDS = ["enabled", "intervalMs", "maxHeartbeats", "shutdownTimeoutMs", "ackWaitMs", "backOffMs", "source", "maxDeliver", "backOff", "config", "ack_wait", "backoff", "timing"];

const hostileObject: fc.Arbitrary<unknown> = fc.oneof(
  marker("revokedObject"),
  marker("revokedArray"),
  marker("trapsObject"),
  marker("trapsArray"),
  fc.constantFrom(...FIELDS).map((key) => ({ $hostile: "withGetter", key })),
);

const oddNumber: fc.Arbitrary<unknown> = fc.oneof(
  fc.double(),
  fc.integer(),
  fc.bigInt(),
  fc.constantFrom(-0, Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, Number.MAX_VALUE, Number.MIN_VALUE, 2 ** 31, 2 ** 53, 1e9, 3e10, MAX_WINDOW_MS, MAX_WINDOW_MS + 1),
);
/** Durations a check can accept, so enabled verified policies are actually produced. */
const goodMs = fc.integer({ min: 1, max: 200_000 });

const leaf: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 3, arbitrary: oddNumber },
  { weight: 3, arbitrary: goodMs },
  { weight: 1, arbitrary: fc.string({ maxLength: 50 }) },
  { weight: 1, arbitrary: fc.constantFrom(true, false, null, undefined, "aware", "reject", "configured", "inspected") },
  { weight: 2, arbitrary: hostileObject },
  { weight: 1, arbitrary: fc.anything({ maxDepth: 2, withBigInt: true, withNullPrototype: true, withSparseArray: true, withBoxedValues: true }) },
);

const backOffList: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 4, arbitrary: fc.array(goodMs, { minLength: 1, maxLength: 6 }) },
  { weight: 2, arbitrary: fc.array(fc.oneof(goodMs, leaf), { maxLength: 6 }) },
  { weight: 1, arbitrary: fc.oneof(marker("sparseHuge"), marker("sparseMax"), marker("filledTooLong"), marker("lyingLength")) },
  { weight: 1, arbitrary: leaf },
);

/** Mostly `good`, sometimes anything. */
const mostly = (good: fc.Arbitrary<unknown>): fc.Arbitrary<unknown> => fc.oneof({ weight: 4, arbitrary: good }, { weight: 1, arbitrary: leaf });

/** Sometimes a record gets a throwing getter on one of its fields. */
const orWithGetter = (record: fc.Arbitrary<unknown>): fc.Arbitrary<unknown> =>
  fc.oneof(
    { weight: 5, arbitrary: record },
    { weight: 1, arbitrary: fc.tuple(record, fc.constantFrom(...FIELDS)).map(([base, key]) => ({ $hostile: "withGetter", base, key })) },
  );

const timing: fc.Arbitrary<unknown> = fc.oneof(
  {
    weight: 6,
    arbitrary: orWithGetter(
      fc.record(
        {
          ackWaitMs: mostly(goodMs),
          backOffMs: fc.option(backOffList, { nil: undefined, freq: 2 }),
          source: mostly(fc.constantFrom("configured", "inspected")),
          maxDeliver: leaf,
        },
        { requiredKeys: ["ackWaitMs", "backOffMs"] },
      ),
    ),
  },
  { weight: 1, arbitrary: leaf },
);

const policyFields = {
  enabled: mostly(fc.constant(true)),
  intervalMs: mostly(fc.oneof(fc.integer({ min: 1, max: 3_600_000 }), fc.integer({ min: 1, max: 20_000 }))),
  maxHeartbeats: mostly(fc.integer({ min: 1, max: 10_000 })),
  shutdownTimeoutMs: mostly(fc.integer({ min: 0, max: 60_000 })),
};
const policy: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 6, arbitrary: orWithGetter(fc.record(policyFields, { requiredKeys: ["enabled"] })) },
  { weight: 1, arbitrary: fc.record({ ...policyFields, typo: leaf }, { requiredKeys: ["enabled", "typo"] }) },
  { weight: 1, arbitrary: leaf },
);

const options: fc.Arbitrary<unknown> = fc.oneof(
  fc.constant(undefined),
  fc.constant({ backOff: "aware" }),
  fc.constant({ backOff: "aware" }),
  fc.constant({ backOff: "reject" }),
  orWithGetter(fc.record({ backOff: leaf }, { requiredKeys: [] })),
  leaf,
);

function expectShort(violations: readonly PolicyViolation[]): void {
  for (const v of violations) {
    expect(typeof v.message).toBe("string");
    expect(v.message.length).toBeLessThan(MAX_MESSAGE);
    expect(v.field.length).toBeLessThanOrEqual(MAX_FIELD);
  }
}

/** Delivery counts a window is asked for: real ones and nonsense. */
const DELIVERIES = [undefined, 1, 2, 3, 4, 5, 6, 7, 100, 0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY];

/** Inputs that often pass, BackOff-aware ones included, so the window property is exercised. */
const plausible = fc.tuple(
  fc.record({ enabled: fc.constant(true), intervalMs: fc.integer({ min: 1, max: 5000 }) }),
  fc.oneof(
    fc.record({ ackWaitMs: goodMs, source: fc.constant("configured") }),
    fc.array(goodMs, { minLength: 1, maxLength: 8 }).map((backOffMs) => ({ backOffMs, source: "inspected" })),
    fc.array(goodMs, { minLength: 1, maxLength: 8 }).map((backOffMs) => ({ ackWaitMs: backOffMs[0], backOffMs, source: "inspected" })),
  ),
  fc.constant({ backOff: "aware" }),
);

describe("property: hostile input", () => {
  it("check never throws; an enabled verified policy beats below 80% of every window it can meet", () => {
    let enabled = 0;
    fc.assert(
      fc.property(fc.oneof({ weight: 3, arbitrary: fc.tuple(policy, timing, options) }, { weight: 1, arbitrary: plausible }), ([ps, ts, os]) => {
        const r = checkInProgressPolicy(build(ps), build(ts) as ConsumerTiming, build(os) as never);
        if (!r.ok) {
          expect(r.violations.length).toBeGreaterThan(0);
          expectShort(r.violations);
          return;
        }
        expect(Object.isFrozen(r.policy)).toBe(true);
        if (!r.policy.enabled) return;
        enabled++;
        const interval = r.policy.intervalMs;
        for (const n of DELIVERIES) {
          const w = windowFor(r.policy, n);
          expect(5 * interval, `delivery ${String(n)}`).toBeLessThan(4 * w);
          expect(w).toBeLessThanOrEqual(MAX_WINDOW_MS);
        }
        expect(typeof windowIsShared(r.policy)).toBe("boolean");
      }),
      { numRuns: 700 },
    );
    // The generators reach the interesting case, not only refusals.
    expect(enabled).toBeGreaterThan(60);
  });

  it("verify throws nothing but InProgressPolicyError, and its message stays bounded", () => {
    fc.assert(
      fc.property(policy, timing, options, (ps, ts, os) => {
        try {
          verifyInProgressPolicy(build(ps), build(ts) as ConsumerTiming, build(os) as never);
        } catch (err) {
          expect(err).toBeInstanceOf(InProgressPolicyError);
          const e = err as InProgressPolicyError;
          expectShort(e.violations);
          expect(e.message.length).toBeLessThan(100 + e.violations.length * (MAX_MESSAGE + 40));
        }
      }),
      { numRuns: 300 },
    );
  });

  it("consumerTimingFromConfig never throws and returns only numbers of milliseconds", () => {
    const config = fc.oneof(
      fc.record({ ack_wait: leaf, backoff: backOffList, max_deliver: leaf }, { requiredKeys: [] }),
      fc.record({ config: fc.oneof(fc.record({ ack_wait: leaf, backoff: backOffList, max_deliver: leaf }, { requiredKeys: [] }), leaf) }),
      leaf,
    );
    fc.assert(
      fc.property(config, fc.oneof(fc.constantFrom("configured", "inspected"), leaf), (c, source) => {
        const t = consumerTimingFromConfig(build(c), build(source) as never);
        expect(["configured", "inspected"]).toContain(t.source);
        if (t.ackWaitMs !== undefined) expect(typeof t.ackWaitMs).toBe("number");
        if (t.backOffMs !== undefined) {
          expect(t.backOffMs.length).toBeLessThanOrEqual(MAX_BACKOFF_STEPS + 1);
          for (const v of t.backOffMs) expect(typeof v).toBe("number");
        }
        for (const mode of ["reject", "aware"] as const) expectShort(checkConsumerTiming(t, mode));
      }),
      { numRuns: 300 },
    );
  });

  it("checkConsumerTiming, windowFor and windowIsShared never throw", () => {
    const fakePolicy = fc.oneof(
      orWithGetter(fc.record({ enabled: leaf, intervalMs: leaf, backOff: fc.oneof(fc.constantFrom("aware", "reject"), leaf), timing }, { requiredKeys: [] })),
      leaf,
    );
    fc.assert(
      fc.property(timing, fakePolicy, fc.oneof(fc.constantFrom(...DELIVERIES), leaf), (ts, ps, ns) => {
        const [t, p, n] = [build(ts), build(ps), build(ns)];
        for (const mode of ["reject", "aware"] as const) {
          const v = checkConsumerTiming(t as ConsumerTiming, mode);
          expect(Object.isFrozen(v)).toBe(true);
          expectShort(v);
        }
        const w = windowFor(p as never, n as never);
        expect(Number.isFinite(w) && w >= 0).toBe(true);
        expect(typeof windowIsShared(p as never)).toBe("boolean");
      }),
      { numRuns: 300 },
    );
  });

  it("nakDelay never throws and sends a whole delay the server can parse", () => {
    fc.assert(
      fc.property(fc.oneof(goodMs, leaf), fc.oneof(fc.integer({ min: 1, max: 20 }), leaf), backOffList, (rs, ns, bs) => {
        const d = nakDelay(build(rs) as never, build(ns) as never, build(bs) as never);
        expect(Number.isInteger(d.sendMs) && d.sendMs >= 0 && d.sendMs <= MAX_NAK_DELAY_MS).toBe(true);
        expect(Number.isFinite(d.effectiveMs)).toBe(true);
        expect(typeof d.adjusted).toBe("boolean");
      }),
      { numRuns: 300 },
    );
  });

  it("inactiveThresholdProblem never throws, and a message it returns stays short", () => {
    const version = fc.oneof(fc.constantFrom("2.9.10", "2.11.6", "2.11.7", "2.11.7-RC.1", "v2.12.1"), fc.string({ maxLength: 30 }), leaf);
    fc.assert(
      fc.property(fc.oneof(fc.double(), leaf), fc.oneof(fc.double(), leaf), version, (ts, is, vs) => {
        const problem = inactiveThresholdProblem(build(ts), build(is) as never, build(vs));
        if (problem !== undefined) {
          expect(typeof problem).toBe("string");
          expect(problem.length).toBeLessThan(MAX_MESSAGE);
        }
      }),
      { numRuns: 300 },
    );
  });

  it("maxDeliverProblem, parseVersion and atLeast never throw", () => {
    const version = fc.oneof(fc.constantFrom("2.9.10", "2.10.23", "2.11.0-RC.1", "v2.12.1", "2.15.0-dev"), fc.string({ maxLength: 30 }), leaf);
    fc.assert(
      fc.property(fc.oneof(fc.integer({ min: -1, max: 20 }), leaf), fc.oneof(fc.integer({ min: 0, max: 20 }), leaf), version, (ms, ss, vs) => {
        const [maxDeliver, steps, v] = [build(ms), build(ss), build(vs)];
        const problem = maxDeliverProblem(maxDeliver as never, steps as never, v as never);
        if (problem !== undefined) {
          expect(typeof problem).toBe("string");
          expect(problem.length).toBeLessThan(MAX_MESSAGE);
        }
        const parsed = parseVersion(v);
        if (parsed) expect(parsed.release).toHaveLength(3);
        expect([true, false, undefined]).toContain(atLeast(v, [2, 10, 4]));
      }),
      { numRuns: 300 },
    );
  });
});
