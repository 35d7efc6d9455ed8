/**
 * Windows timers cannot hold, and what newer servers refuse, said the server's way.
 */
import { describe, expect, it } from "vitest";
import { checkInProgressPolicy, consumerTimingFromConfig, type ConsumerTiming, type PolicyCheck, type ViolationCode } from "../../../src/index.js";
import { maxDeliverProblem } from "../../../src/policy/max-deliver.js";
import { checkConsumerTiming } from "../../../src/policy/timing-checks.js";
import { MAX_WINDOW_MS } from "../../../src/policy/timing-limits.js";

const AWARE = { backOff: "aware" } as const;
const ON = { enabled: true, intervalMs: 1000 };
const codes = (r: PolicyCheck): ViolationCode[] => (r.ok ? [] : r.violations.map((v) => v.code));
const only = (r: PolicyCheck) => {
  expect(r.ok).toBe(false);
  if (r.ok) throw new Error("unreachable");
  expect(r.violations).toHaveLength(1);
  return r.violations[0]!;
};
const check = (timing: unknown, options?: unknown) => checkInProgressPolicy(ON, timing as ConsumerTiming, options as never);

describe("regression: an AckWait above one day is refused (setTimeout overflowed and the heartbeat timer spun)", () => {
  it("exactly one day passes; one millisecond more is ack_wait_too_long", () => {
    expect(MAX_WINDOW_MS).toBe(86_400_000);
    expect(check({ ackWaitMs: 86_400_000, source: "configured" }).ok).toBe(true);
    const v = only(check({ ackWaitMs: 86_400_001, source: "configured" }));
    expect(v).toMatchObject({ code: "ack_wait_too_long", field: "timing.ackWaitMs" });
    expect(v.message).toBe(
      "AckWait 86400001 ms is above the one-day limit for heartbeats (86400000 ms): lower the consumer's ack_wait to at most a day, or leave InProgress off for this consumer",
    );
  });

  it("above 2^31 - 1 ms, what setTimeout cannot hold, it is refused before any timer exists", () => {
    expect(codes(check({ ackWaitMs: 2 ** 31, source: "configured" }))).toEqual(["ack_wait_too_long"]);
    expect(codes(check({ ackWaitMs: Number.MAX_VALUE, source: "configured" }))).toEqual(["ack_wait_too_long"]);
  });

  it("a value that looks like nanoseconds says so: the field, the value, the limit and the fix", () => {
    const v = only(check({ ackWaitMs: 30_000_000_000, source: "configured" }));
    expect(v.code).toBe("ack_wait_too_long");
    expect(v.message).toContain("AckWait 30000000000 ms");
    expect(v.message).toContain("(86400000 ms)");
    expect(v.message).toContain("it looks like nanoseconds passed as milliseconds (30000000000 ns is 30000 ms)");
    expect(v.message).toContain("pass milliseconds (consumerTimingFromConfig converts");
    // Below 1e9 ms the suspicion is not raised.
    expect(only(check({ ackWaitMs: 999_999_999, source: "configured" })).message).not.toContain("nanoseconds");
  });

  it("a BackOff step above one day is refused the same way in aware mode", () => {
    const v = only(check({ backOffMs: [2000, 30_000_000_000], source: "inspected" }, AWARE));
    expect(v).toMatchObject({ code: "ack_wait_too_long", field: "timing.backOffMs" });
    expect(v.message).toMatch(/^BackOff\[1\] 30000000000 ms is above the one-day limit/);
    expect(v.message).toContain("nanoseconds");
    expect(check({ backOffMs: [2000, 86_400_000], source: "inspected" }, AWARE).ok).toBe(true);
  });

  it("with heartbeats off nothing arms a timer: a long AckWait is no violation of the timing alone", () => {
    expect(checkConsumerTiming({ ackWaitMs: 7 * 86_400_000, source: "inspected" }, "reject")).toEqual([]);
    expect(checkConsumerTiming({ backOffMs: [7 * 86_400_000], source: "inspected" }, "aware")).toEqual([]);
    expect(checkInProgressPolicy({ enabled: false }, { ackWaitMs: 3e10, source: "configured" }).ok).toBe(true);
  });

  it("every problem at once: a malformed interval does not hide a too-long AckWait", () => {
    expect(codes(checkInProgressPolicy({ enabled: true, intervalMs: "x" }, { ackWaitMs: 3e10, source: "configured" }))).toEqual([
      "invalid_interval",
      "ack_wait_too_long",
    ]);
  });

  it("what consumerTimingFromConfig reads from a real config is never too long by accident", () => {
    expect(check(consumerTimingFromConfig({ config: { ack_wait: 30_000_000_000 } })).ok).toBe(true);
  });
});

