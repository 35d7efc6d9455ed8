/** The shutdown bound of writes started during a loop's shutdown: it runs from the end of the open pulls. */
import { afterEach, describe, expect, it, vi } from "vitest";
import { ShutdownBound } from "../../../src/consume/shutdown-bound.js";

describe("ShutdownBound", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it("a write's signal aborts `ms` after start(), however long before it the write began; one started later aborts with the others", () => {
    vi.useFakeTimers();
    const bound = new ShutdownBound(400);
    const early = bound.child();
    // The open pull is still delivering: no bound yet, whatever the time.
    vi.advanceTimersByTime(5000);
    expect(early.signal!.aborted).toBe(false);
    bound.start();
    const late = bound.child();
    vi.advanceTimersByTime(399);
    expect(early.signal!.aborted).toBe(false);
    expect(late.signal!.aborted).toBe(false);
    // Once only: a second start() does not move the bound.
    bound.start();
    vi.advanceTimersByTime(1);
    expect(early.signal!.aborted).toBe(true);
    expect(late.signal!.aborted).toBe(true);
    bound.dispose();
  });

  it("dispose() clears the timer: nothing is left to keep the process alive", () => {
    vi.useFakeTimers();
    const bound = new ShutdownBound(400);
    const child = bound.child();
    bound.start();
    expect(vi.getTimerCount()).toBe(1);
    bound.dispose();
    expect(vi.getTimerCount()).toBe(0);
    vi.advanceTimersByTime(1000);
    expect(child.signal!.aborted).toBe(false);
  });
});
