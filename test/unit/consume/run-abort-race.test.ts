/**
 * CommitThenAck.run, through its public API only: an abort that lands while fetch() is
 * returning — after the pull went out, before the loop could listen for the abort — must not
 * leave the loop waiting for the fetch to expire. A fake consumer aborts the signal inside
 * fetch() and returns an iterator that ends only when stopped or after expiresMs.
 */
import type { JsMsg } from "@nats-io/jetstream";
import { describe, expect, it } from "vitest";
import { CommitThenAck } from "../../../src/index.js";
import { fakeMsg, type FakeMsg } from "../../helpers/fakes.js";

const EXPIRES_MS = 10_000;

/** A consumer whose fetch runs `during` before returning; its batch yields `msgs`, then waits for stop() or the expiry. */
function consumer(during: () => void | Promise<void>, msgs: readonly FakeMsg[] = []) {
  const state = { fetches: 0, stops: 0 };
  return {
    state,
    fetch: async (opts: { expires?: number }) => {
      state.fetches += 1;
      await during();
      let end!: () => void;
      const ended = new Promise<void>((resolve) => (end = resolve));
      const expiry = setTimeout(end, opts.expires ?? EXPIRES_MS);
      return {
        stop: () => {
          state.stops += 1;
          clearTimeout(expiry);
          end();
        },
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
  it("aborted inside fetch(): run resolves at once, without waiting for the expiry", async () => {
    const shutdown = new AbortController();
    const c = consumer(() => shutdown.abort());
    const ms = await timed(new CommitThenAck().run(c as never, async () => undefined, { expiresMs: EXPIRES_MS, signal: shutdown.signal }));
    expect(ms).toBeLessThan(3000);
    expect(c.state).toEqual({ fetches: 1, stops: 1 });
  });

  it("aborted while fetch() is still pending, through the instance's signal: the same", async () => {
    const instance = new AbortController();
    const perRun = new AbortController();
    const c = consumer(async () => {
      instance.abort();
      await new Promise((resolve) => setTimeout(resolve, 20));
    });
    const ms = await timed(new CommitThenAck({ signal: instance.signal }).run(c as never, async () => undefined, { expiresMs: EXPIRES_MS, signal: perRun.signal }));
    expect(ms).toBeLessThan(3000);
    expect(c.state.fetches).toBe(1);
    expect(c.state.stops).toBeGreaterThanOrEqual(1);
  });

  it("what arrived before the abort is still written and acknowledged, without waiting for the expiry", async () => {
    const shutdown = new AbortController();
    const msgs = [fakeMsg(), fakeMsg()];
    const c = consumer(() => shutdown.abort(), msgs);
    const written: JsMsg[][] = [];
    const ms = await timed(
      new CommitThenAck().run(c as never, async (batch) => void written.push([...batch]), { expiresMs: EXPIRES_MS, signal: shutdown.signal }),
    );
    expect(ms).toBeLessThan(3000);
    expect(written).toEqual([msgs]);
    expect(msgs.map((m) => m.calls.ack)).toEqual([1, 1]);
  });
});