describe("what newer servers refuse, in their words", () => {
  it("aware mode: an AckWait that differs from BackOff[0] is ignored by the server and refused by a pedantic one", () => {
    const v = only(check({ ackWaitMs: 30_000, backOffMs: [2000, 4000], source: "configured" }, AWARE));
    expect(v).toMatchObject({ code: "ack_wait_backoff_mismatch", field: "timing.ackWaitMs" });
    expect(v.message).toContain("the server ignores ack_wait and waits BackOff[0]");
    expect(v.message).toContain('"pedantic mode: first backoff value has to equal batch AckWait"');
    expect(v.message).toContain("set ackWaitMs to 2000");
    // Equal, or absent, is what the server itself reports for a consumer with BackOff.
    expect(check({ ackWaitMs: 2000, backOffMs: [2000, 4000], source: "configured" }, AWARE).ok).toBe(true);
    expect(check({ backOffMs: [2000, 4000], source: "configured" }, AWARE).ok).toBe(true);
    expect(check(consumerTimingFromConfig({ config: { ack_wait: 2e9, backoff: [2e9, 4e9] } }), AWARE).ok).toBe(true);
  });

  it("reject mode: the refusal says the server ignores ack_wait", () => {
    const v = only(check({ ackWaitMs: 30_000, backOffMs: [2000, 4000], source: "configured" }));
    expect(v.code).toBe("backoff_not_supported");
    expect(v.message).toContain("the server ignores ack_wait 30000 ms and waits BackOff[0] 2000 ms");
    expect(only(check({ ackWaitMs: 2000, backOffMs: [2000, 4000], source: "configured" })).message).not.toContain("ignores");
  });

  it("a negative BackOff step quotes the 2.12 refusal, in both modes", () => {
    const aware = only(check({ ackWaitMs: 2000, backOffMs: [2000, -4000], source: "configured" }, AWARE));
    expect(aware.code).toBe("backoff_invalid");
    expect(aware.message).toContain('BackOff[1] is -4000, which nats-server 2.12+ refuses ("consumer backoff needs to be positive")');
    const reject = only(check({ ackWaitMs: 2000, backOffMs: [2000, -4000], source: "configured" }));
    expect(reject.code).toBe("backoff_not_supported");
    expect(reject.message).toContain('"consumer backoff needs to be positive"');
  });

  it("a negative AckWait quotes the 2.12 refusal", () => {
    const v = only(check({ ackWaitMs: -2000, source: "configured" }));
    expect(v.code).toBe("ack_wait_invalid");
    expect(v.message).toContain('which nats-server 2.12+ refuses ("consumer ack wait needs to be positive")');
  });

  it("a 0 ms step says what the server does with it (it accepts it and redelivers at once)", () => {
    expect(only(check({ ackWaitMs: 2000, backOffMs: [2000, 0], source: "configured" }, AWARE)).message).toContain(
      "BackOff[1] is 0, which makes the server redeliver at once",
    );
  });

  it("MaxDeliver problems quote the server's error", () => {
    for (const [maxDeliver, version] of [[-1, "2.9.10"], [2, "2.10.22"], [1, "2.12.1"]] as const) {
      expect(maxDeliverProblem(maxDeliver, 2, version)).toContain('"max deliver is required to be > length of backoff values"');
    }
  });
});
