/**
 * CommitThenAck.run, through its public API only: a shutdown never cuts a pull short (the server
 * may be delivering into it), so an abort that lands while fetch() is returning lets the pull end
 * by itself, within its expiry — which the loop bounds by the lease (here the client's minimum,
 * 1000 ms: no AckWait is known and heartbeats are off). A fake consumer aborts the signal inside
 * fetch() and returns an iterator that ends after its expiry, counting any attempt to stop it.
 */
import type { JsMsg } from "@nats-io/jetstream";
import { describe, expect, it } from "vitest";
import { CommitThenAck } from "../../../src/index.js";
import { fakeMsg, type FakeMsg } from "../../helpers/fakes.js";

const EXPIRES_MS = 10_000;

/** A consumer whose fetch runs `during` before returning; its batch yields `msgs`, then waits for the expiry. */
function consumer(during: () => void | Promise<void>, msgs: readonly FakeMsg[] = []) {
  const state = { fetches: 0, stops: 0, expires: [] as number[] };
  return {
    state,
    fetch: async (opts: { expires?: number }) => {
      state.fetches += 1;
      state.expires.push(opts.expires ?? EXPIRES_MS);
      await during();
      const ended = new Promise<void>((resolve) => setTimeout(resolve, opts.expires ?? EXPIRES_MS));
      return {
        stop: () => void (state.stops += 1),
        async *[Symbol.asyncIterator](): AsyncGenerator<JsMsg> {
          yield* msgs;
          await ended;
        },
      };
    },
  };
}

async function timed(p: Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await p;
  return performance.now() - t0;
}

describe("run: an abort while fetch() returns", () => {
  it("aborted inside fetch(): the pull is not stopped; run resolves when it ends, within the clamped expiry", async () => {
    const shutdown = new AbortController();
    const c = consumer(() => shutdown.abort());
    const ms = await timed(new CommitThenAck().run(c as never, async () => undefined, { expiresMs: EXPIRES_MS, signal: shutdown.signal }));
    expect(c.state.expires).toEqual([1000]);
    expect(ms).toBeGreaterThanOrEqual(900);
    expect(ms).toBeLessThan(3000);
    expect(c.state).toMatchObject({ fetches: 1, stops: 0 });
  });

  it("aborted while fetch() is still pending, through the instance's signal: the same, and no second pull", async () => {
    const instance = new AbortController();
    const perRun = new AbortController();
    const c = consumer(async () => {
      instance.abort();
      await new Promise((resolve) => setTimeout(resolve, 20));
    });
    const ms = await timed(new CommitThenAck({ signal: instance.signal }).run(c as never, async () => undefined, { expiresMs: EXPIRES_MS, signal: perRun.signal }));
    expect(ms).toBeLessThan(3000);
    expect(c.state).toMatchObject({ fetches: 1, stops: 0 });
  });

  it("what the open pull brought is still written and acknowledged", async () => {
    const shutdown = new AbortController();
    const msgs = [fakeMsg(), fakeMsg()];
    const c = consumer(() => shutdown.abort(), msgs);
    const written: unknown[][] = [];
    const ms = await timed(
      new CommitThenAck().run(c as never, async (batch) => void written.push([...batch]), { expiresMs: EXPIRES_MS, signal: shutdown.signal }),
    );
    expect(ms).toBeLessThan(3000);
    expect(written).toEqual([msgs]);
    expect(msgs.map((m) => m.calls.ack)).toEqual([1, 1]);
  });
});
