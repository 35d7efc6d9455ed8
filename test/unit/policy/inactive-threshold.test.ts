import { describe, expect, it } from "vitest";
import { inactiveThresholdProblem } from "../../../src/policy/inactive-threshold.js";

describe("inactiveThresholdProblem", () => {
  it("passes when heartbeats are off, the consumer has no threshold, or the server counts pending acks (2.11.7 and later)", () => {
    expect(inactiveThresholdProblem(2000, undefined, "2.9.10")).toBeUndefined();
    expect(inactiveThresholdProblem(undefined, 4000, "2.9.10")).toBeUndefined();
    expect(inactiveThresholdProblem(0, 4000, "2.9.10")).toBeUndefined();
    for (const v of ["2.11.7", "2.12.0", "v2.15.1", "3.0.0"]) expect(inactiveThresholdProblem(2000, 4000, v), v).toBeUndefined();
  });

  it("before 2.11.7 (and for a pre-release of it, or an unknown version) the interval must be below 80% of the threshold", () => {
    for (const v of ["2.9.10", "2.10.27", "2.11.6", "2.11.7-RC.1", undefined, "not a version"]) {
      expect(inactiveThresholdProblem(2000, 1599, v), String(v)).toBeUndefined();
      expect(inactiveThresholdProblem(2000, 1600, v), String(v)).toMatch(/inactive_threshold is 2000 ms and intervalMs is 1600/);
      expect(inactiveThresholdProblem(2000, 4000, v), String(v)).toBeDefined();
    }
  });

  it("names the server, the threshold, the interval, the largest interval that fits and the other ways out", () => {
    const message = inactiveThresholdProblem(2000, 4000, "2.10.27")!;
    expect(message).toContain("server 2.10.27 (before 2.11.7)");
    expect(message).toContain("use an intervalMs of at most 1599");
    expect(message).toContain("raise inactive_threshold above 5000 ms");
    expect(message).toContain("upgrade to 2.11.7 or later");
    expect(inactiveThresholdProblem(2000, 4000, undefined)).toContain("a server of unknown version");
    // No interval fits a 1 ms threshold: the message does not offer one.
    expect(inactiveThresholdProblem(1, 1, "2.9.10")).not.toContain("at most");
  });

  it("a threshold that is not a duration fails closed on the older servers only", () => {
    for (const bad of [Number.NaN, -1, Number.POSITIVE_INFINITY, "2000", null, {}]) {
      expect(inactiveThresholdProblem(bad, 1000, "2.9.10"), String(bad)).toMatch(/is not a duration/);
      expect(inactiveThresholdProblem(bad, 1000, "2.11.7"), String(bad)).toBeUndefined();
    }
  });
});
