/**
 * Reading a consume iterator's notices by wrapping its `notify`, on fake iterators of the
 * shapes the clients have: @nats-io's `notify({ type, description })`, nats 2.x's
 * `notify(type, data)`, and one with `status()` only.
 */
import { describe, expect, it } from "vitest";
import { watchConsumeNotices, type ConsumeNotice } from "../../../src/nats/consume-notices.js";

/** The client's shape: `notify` on the prototype, feeding `status()` listeners. */
class FakeIterator {
  readonly fed: unknown[][] = [];
  notify(...args: unknown[]): void {
    this.fed.push(args);
  }
  /** The client's own message handling, which calls `this.notify`. */
  handle(...args: unknown[]): void {
    this.notify(...args);
  }
}

describe("watchConsumeNotices", () => {
  it("reports each notice where the client makes it, and the client still gets it", () => {
    const iter = new FakeIterator();
    const seen: ConsumeNotice[] = [];
    watchConsumeNotices(iter, (n) => seen.push(n));
    iter.handle({ type: "consumer_deleted", code: 409, description: "Consumer Deleted" });
    iter.handle({ type: "heartbeat", lastConsumerSequence: 0 });
    expect(seen).toEqual([
      { type: "consumer_deleted", description: "Consumer Deleted" },
      { type: "heartbeat", description: undefined },
    ]);
    expect(iter.fed).toEqual([[{ type: "consumer_deleted", code: 409, description: "Consumer Deleted" }], [{ type: "heartbeat", lastConsumerSequence: 0 }]]);
  });

  it("reads nats 2.x's notify(type, data) with no description", () => {
    const iter = new FakeIterator();
    const seen: ConsumeNotice[] = [];
    watchConsumeNotices(iter, (n) => seen.push(n));
    iter.handle("consumer_deleted", "409 Consumer Deleted");
    expect(seen).toEqual([{ type: "consumer_deleted", description: undefined }]);
    expect(iter.fed).toEqual([["consumer_deleted", "409 Consumer Deleted"]]);
  });

  it("a report that throws never reaches the client, and notices of no known shape are passed on unread", () => {
    const iter = new FakeIterator();
    let calls = 0;
    watchConsumeNotices(iter, () => {
      calls += 1;
      throw new Error("host bug");
    });
    expect(() => iter.handle({ type: "no_responders", code: 503 })).not.toThrow();
    iter.handle(undefined);
    iter.handle({ code: 1 });
    expect(calls).toBe(1);
    expect(iter.fed).toHaveLength(3);
  });

  it("a client without notify is read through status()", async () => {
    const seen: ConsumeNotice[] = [];
    const iter = {
      status: async () =>
        (async function* () {
          yield { type: "heartbeats_missed", count: 2 };
          yield { nothing: true };
          yield { type: "exceeded_limits", description: "Exceeded MaxWaiting" };
        })(),
    };
    watchConsumeNotices(iter, (n) => seen.push(n));
    await new Promise((r) => setTimeout(r, 0));
    expect(seen).toEqual([
      { type: "heartbeats_missed", description: undefined },
      { type: "exceeded_limits", description: "Exceeded MaxWaiting" },
    ]);
  });

  it("something that is no iterator is left alone", () => {
    expect(() => watchConsumeNotices(null, () => undefined)).not.toThrow();
    expect(() => watchConsumeNotices(42, () => undefined)).not.toThrow();
  });
});
