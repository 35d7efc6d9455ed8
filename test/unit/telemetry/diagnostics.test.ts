/**
 * Diagnostics events cost nothing without a subscriber: no payload is built and nothing is
 * published. With one, payloads are frozen and shaped as documented. Scenario-level proof of
 * each event against a real server is in test/integration/diagnostics.test.ts.
 */
import diagnostics from "node:diagnostics_channel";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi, type MockInstance } from "vitest";
import {
  CommitThenAck,
  DiagnosticsChannels,
  PermanentSinkError,
  TemporarySinkError,
  verifyInProgressPolicy,
  withInProgress,
} from "../../../src/index.js";
import { errorName } from "../../../src/errors.js";
import { publishEvent } from "../../../src/telemetry/diagnostics.js";
import { EVENT_SPECS, EventLog, expectShape, type ChannelName } from "../../helpers/diagnostics.js";
import { ManualClock, fakeMsg } from "../../helpers/fakes.js";
import { Scheduler } from "../../../src/lease/scheduler.js";
import { superviseWork } from "../../../src/lease/with-in-progress.js";

const root = join(import.meta.dirname, "..", "..", "..");
const CHANNELS = Object.values(DiagnosticsChannels);

const policy = (over: Record<string, unknown> = {}) =>
  verifyInProgressPolicy({ enabled: true, intervalMs: 1000, maxHeartbeats: 2, shutdownTimeoutMs: 500, ...over }, { ackWaitMs: 2000, source: "configured" });

/** Spies on `publish` of every channel object (the library holds the same objects). */
function spyOnPublish(): Map<ChannelName, MockInstance> {
  const spies = new Map<ChannelName, MockInstance>();
  for (const name of CHANNELS) spies.set(name, vi.spyOn(diagnostics.channel(name), "publish"));
  return spies;
}

function totalCalls(spies: Map<ChannelName, MockInstance>): number {
  let n = 0;
  for (const s of spies.values()) n += s.mock.calls.length;
  return n;
}

/**
 * Every event kind through the public API with fake messages: beats, a failed beat, the
 * limit, a lease expiry (withInProgress), settled batches (CommitThenAck), and a stall.
 */
async function runEveryEvent(): Promise<void> {
  const m = fakeMsg();
  const p = withInProgress(m, (ctx) => new Promise((_, reject) => ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason))), policy());
  const settled = p.catch((e: unknown) => e);
  await vi.advanceTimersByTimeAsync(1000); // beat 1
  m.failWorking = new Error("refused");
  await vi.advanceTimersByTimeAsync(1000); // beat 2 fails, limit reached
  await vi.advanceTimersByTimeAsync(3000); // lease expires
  await settled;

  const ack = new CommitThenAck({ inProgress: policy({ maxHeartbeats: 5 }) });
  const msgs = [fakeMsg(), fakeMsg(), fakeMsg()];
  const r = ack.process(msgs, async (batch) => {
    await new Promise((resolve) => setTimeout(resolve, 1500));
    return { failed: [{ msg: batch[1]!, error: new TemporarySinkError() }, { msg: batch[2]!, error: new PermanentSinkError() }] };
  });
  await vi.advanceTimersByTimeAsync(2000);
  await r;

  // A temporary failure on the last allowed delivery, no dead-letter target: exhausted.
  await new CommitThenAck({ maxDeliver: 1 }).process([fakeMsg()], () => {
    throw new TemporarySinkError();
  });

  // A work that blocks the event loop for 2 s, a second past its first beat's due time: a stall.
  const clock = new ManualClock();
  await superviseWork(fakeMsg(), () => clock.jump(2000), policy(), {}, new Scheduler(clock));
}

describe("diagnostics events without a subscriber", () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
    vi.restoreAllMocks();
  });

  it("no channel has a subscriber to begin with", () => {
    for (const name of CHANNELS) {
      expect(diagnostics.hasSubscribers(name), name).toBe(false);
      expect(diagnostics.channel(name).hasSubscribers, name).toBe(false);
    }
  });

  it("publishEvent never calls build and never publishes when nobody listens", () => {
    const spies = spyOnPublish();
    for (const channel of CHANNELS) {
      const build = vi.fn(() => ({}) as never);
      publishEvent(channel, build);
      expect(build, channel).not.toHaveBeenCalled();
    }
    expect(totalCalls(spies)).toBe(0);
  });

  it("a whole run (beats, a failed beat, the limit, a lease expiry, settled batches) publishes nothing", async () => {
    const spies = spyOnPublish();
    await runEveryEvent();
    expect(totalCalls(spies)).toBe(0);
  });

  it("the same run with a subscriber publishes every kind, so the spies above can see them", async () => {
    // Subscribe first: Node swaps a channel's publish implementation when it gains a subscriber.
    const log = new EventLog();
    const spies = spyOnPublish();
    try {
      await runEveryEvent();
    } finally {
      log.dispose();
    }
    for (const name of CHANNELS) expect(spies.get(name)?.mock.calls.length, name).toBeGreaterThan(0);
    expect(new Set(log.channels())).toEqual(new Set(CHANNELS));
    for (const e of log.events) expectShape(e.channel, e.payload);
    // Unsubscribed again: nothing more is published.
    for (const s of spies.values()) s.mockClear();
    await runEveryEvent();
    expect(totalCalls(spies)).toBe(0);
  });
});

