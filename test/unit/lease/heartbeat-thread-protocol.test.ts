/**
 * The heartbeat thread's shared memory: what the worker decides from a slot, what the main
 * thread's calls leave there, and the stop handshake across two real threads (no publish of a
 * slot once its stop returned).
 */
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  addProgress,
  beginRound,
  createSlot,
  endRound,
  fromTime,
  isReleased,
  lastBeatAt,
  planBeat,
  readCount,
  recordConfirmed,
  recordFailure,
  releaseDelivery,
  setUntil,
  SLOT,
  slotState,
  stopSlot,
  TIME,
  toTime,
  type SlotInit,
} from "../../../src/lease/heartbeat-thread-protocol.js";
import { tsWorker } from "../../helpers/ts-worker.js";

const T0 = 1_800_000_000_000;
const init = (over: Partial<SlotInit> = {}): SlotInit => ({
  intervalMs: 100,
  maxHeartbeats: 3,
  firstDueAt: T0 + 100,
  until: Number.POSITIVE_INFINITY,
  requireProgress: false,
  confirmTimeoutMs: undefined,
  ...over,
});

/** Runs the worker's side of one round at `now`, as the entry does. */
function round(slot: ReturnType<typeof createSlot>, now: number, accepted = true): "sent" | string {
  const plan = planBeat(slot, now, 20);
  if (plan.kind !== "beat") return plan.kind === "wait" ? `wait ${plan.at - T0}` : plan.kind;
  if (!beginRound(slot)) return "stopped";
  endRound(slot, now, plan.progress, accepted);
  return "sent";
}

describe("times in shared memory", () => {
  it("keep microseconds of epoch milliseconds; Infinity and NaN are never", () => {
    expect(fromTime(toTime(T0 + 0.25))).toBe(T0 + 0.25);
    expect(fromTime(toTime(Number.POSITIVE_INFINITY))).toBe(Number.POSITIVE_INFINITY);
    expect(fromTime(toTime(Number.NaN))).toBe(Number.POSITIVE_INFINITY);
  });
});

describe("a slot's schedule", () => {
  it("waits until due, coalesces beats due within 20 ms, and stops at maxHeartbeats", () => {
    const slot = createSlot(2, init());
    expect(slotState(slot)).toBe("active");
    expect(round(slot, T0)).toBe("wait 100");
    expect(round(slot, T0 + 79)).toBe("wait 100");
    expect(round(slot, T0 + 80)).toBe("sent");
    expect(lastBeatAt(slot)).toBe(T0 + 80);
    expect(Atomics.load(slot.times, TIME.NEXT_DUE)).toBe(toTime(T0 + 180));
    expect(round(slot, T0 + 180)).toBe("sent");
    expect(round(slot, T0 + 280)).toBe("sent");
    // The third round reached the limit.
    expect(slotState(slot)).toBe("limit");
    expect(readCount(slot, SLOT.BEATS)).toBe(3);
    expect(round(slot, T0 + 380)).toBe("drop");
  });

  it("no beat at or after until; a later until lets beats go again", () => {
    const slot = createSlot(1, init({ until: T0 + 150, maxHeartbeats: 10 }));
    expect(round(slot, T0 + 100)).toBe("sent");
    expect(round(slot, T0 + 200)).toBe("wait 300");
    expect(readCount(slot, SLOT.BEATS)).toBe(1);
    setUntil(slot, T0 + 10_000);
    expect(round(slot, T0 + 300)).toBe("sent");
  });

  it("a round that found the connection down is a failure, not a beat, and is retried", () => {
    const slot = createSlot(1, init());
    recordFailure(slot, T0 + 100, 100);
    expect(readCount(slot, SLOT.FAILURES)).toBe(1);
    expect(readCount(slot, SLOT.BEATS)).toBe(0);
    expect(lastBeatAt(slot)).toBeUndefined();
    expect(round(slot, T0 + 150)).toBe("wait 200");
    expect(round(slot, T0 + 200)).toBe("sent");
  });

  it("a round awaiting confirmation sets no beat time until its replies; late replies keep the latest", () => {
    const slot = createSlot(1, init({ confirmTimeoutMs: 50, maxHeartbeats: 5 }));
    expect(round(slot, T0 + 100, false)).toBe("sent");
    expect(lastBeatAt(slot)).toBeUndefined();
    recordConfirmed(slot, T0 + 200);
    recordConfirmed(slot, T0 + 100);
    expect(lastBeatAt(slot)).toBe(T0 + 200);
    expect(readCount(slot, SLOT.CONFIRMED)).toBe(2);
  });
});

