import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import fc from "fast-check";
import { CommitThenAck, TemporarySinkError, verifyInProgressPolicy, withInProgress, type WorkContext } from "../../../src/index.js";
import { maxDeliverProblem } from "../../../src/policy/max-deliver.js";
import { windowFor } from "../../../src/policy/redelivery-window.js";
import { nakDelay } from "../../../src/policy/nak-delay.js";
import { atLeast, compareVersions, parseVersion } from "../../../src/policy/server-version.js";
import { fakeMsg } from "../../helpers/fakes.js";

const BACKOFF = [1000, 4000] as const;
const aware = (over: Record<string, unknown> = {}) =>
  verifyInProgressPolicy({ enabled: true, intervalMs: 700, maxHeartbeats: 50, ...over }, { ackWaitMs: 1000, backOffMs: BACKOFF, source: "inspected" }, { backOff: "aware" });

describe("nakDelay: the delay that makes the server wait what was asked", () => {
  it("without BackOff, sends the request as is", () => {
    expect(nakDelay(5000, 2, undefined)).toEqual({ sendMs: 5000, effectiveMs: 5000, adjusted: false });
    expect(nakDelay(5000, 2, [])).toEqual({ sendMs: 5000, effectiveMs: 5000, adjusted: false });
  });

  it("with BackOff [1s, 4s]: 5 s at delivery 2 sends 2 s (server waits 2 + 4 - 1 = 5 s)", () => {
    expect(nakDelay(5000, 2, BACKOFF)).toEqual({ sendMs: 2000, effectiveMs: 5000, adjusted: false });
  });

  it("at delivery 1 the excess is 0; past the last step the last step applies", () => {
    expect(nakDelay(5000, 1, BACKOFF)).toEqual({ sendMs: 5000, effectiveMs: 5000, adjusted: false });
    expect(nakDelay(5000, 9, BACKOFF)).toEqual({ sendMs: 2000, effectiveMs: 5000, adjusted: false });
  });

  it("a request shorter than the excess sends 1 ms and reports the real wait", () => {
    expect(nakDelay(2000, 2, BACKOFF)).toEqual({ sendMs: 1, effectiveMs: 3001, adjusted: true });
    expect(nakDelay(3000, 2, BACKOFF)).toEqual({ sendMs: 1, effectiveMs: 3001, adjusted: true });
    expect(nakDelay(3001, 2, BACKOFF)).toEqual({ sendMs: 1, effectiveMs: 3001, adjusted: false });
  });

  it("0 stays a bare NAK (immediate redelivery on every server)", () => {
    expect(nakDelay(0, 2, BACKOFF)).toEqual({ sendMs: 0, effectiveMs: 0, adjusted: false });
  });

  it("property: the server's formula applied to what is sent gives the reported wait, never less than asked", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 600_000 }),
        fc.integer({ min: 1, max: 20 }),
        fc.array(fc.integer({ min: 1, max: 120_000 }), { minLength: 1, maxLength: 6 }),
        (requested, n, backOff) => {
          const d = nakDelay(requested, n, backOff);
          const idx = Math.min(n - 1, backOff.length - 1);
          // Server: Timestamp = now - AckWait + delay; expires after BackOff[idx]; AckWait = BackOff[0].
          const serverWait = d.sendMs + backOff[idx]! - backOff[0]!;
          expect(d.sendMs).toBeGreaterThanOrEqual(1);
          expect(serverWait).toBe(d.effectiveMs);
          expect(d.effectiveMs).toBeGreaterThanOrEqual(requested);
          expect(d.adjusted).toBe(d.effectiveMs !== requested);
        },
      ),
    );
  });
});

describe("windowFor: the redelivery window of delivery n", () => {
  it("uses BackOff[min(n-1, len-1)] in aware mode, AckWait otherwise", () => {
    const p = aware();
    expect(windowFor(p, 1)).toBe(1000);
    expect(windowFor(p, 2)).toBe(4000);
    expect(windowFor(p, 7)).toBe(4000);
    expect(windowFor(p, undefined)).toBe(1000);
    const plain = verifyInProgressPolicy({ enabled: true, intervalMs: 1000 }, { ackWaitMs: 30_000, source: "configured" });
    expect(windowFor(plain, 3)).toBe(30_000);
  });
});

describe("lease per delivery count", () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("a redelivered message's lease uses its own step; the batch lease is the tightest", async () => {
    const redelivered = fakeMsg({ deliveryCount: 2 });
    const first = fakeMsg({ deliveryCount: 1 });
    let ctx: WorkContext | undefined;
    let release!: () => void;
    const done = new Promise<void>((r) => (release = r));
    const p = withInProgress([redelivered], (c) => ((ctx = c), done), aware());
    expect(ctx?.lease?.remainingMs()).toBe(4000);
    release();
    await p;
    const p2 = withInProgress([redelivered, first], (c) => ((ctx = c), new Promise<void>((r) => setTimeout(r, 10))), aware());
    expect(ctx?.lease?.remainingMs()).toBe(1000);
    await vi.advanceTimersByTimeAsync(10);
    await p2;
  });

  it("the delivery-age rule uses the message's own window", async () => {
    // Received 3.5 s ago at delivery 2 (window 4 s): 0.5 s left; the interval has passed, so beat at once.
    const m = fakeMsg({ deliveryCount: 2 });
    let ctx: WorkContext | undefined;
    const p = withInProgress(m, (c) => ((ctx = c), new Promise<void>((r) => setTimeout(r, 100))), aware(), { receivedAt: Date.now() - 3500 });
    expect(ctx?.lease?.remainingMs()).toBe(500);
    await vi.advanceTimersByTimeAsync(0);
    expect(m.calls.working).toBe(1);
    expect(ctx?.lease?.remainingMs()).toBe(4000);
    await vi.advanceTimersByTimeAsync(100);
    await p;
  });
});