describe("publishEvent with a subscriber", () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  it("builds once, publishes a frozen payload, and only on the channel listened to", () => {
    const got: unknown[] = [];
    const fn = (message: unknown): void => void got.push(message);
    diagnostics.subscribe(DiagnosticsChannels.LEASE_EXPIRED, fn);
    try {
      const build = vi.fn(() => ({ batchId: 1, batchSize: 2, overdueMs: 3, beats: 4 }));
      publishEvent(DiagnosticsChannels.LEASE_EXPIRED, build);
      expect(build).toHaveBeenCalledTimes(1);
      expect(got).toEqual([{ batchId: 1, batchSize: 2, overdueMs: 3, beats: 4 }]);
      expect(Object.isFrozen(got[0])).toBe(true);
      const other = vi.fn(() => ({}) as never);
      publishEvent(DiagnosticsChannels.HEARTBEAT_SENT, other);
      expect(other).not.toHaveBeenCalled();
    } finally {
      diagnostics.unsubscribe(DiagnosticsChannels.LEASE_EXPIRED, fn);
    }
    const after = vi.fn(() => ({ batchId: 1, batchSize: 2, overdueMs: 3, beats: 4 }));
    publishEvent(DiagnosticsChannels.LEASE_EXPIRED, after);
    expect(after).not.toHaveBeenCalled();
  });

  it("a build that throws never reaches the caller", () => {
    const fn = vi.fn();
    diagnostics.subscribe(DiagnosticsChannels.BATCH_SETTLED, fn);
    try {
      expect(() =>
        publishEvent(DiagnosticsChannels.BATCH_SETTLED, () => {
          throw new Error("broken build");
        }),
      ).not.toThrow();
      expect(fn).not.toHaveBeenCalled();
    } finally {
      diagnostics.unsubscribe(DiagnosticsChannels.BATCH_SETTLED, fn);
    }
  });
});

describe("errorName", () => {
  it("keeps the class name, never the message", () => {
    const e = new TemporarySinkError("INSERT INTO orders VALUES ('card 4111')");
    expect(errorName(e)).toBe("TemporarySinkError");
    expect(errorName(Object.assign(new Error("x"), { name: "TimeoutError" }))).toBe("TimeoutError");
  });

  it("falls back to Error for a name that is not a plain identifier (it could carry data)", () => {
    expect(errorName(Object.assign(new Error("x"), { name: "orders.eu.card 4111" }))).toBe("Error");
    expect(errorName(Object.assign(new Error("x"), { name: "a".repeat(65) }))).toBe("Error");
    expect(errorName(Object.assign(new Error("x"), { name: "" }))).toBe("Error");
  });

  it("names what is not an Error by its type only", () => {
    expect(errorName("subject orders.eu")).toBe("string");
    expect(errorName({ message: "payload" })).toBe("object");
    expect(errorName(null)).toBe("null");
    expect(errorName(undefined)).toBe("undefined");
    expect(errorName(42)).toBe("number");
  });
});

describe("docs/diagnostics.md", () => {
  const doc = readFileSync(join(root, "docs", "diagnostics.md"), "utf8");

  it("documents every channel and every payload field", () => {
    for (const [channel, spec] of Object.entries(EVENT_SPECS)) {
      expect(doc, channel).toContain(`\`${channel}\``);
      for (const field of Object.keys(spec.shape)) expect(doc, `${channel} field ${field}`).toMatch(new RegExp(`\\|\\s*\`${field}\`\\s*\\|`));
    }
  });

  it("names no channel the code does not have", () => {
    const named = new Set([...doc.matchAll(/`(jetstream-inprogress:[a-z:-]+)`/g)].map((m) => m[1]));
    expect([...named].sort()).toEqual([...CHANNELS].sort());
  });
});
