import { describe, expect, it } from "vitest";
import { LeaseTracker } from "../../../src/lease/lease-tracker.js";

/** The same batch as per-message arrays and as one shared window and delivery time. */
function pair(size: number, window: number, deliveredAt: number): [LeaseTracker, LeaseTracker] {
  const arrays = new LeaseTracker(new Float64Array(size).fill(window), new Float64Array(size).fill(deliveredAt));
  return [arrays, new LeaseTracker(window, deliveredAt, size)];
}

describe("LeaseTracker with a shared window", () => {
  it("answers like per-message arrays through every kind of refresh", () => {
    const [a, b] = pair(5, 30_000, 1000);
    const same = (): void => {
      expect(b.size).toBe(a.size);
      expect(b.deadline).toBe(a.deadline);
      expect(b.oldestRefresh()).toBe(a.oldestRefresh());
    };
    same();
    a.refreshAll(6000);
    b.refreshAll(6000);
    same();
    // A confirmed round that refreshed only some messages.
    for (const t of [a, b]) {
      t.refresh(1, 9000);
      t.refresh(3, 9000);
      t.refresh(7, 9000); // out of range: ignored
      t.settle();
    }
    same();
    expect(b.deadline).toBe(36_000);
    for (const t of [a, b]) {
      t.refresh(0, 9000);
      t.refresh(2, 9000);
      t.refresh(4, 9000);
      t.refresh(4, 8000); // older than what it has: ignored
      t.settle();
    }
    same();
    expect(b.deadline).toBe(39_000);
    a.refreshAll(12_000);
    b.refreshAll(12_000);
    same();
    expect(b.oldestRefresh()).toBe(12_000);
  });

  it("an empty batch has no deadline", () => {
    const [a, b] = pair(0, 30_000, 1000);
    expect(b.deadline).toBe(a.deadline);
    expect(b.deadline).toBe(Number.POSITIVE_INFINITY);
    expect(b.oldestRefresh()).toBe(a.oldestRefresh());
  });
});
