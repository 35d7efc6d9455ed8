import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { belowSafetyRatio, largestSafeInterval } from "../../../src/policy/safety-ratio.js";

describe("the 80% rule", () => {
  it("compares exactly at the boundary, where 0.8 × window in floating point would round", () => {
    expect(belowSafetyRatio(24_000, 30_000)).toBe(false);
    expect(belowSafetyRatio(23_999, 30_000)).toBe(true);
    // 0.8 × 3 is 2.4000000000000004 in floating point; the exact rule still refuses 2.4.
    expect(belowSafetyRatio(2.4, 3)).toBe(false);
  });

  it("names the largest whole interval that fits, and 0 where none does", () => {
    expect(largestSafeInterval(30_000)).toBe(23_999);
    expect(largestSafeInterval(2_000)).toBe(1_599);
    expect(largestSafeInterval(1_001)).toBe(800);
    expect(largestSafeInterval(1)).toBe(0);
    expect(largestSafeInterval(0)).toBe(0);
    expect(largestSafeInterval(-5)).toBe(0);
    expect(largestSafeInterval(Number.NaN)).toBe(0);
    expect(largestSafeInterval(Number.POSITIVE_INFINITY)).toBe(0);
  });

  it("returns a safe interval for every window, ends for windows past 2^53, and misses nothing below 2^50", () => {
    fc.assert(
      fc.property(fc.double({ min: 0, max: Number.MAX_VALUE, noNaN: true }), (windowMs) => {
        const n = largestSafeInterval(windowMs);
        expect(Number.isInteger(n) && n >= 0).toBe(true);
        if (n > 0) expect(belowSafetyRatio(n, windowMs)).toBe(true);
        if (windowMs < 2 ** 50) expect(belowSafetyRatio(n + 1, windowMs)).toBe(false);
        else expect(n).toBeGreaterThanOrEqual(0.8 * windowMs * (1 - 2 ** -45));
      }),
      { numRuns: 2_000 },
    );
    for (const windowMs of [2 ** 53, 2 ** 53 + 2, 2 ** 60, 1e300, Number.MAX_VALUE]) {
      const n = largestSafeInterval(windowMs);
      expect(n > 0 && belowSafetyRatio(n, windowMs)).toBe(true);
    }
  });
});
