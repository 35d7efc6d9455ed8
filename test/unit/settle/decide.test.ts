/**
 * The settle decision table (docs: DESIGN "Settling: the decision table"), checked over every
 * combination of its inputs, and the invariants it must hold whatever the inputs.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { decide, isLastDelivery, type Decision, type SettleFacts, type SettleRules, type Verdict } from "../../../src/settle/decide.js";
import { defaultNakDelayMs, DEFAULT_NAK_DELAY_BASE_MS, DEFAULT_NAK_DELAY_MAX_MS } from "../../../src/settle/retry-delay.js";

const VERDICTS: readonly Verdict[] = ["committed", "temporary", "permanent"];
const DELIVERIES = [undefined, 1, 2, 3, 4] as const;
const MAX_DELIVERS = [undefined, -1, 0, 1, 3] as const;
const BOOLS = [false, true] as const;

function* everyCase(): Generator<[SettleFacts, SettleRules]> {
  for (const verdict of VERDICTS)
    for (const deliveryCount of DELIVERIES)
      for (const maxDeliver of MAX_DELIVERS)
        for (const cancelled of BOOLS)
          for (const leaseLost of BOOLS)
            for (const connectionClosed of BOOLS)
              for (const limitKnown of BOOLS)
                for (const temporary of ["nak", "leave"] as const)
                  for (const deadLetter of BOOLS)
                    yield [{ verdict, deliveryCount, maxDeliver: limitKnown ? maxDeliver : undefined, limitKnown, cancelled, leaseLost, connectionClosed }, { temporary, deadLetter }];
}

/** The table, written out independently of the implementation's order of checks. */
function expected(f: SettleFacts, r: SettleRules): Decision {
  const last = f.deliveryCount !== undefined && f.maxDeliver !== undefined && f.maxDeliver > 0 && f.deliveryCount >= f.maxDeliver;
  if (f.connectionClosed && f.verdict !== "committed" && last) return { frame: "none", reason: "exhausted_connection_closed" };
  if (f.connectionClosed) return { frame: "none", reason: "connection_closed" };
  if (f.verdict === "committed") return { frame: "ack" };
  if (last && r.deadLetter) return { frame: "dead_letter", final: true };
  if (last && f.verdict === "permanent" && !f.cancelled && !f.leaseLost) return { frame: "term" };
  if (last) return { frame: "none", reason: "exhausted" };
  if (f.cancelled) return { frame: "none", reason: "cancelled" };
  if (f.leaseLost) return { frame: "none", reason: "lease_lost" };
  if (f.verdict === "permanent") return r.deadLetter ? { frame: "dead_letter", final: false } : { frame: "term" };
  if (r.temporary === "leave") return { frame: "none", reason: "leave" };
  return f.limitKnown ? { frame: "nak" } : { frame: "none", reason: "limit_unknown" };
}

describe("decide: the whole table", () => {
  it("matches the table for every combination of its inputs", () => {
    let n = 0;
    for (const [facts, rules] of everyCase()) {
      expect(decide(facts, rules), JSON.stringify({ facts, rules })).toEqual(expected(facts, rules));
      n += 1;
    }
    expect(n).toBe(3 * 5 * 5 * 2 * 2 * 2 * 2 * 2 * 2);
  });

  it("never NAKs while the consumer's MaxDeliver is unknown (a NAK on the last delivery would promise a retry that never comes)", () => {
    for (const [facts, rules] of everyCase()) {
      if (!facts.limitKnown) expect(decide(facts, rules).frame).not.toBe("nak");
    }
  });

  it("never NAKs on the last allowed delivery, and never leaves it without saying exhausted", () => {
    for (const [facts, rules] of everyCase()) {
      if (!isLastDelivery(facts.deliveryCount, facts.maxDeliver) || facts.verdict === "committed") continue;
      const d = decide(facts, rules);
      expect(d.frame).not.toBe("nak");
      if (d.frame === "none") expect(d).toEqual({ frame: "none", reason: facts.connectionClosed ? "exhausted_connection_closed" : "exhausted" });
    }
  });

  it("acks only what committed, and everything that committed on an open connection", () => {
    for (const [facts, rules] of everyCase()) {
      const d = decide(facts, rules);
      if (d.frame === "ack") expect(facts.verdict).toBe("committed");
      if (facts.verdict === "committed" && !facts.connectionClosed) expect(d.frame).toBe("ack");
    }
  });

  it("sends no frame after a shutdown or a lost lease unless no delivery is left", () => {
    for (const [facts, rules] of everyCase()) {
      if (facts.verdict === "committed" || isLastDelivery(facts.deliveryCount, facts.maxDeliver)) continue;
      if (!facts.cancelled && !facts.leaseLost) continue;
      expect(decide(facts, rules).frame).toBe("none");
    }
  });

  it("holds for arbitrary inputs, including delivery counts beyond MaxDeliver and odd numbers", () => {
    const facts = fc.record({
      verdict: fc.constantFrom(...VERDICTS),
      deliveryCount: fc.option(fc.integer({ min: 1, max: 1_000_000 }), { nil: undefined }),
      maxDeliver: fc.option(fc.integer({ min: -5, max: 1_000_000 }), { nil: undefined }),
      limitKnown: fc.boolean(),
      cancelled: fc.boolean(),
      leaseLost: fc.boolean(),
      connectionClosed: fc.boolean(),
    });
    const rules = fc.record({ temporary: fc.constantFrom("nak" as const, "leave" as const), deadLetter: fc.boolean() });
    fc.assert(
      fc.property(facts, rules, (f, r) => {
        expect(decide(f, r)).toEqual(expected(f, r));
      }),
      { numRuns: 2000 },
    );
  });
});

describe("isLastDelivery", () => {
  it("is true only for a known count at or past a positive MaxDeliver", () => {
    expect(isLastDelivery(3, 3)).toBe(true);
    expect(isLastDelivery(4, 3)).toBe(true);
    expect(isLastDelivery(2, 3)).toBe(false);
    expect(isLastDelivery(undefined, 3)).toBe(false);
    expect(isLastDelivery(9, undefined)).toBe(false);
    expect(isLastDelivery(9, -1)).toBe(false);
    expect(isLastDelivery(9, 0)).toBe(false);
  });
});

describe("defaultNakDelayMs", () => {
  it("grows with the delivery count, is capped, and jitter only lengthens it", () => {
    fc.assert(
      fc.property(fc.option(fc.integer({ min: -3, max: 10_000 }), { nil: undefined }), fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }), (n, r) => {
        const d = defaultNakDelayMs(n, r);
        const attempt = n !== undefined && n >= 1 ? n : 1;
        const base = Math.min(DEFAULT_NAK_DELAY_MAX_MS, DEFAULT_NAK_DELAY_BASE_MS * 2 ** Math.min(attempt - 1, 16));
        expect(Number.isInteger(d)).toBe(true);
        expect(d).toBeGreaterThanOrEqual(base);
        expect(d).toBeLessThanOrEqual(Math.round(base * 1.2));
      }),
    );
    expect(defaultNakDelayMs(1, 0)).toBe(1000);
    expect(defaultNakDelayMs(2, 0)).toBe(2000);
    expect(defaultNakDelayMs(7, 0)).toBe(60_000);
    expect(defaultNakDelayMs(1, Number.NaN)).toBe(1000);
  });
});
