import { describe, expect, it, vi } from "vitest";
import { endPull } from "../../../src/nats/pull-subscription.js";

describe("endPull", () => {
  it("drains the pull's subscription (what is on its way is still handed over) instead of stopping it", async () => {
    const iter = { stop: vi.fn(), sub: { drain: vi.fn(async () => undefined), isClosed: () => false, isDraining: () => false } };
    endPull(iter);
    expect(iter.sub.drain).toHaveBeenCalledTimes(1);
    await Promise.resolve();
    expect(iter.stop).not.toHaveBeenCalled();
  });

  it("stops the iterator when draining fails, when the subscription is closed, or when there is none", async () => {
    const failing = { stop: vi.fn(), sub: { drain: vi.fn(async () => Promise.reject(new Error("closed"))), isClosed: () => false } };
    endPull(failing);
    await new Promise((r) => setImmediate(r));
    expect(failing.stop).toHaveBeenCalledTimes(1);
    const closed = { stop: vi.fn(), sub: { drain: vi.fn(), isClosed: () => true } };
    endPull(closed);
    expect(closed.sub.drain).not.toHaveBeenCalled();
    expect(closed.stop).toHaveBeenCalledTimes(1);
    const plain = { stop: vi.fn() };
    endPull(plain);
    expect(plain.stop).toHaveBeenCalledTimes(1);
  });

  it("does nothing twice: a subscription already draining is left to finish", () => {
    const iter = { stop: vi.fn(), sub: { drain: vi.fn(), isClosed: () => false, isDraining: () => true } };
    endPull(iter);
    expect(iter.sub.drain).not.toHaveBeenCalled();
    expect(iter.stop).not.toHaveBeenCalled();
  });

  it("never throws, whatever the iterator is", () => {
    const hostile = Object.defineProperty({}, "sub", { get: () => { throw new Error("x"); } });
    expect(() => endPull(hostile)).not.toThrow();
    expect(() => endPull(null)).not.toThrow();
    expect(() => endPull({ stop: () => { throw new Error("y"); } })).not.toThrow();
  });
});
