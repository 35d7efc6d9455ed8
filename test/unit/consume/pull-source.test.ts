/**
 * The gated `consume()` source, on a fake client iterator: a subscription that ended is opened
 * again, and one that opens while the loop closes is closed too, never left to outlive the loop.
 */
import { describe, expect, it } from "vitest";
import type { Consumer } from "@nats-io/jetstream";
import { consumeSource } from "../../../src/consume/pull-source.js";
import { deferred } from "../../helpers/fakes.js";

/** A client iterator of the shape the gate reads; `end(err)` ends its subscription. */
function fakeIterator(): { iter: { notify(n: unknown): void; pending: { msgs: number }; opts: { max_messages: number } }; closes: () => number; end: (err?: Error) => void } {
  const closed = deferred<unknown>();
  let closes = 0;
  const iter = {
    pending: { msgs: 0 },
    opts: { max_messages: 0 },
    pull: () => undefined,
    pullOptions: () => ({ batch: 10 }),
    closed: () => closed.promise,
    close: async () => {
      closes += 1;
      closed.resolve(undefined);
    },
    notify: (_n: unknown) => undefined,
  };
  return { iter, closes: () => closes, end: (err) => closed.resolve(err) };
}

describe("consumeSource", () => {
  it("a subscription that opens again while the loop closes is closed as well", async () => {
    const first = fakeIterator();
    const second = fakeIterator();
    const opening = deferred<object>();
    let opened = 0;
    const consumer = {
      consume: async () => {
        opened += 1;
        return opened === 1 ? first.iter : await opening.promise;
      },
    } as unknown as Pick<Consumer, "consume">;
    const source = await consumeSource(consumer, 1000, 10, undefined, () => 10, () => undefined);
    expect(source).toBeDefined();
    // The consumer was deleted: the subscription ends with an error.
    const deleted = new Error("consumer deleted");
    first.end(deleted);
    await new Promise((r) => setTimeout(r, 0));
    // The next window reports it; the one after opens a new subscription, and the loop closes meanwhile.
    await expect(source!.pull(5)).rejects.toBe(deleted);
    expect(opened).toBe(1);
    const pull = source!.pull(5);
    await new Promise((r) => setTimeout(r, 0));
    expect(opened).toBe(2);
    const closing = source!.close();
    opening.resolve(second.iter);
    await expect(pull).resolves.toBe(0);
    await closing;
    expect(second.closes()).toBe(1);
    expect(source!.outstanding).toBe(0);
  });

  it("a subscription that ended without an error of its own (the connection drains) is opened again at once: the client's refusal is what the window reports", async () => {
    const first = fakeIterator();
    const refusal = Object.assign(new Error("connection draining"), { name: "DrainingConnectionError" });
    let opened = 0;
    const consumer = {
      consume: async () => {
        opened += 1;
        if (opened === 1) return first.iter;
        throw refusal;
      },
    } as unknown as Pick<Consumer, "consume">;
    const source = await consumeSource(consumer, 1000, 10, undefined, () => 10, () => undefined);
    first.end();
    await new Promise((r) => setTimeout(r, 0));
    await expect(source!.pull(5)).rejects.toBe(refusal);
    expect(opened).toBe(2);
  });

  it("a subscription opened again asks in its first pull only for what the loop can start then, and its refills for up to the capacity", async () => {
    const iterators = [fakeIterator(), fakeIterator()];
    const asked: Array<{ max_messages?: number; threshold_messages?: number }> = [];
    const consumer = {
      consume: async (opts: { max_messages?: number; threshold_messages?: number }) => {
        asked.push(opts);
        return iterators[asked.length - 1]!.iter;
      },
    } as unknown as Pick<Consumer, "consume">;
    let room = 10;
    const source = await consumeSource(consumer, 1000, 10, undefined, () => room, () => undefined);
    expect(asked[0]).toMatchObject({ max_messages: 10, threshold_messages: 8 });
    // Seven writes still run when the subscription ends.
    room = 3;
    iterators[0]!.end(new Error("heartbeats missed"));
    await new Promise((r) => setTimeout(r, 0));
    await expect(source!.pull(3)).rejects.toThrow("heartbeats missed");
    // Not opened again until the loop pulls (after its backoff), then with the room it has.
    expect(asked).toHaveLength(1);
    room = 2;
    const window = source!.pull(2);
    await new Promise((r) => setTimeout(r, 0));
    expect(asked[1]).toMatchObject({ max_messages: 2, threshold_messages: 8 });
    // The client's refills (max_messages less pending) may then ask for up to the capacity; the gate bounds each by the room.
    expect(iterators[1]!.iter.opts.max_messages).toBe(10);
    await source!.close();
    await window;
  });

  it("reports the notices that stop deliveries, not heartbeats, nor a missed one while no pull is out", async () => {
    const it = fakeIterator();
    const consumer = { consume: async () => it.iter } as unknown as Pick<Consumer, "consume">;
    const source = await consumeSource(consumer, 1000, 10, undefined, () => 10, () => undefined);
    const seen: unknown[] = [];
    source!.onNotice = (n) => seen.push(n);
    it.iter.notify({ type: "heartbeat", lastConsumerSequence: 0 });
    it.iter.notify({ type: "next", options: { batch: 10 } });
    it.iter.notify({ type: "heartbeats_missed", count: 1 });
    it.iter.pending.msgs = 10;
    it.iter.notify({ type: "heartbeats_missed", count: 2 });
    it.iter.notify({ type: "consumer_deleted", code: 409, description: "x".repeat(300) });
    expect(seen).toEqual([
      { type: "heartbeats_missed", description: undefined },
      { type: "consumer_deleted", description: "x".repeat(200) },
    ]);
    it.end();
    await source!.close();
  });
});