describe("requireProgress", () => {
  it("a due beat waits for progress, tells the main thread to wake it, and goes once progress came", () => {
    const slot = createSlot(1, init({ requireProgress: true, maxHeartbeats: 10 }));
    expect(round(slot, T0 + 100)).toBe("idle");
    expect(readCount(slot, SLOT.WAITING)).toBe(1);
    // The main thread's progress: the worker waits for it, so wake it.
    expect(addProgress(slot)).toBe(true);
    expect(round(slot, T0 + 130)).toBe("sent");
    expect(readCount(slot, SLOT.WAITING)).toBe(0);
    // No new progress: the next due beat waits again; progress while not waiting needs no wake.
    expect(round(slot, T0 + 230)).toBe("idle");
    expect(addProgress(slot)).toBe(true);
    expect(addProgress(slot)).toBe(true);
    expect(round(slot, T0 + 240)).toBe("sent");
    expect(addProgress(slot)).toBe(false);
    expect(round(slot, T0 + 340)).toBe("sent");
    expect(readCount(slot, SLOT.BEATS)).toBe(3);
  });
});

describe("stop and release", () => {
  it("a stopped slot is dropped and begins no round", () => {
    const slot = createSlot(1, init());
    const plan = planBeat(slot, T0 + 100, 20);
    expect(plan.kind).toBe("beat");
    // Stopped between the plan and the round: nothing is published.
    expect(stopSlot(slot)).toBe(true);
    expect(beginRound(slot)).toBe(false);
    expect(readCount(slot, SLOT.SENDING)).toBe(0);
    expect(planBeat(slot, T0 + 100, 20).kind).toBe("drop");
  });

  it("released deliveries are marked once; a batch whose every delivery is released is dropped", () => {
    const slot = createSlot(40, init());
    expect(releaseDelivery(slot, 33)).toBe(true);
    expect(releaseDelivery(slot, 33)).toBe(false);
    expect(isReleased(slot, 33)).toBe(true);
    expect(isReleased(slot, 1)).toBe(false);
    expect(readCount(slot, SLOT.RELEASED)).toBe(1);
    for (let i = 0; i < 40; i++) releaseDelivery(slot, i);
    expect(readCount(slot, SLOT.RELEASED)).toBe(40);
    expect(planBeat(slot, T0 + 100, 20).kind).toBe("drop");
  });

  it("a stop that finds a round being published waits for it, within its bound", () => {
    const slot = createSlot(1, init());
    Atomics.store(slot.ints, SLOT.SENDING, 1);
    const started = performance.now();
    expect(stopSlot(slot, 60)).toBe(false);
    expect(performance.now() - started).toBeGreaterThanOrEqual(55);
  });

  it("across two threads: once stop returns, the worker publishes nothing more for that slot", async () => {
    const slots = Array.from({ length: 200 }, () => createSlot(1, init({ intervalMs: 1, maxHeartbeats: 10_000, firstDueAt: 0 })));
    const published = new SharedArrayBuffer(slots.length * 4);
    const counts = new Int32Array(published);
    const worker = tsWorker(join(import.meta.dirname, "..", "..", "helpers", "slot-racer.ts"), { buffers: slots.map((s) => s.buffer), published });
    const done = new Promise<{ rounds: number }>((resolve, reject) => {
      worker.on("message", (m: unknown) => {
        if (typeof m === "object" && m !== null) resolve(m as { rounds: number });
      });
      worker.on("error", reject);
    });
    await new Promise<void>((resolve) => worker.once("message", () => resolve()));
    // Every slot is being beaten before the stops begin.
    const warm = performance.now() + 10_000;
    while (counts.some((_, i) => Atomics.load(counts, i) === 0) && performance.now() < warm);
    const atStop: number[] = [];
    for (let i = 0; i < slots.length; i++) {
      // Up to half a millisecond apart, so stops land at every point of a round.
      const until = performance.now() + Math.random() * 0.5;
      while (performance.now() < until);
      stopSlot(slots[i]!);
      atStop.push(Atomics.load(counts, i));
    }
    const { rounds } = await done;
    await worker.terminate();
    expect(rounds).toBeGreaterThan(slots.length);
    for (let i = 0; i < slots.length; i++) expect(atStop[i], `slot ${i} was beaten before its stop`).toBeGreaterThan(0);
    for (let i = 0; i < slots.length; i++) expect(Atomics.load(counts, i), `slot ${i}`).toBe(atStop[i]);
    // Every round is whole: the handshake never cuts one in two.
    for (let i = 0; i < slots.length; i++) expect(atStop[i]! % 3).toBe(0);
  });
});
