/**
 * A tracer can never change what the library does: whatever a `Tracing` hook throws, the write
 * runs exactly once, its outcome passes through, and every message is settled as without it.
 */
import { describe, expect, it, vi } from "vitest";
import { CommitThenAck, TemporarySinkError, verifyInProgressPolicy, type BatchTrace, type Tracing } from "../../../src/index.js";
import { TraceRecorder } from "../../../src/telemetry/tracing.js";
import { fakeMsg } from "../../helpers/fakes.js";

const boom = (): never => {
  throw new Error("tracer bug");
};

describe("TraceRecorder", () => {
  it("runs fn exactly once whatever the tracer's run does", async () => {
    const batch = { stream: "S", consumer: "C", messages: [], origin: "process" as const };
    const cases: Array<BatchTrace["run"]> = [
      (fn) => fn(),
      () => boom(), // throws before fn
      (fn) => {
        fn();
        return boom(); // throws after fn
      },
      () => "never calls fn" as never,
      (fn) => {
        fn();
        return "another value" as never;
      },
      (fn) => {
        fn();
        return fn(); // calls it twice
      },
      (fn) => {
        queueMicrotask(() => fn()); // calls it later
        return undefined as never;
      },
    ];
    for (const run of cases) {
      const fn = vi.fn(() => 42);
      const r = TraceRecorder.start({ startBatch: () => ({ run, heartbeat: boom, leaseLost: boom, end: boom }) }, batch);
      expect(r.run(fn)).toBe(42);
      await Promise.resolve();
      expect(fn).toHaveBeenCalledTimes(1);
      expect(() => r.heartbeat(1, 0)).not.toThrow();
      expect(() => r.leaseLost(5)).not.toThrow();
      expect(() => r.end({ outcome: "acked", errorName: undefined, acked: 0, failed: 0 })).not.toThrow();
    }
  });

  it("passes fn's own error through, even when the tracer swallows it", () => {
    const err = new Error("the write failed");
    const swallowing: BatchTrace["run"] = (fn) => {
      try {
        return fn();
      } catch {
        return undefined as never;
      }
    };
    const r = TraceRecorder.start({ startBatch: () => ({ run: swallowing, heartbeat() {}, leaseLost() {}, end() {} }) }, { stream: undefined, consumer: undefined, messages: [], origin: "process" as const });
    expect(() => r.run(() => {
      throw err;
    })).toThrow(err);
  });

  it("a startBatch that throws or returns nothing means untraced", () => {
    for (const startBatch of [boom, () => undefined, () => null as never, () => 7 as never]) {
      expect(TraceRecorder.start({ startBatch }, { stream: undefined, consumer: undefined, messages: [], origin: "process" as const })).toBe(TraceRecorder.NONE);
    }
  });
});

describe("CommitThenAck with a broken tracer", () => {
  it("settles exactly as without one", async () => {
    const broken: Tracing = { startBatch: () => ({ run: boom, heartbeat: boom, leaseLost: boom, end: boom }) };
    const write = vi.fn((msgs: readonly unknown[]) => ({ failed: [{ msg: msgs[1], error: new TemporarySinkError() }] }));
    const msgs = [fakeMsg(), fakeMsg()];
    const result = await new CommitThenAck({ tracing: broken, onTemporaryFailure: { action: "nak", delayMs: 500 } }).process(msgs, write as never);
    expect(write).toHaveBeenCalledTimes(1);
    expect(result).toMatchObject({ outcome: "partial", acked: 1, nacked: 1 });
    expect(msgs[0]!.calls.ack).toBe(1);
    expect(msgs[1]!.calls.nak).toEqual([500]);
  });

  it("ends the trace of a batch refused before its write started", async () => {
    const ends: unknown[] = [];
    const tracing: Tracing = { startBatch: () => ({ run: (fn) => fn(), heartbeat() {}, leaseLost() {}, end: (o) => void ends.push(o) }) };
    const write = vi.fn();
    const inProgress = verifyInProgressPolicy({ enabled: true, intervalMs: 1000 }, { ackWaitMs: 30_000, source: "configured" });
    const ack = new CommitThenAck({ tracing, inProgress });
    const receivedAt = (): never => {
      throw new Error("host bug");
    };
    await expect(ack.process([fakeMsg()], write, { receivedAt })).rejects.toThrow(TypeError);
    expect(write).not.toHaveBeenCalled();
    expect(ends).toEqual([{ outcome: "rejected", errorName: "TypeError", acked: 0, failed: 0 }]);
  });

  it("refuses what is not a Tracing", () => {
    expect(() => new CommitThenAck({ tracing: {} as never })).toThrow(/options\.tracing must implement Tracing/);
    expect(() => new CommitThenAck({ tracng: {} } as never)).toThrow(/did you mean "tracing"/);
  });
});