describe("CommitThenAck NAK delays in BackOff-aware mode", () => {
  it("sends the adjusted delay and reports the real one", async () => {
    const m = fakeMsg({ deliveryCount: 2 });
    const ack = new CommitThenAck({ inProgress: aware(), onTemporaryFailure: { action: "nak", delayMs: 5000, retryInPlace: false } });
    const r = await ack.process([m], () => {
      throw new TemporarySinkError("busy");
    });
    expect(m.calls.nak).toEqual([2000]);
    expect(r.messages[0]).toMatchObject({ action: "nacked", requestedDelayMs: 5000, effectiveDelayMs: 5000 });
    const short = fakeMsg({ deliveryCount: 2 });
    const r2 = await new CommitThenAck({ inProgress: aware(), onTemporaryFailure: { action: "nak", delayMs: 1000, retryInPlace: false } }).process([short], () => {
      throw new TemporarySinkError("busy");
    });
    expect(short.calls.nak).toEqual([1]);
    expect(r2.messages[0]).toMatchObject({ requestedDelayMs: 1000, effectiveDelayMs: 3001 });
  });

  it("in reject mode (or without BackOff) the delay is sent as asked", async () => {
    const m = fakeMsg({ deliveryCount: 2 });
    const r = await new CommitThenAck({ onTemporaryFailure: { action: "nak", delayMs: 5000, retryInPlace: false } }).process([m], () => {
      throw new TemporarySinkError("busy");
    });
    expect(m.calls.nak).toEqual([5000]);
    expect(r.messages[0]?.effectiveDelayMs).toBe(5000);
  });
});

describe("MaxDeliver with BackOff, by server version", () => {
  it.each([
    // [maxDeliver, steps, version, ok]
    [5, 2, "2.9.10", true],
    [2, 2, "2.9.10", false],
    [-1, 2, "2.9.10", false],
    [undefined, 2, "2.9.10", false],
    [-1, 2, "2.10.14", true],
    [2, 2, "2.10.22", false],
    [2, 2, "2.10.23", true],
    [1, 2, "2.11.0", false],
    [-1, 2, "2.12.1", true],
    [3, 2, undefined, true],
    [-1, 2, undefined, false],
    [2, 2, undefined, false],
  ] as const)("maxDeliver %s with %i steps on %s: ok=%s", (maxDeliver, steps, version, ok) => {
    const problem = maxDeliverProblem(maxDeliver, steps, version);
    expect(problem === undefined).toBe(ok);
    if (problem) expect(problem).toMatch(/set max_deliver to at least \d+/);
  });
});

describe("server versions", () => {
  it("parses and compares", () => {
    // A parsed version keeps its pre-release apart from the release it precedes.
    expect(parseVersion("2.9.10")).toEqual({ release: [2, 9, 10], prerelease: [] });
    expect(parseVersion("v2.10.4-beta.1")).toEqual({ release: [2, 10, 4], prerelease: ["beta", 1] });
    expect(parseVersion("2.15.0-dev+a1b2c3")).toEqual({ release: [2, 15, 0], prerelease: ["dev"] });
    expect(parseVersion("2.10.27+build.7")).toEqual({ release: [2, 10, 27], prerelease: [] });
    expect(parseVersion("nope")).toBeUndefined();
    expect(parseVersion(undefined)).toBeUndefined();
    expect(parseVersion(`2.10.4-${"x".repeat(1_000_000)}`)).toBeUndefined();
    expect(atLeast("2.10.4", [2, 10, 4])).toBe(true);
    expect(atLeast("2.10.3", [2, 10, 4])).toBe(false);
    expect(atLeast("2.9.10", [2, 10, 4])).toBe(false);
    expect(atLeast("3.0.0", [2, 10, 4])).toBe(true);
    expect(atLeast(undefined, [2, 10, 4])).toBeUndefined();
  });

  it("regression: a pre-release compares below its release (semver), so its features are not assumed", () => {
    expect(atLeast("2.10.4-beta.1", [2, 10, 4])).toBe(false);
    expect(atLeast("2.10.4-beta", [2, 10, 4])).toBe(false);
    expect(atLeast("v2.11.0-RC.1", [2, 11, 0])).toBe(false);
    expect(atLeast("2.10.4-", [2, 10, 4])).toBe(false);
    // A pre-release of a later release is still later.
    expect(atLeast("2.10.5-beta", [2, 10, 4])).toBe(true);
    expect(atLeast("2.11.0-RC.1", [2, 10, 23])).toBe(true);
    // Build metadata is not a pre-release.
    expect(atLeast("2.10.4+build", [2, 10, 4])).toBe(true);
  });

  it("orders pre-releases the semver way", () => {
    // The precedence example of semver 2.0.0, section 11.
    const ordered = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0"];
    const parsed = ordered.map((v) => parseVersion(v)!);
    for (let i = 0; i < parsed.length; i++) {
      for (let j = 0; j < parsed.length; j++) {
        expect(Math.sign(compareVersions(parsed[i]!, parsed[j]!)), `${ordered[i]} vs ${ordered[j]}`).toBe(Math.sign(i - j));
      }
    }
  });

  it("the MaxDeliver rule on a release candidate is the rule of the release before it", () => {
    expect(maxDeliverProblem(2, 2, "2.10.23")).toBeUndefined();
    expect(maxDeliverProblem(2, 2, "2.10.23-RC.1")).toMatch(/set max_deliver to at least 3/);
  });
});
