import { getEventListeners } from "node:events";
import { describe, expect, it } from "vitest";
import type { JsMsg } from "@nats-io/jetstream";
import { Intake } from "../../../src/consume/intake.js";
import type { Arrival, PullSource } from "../../../src/consume/pull-source.js";
import { runEachMessage, type EachContext } from "../../../src/consume/run-each.js";
import { closedOrDraining, runBatches, Waker, type LoopContext } from "../../../src/consume/run-loop.js";
import { validateRunOptions } from "../../../src/consume/run-options.js";
import { AckingDeliveries, type StoredIds } from "../../../src/settle/acking-deliveries.js";
import type { BatchResult } from "../../../src/settle/batch-result.js";
import { emptyResult } from "../../../src/settle/summarize.js";
import { MetricsRecorder } from "../../../src/telemetry/metrics-recorder.js";
import { deferred, fakeMsg } from "../../helpers/fakes.js";

/** A source that hands out prepared batches, one per pull; every pull ends by itself. */
function scripted(batches: JsMsg[][], onPull?: () => void): { pulls: number[]; closes: number; open: (arrive: Arrival) => Promise<PullSource> } {
  const state = {
    pulls: [] as number[],
    closes: 0,
    open: async (arrive: Arrival): Promise<PullSource> => ({
      async pull(max) {
        state.pulls.push(max);
        onPull?.();
        const next = batches.shift() ?? [];
        for (const m of next.slice(0, max)) arrive(m, performance.now());
        await new Promise((r) => setTimeout(r, next.length === 0 ? 5 : 1));
        return Math.min(max, next.length);
      },
      outstanding: 0,
      refills: false,
      roomChanged: () => undefined,
      close: async () => void (state.closes += 1),
      onNotice: undefined,
      onEnded: undefined,
    }),
  };
  return state;
}

function context(open: (arrive: Arrival) => Promise<PullSource>, process: LoopContext["process"], flushes = { n: 0 }): LoopContext {
  return {
    openSource: (arrive) => open(arrive),
    intake: new Intake(undefined),
    metrics: MetricsRecorder.NONE,
    connection: undefined,
    shutdownTimeoutMs: 1000,
    flush: async () => void (flushes.n += 1),
    onIdle: () => undefined,
    sinkDown: () => false,
    onRecovered: () => () => undefined,
    confirm: undefined,
    acking: new AckingDeliveries(),
    process,
  };
}

describe("runBatches", () => {
  it("hands each batch over with its receive times, by position in the batch", async () => {
    const stop = new AbortController();
    const batches = [[fakeMsg(), fakeMsg(), fakeMsg()], [fakeMsg()]];
    const seen: Array<Array<number | undefined>> = [];
    const sequences: Array<{ readonly read: StoredIds | undefined; readonly of: number[] }> = [];
    let foreign: number | undefined = 0;
    const before = Date.now() - 1;
    const source = scripted(batches, () => {
      if (batches.length === 1) stop.abort();
    });
    await runBatches({ ...validateRunOptions({}), signal: stop.signal }, context(source.open, async (msgs, receivedAt, _signal, _onSent, read) => {
      seen.push(msgs.map((m, i) => receivedAt(m, i)));
      sequences.push({ read, of: msgs.map((m) => (m as unknown as { seq: number }).seq) });
      foreign = receivedAt(fakeMsg(), 0);
      return emptyResult();
    }));
    // The second pull was open when the loop was stopped: it ended by itself and its batch is written, not handed back.
    expect(seen.map((s) => s.length)).toEqual([3, 1]);
    // The stream sequences and timestamps read at arrival come with each batch, for its ACKs.
    for (const { read, of } of sequences) expect(read).toEqual({ sequences: of, stamps: of.map(() => 0) });
    for (const t of seen.flat()) expect(t).toBeGreaterThanOrEqual(before);
    expect(foreign).toBeUndefined();
  });

  it("never has more batches in flight than concurrency, pulls only for what it can start, and one pull at a time", async () => {
    const stop = new AbortController();
    const batches = Array.from({ length: 12 }, () => [fakeMsg()]);
    let inFlight = 0;
    let most = 0;
    const gates: Array<() => void> = [];
    const source = scripted(batches);
    const done = runBatches({ ...validateRunOptions({ concurrency: 3, batchSize: 5 }), signal: stop.signal }, context(source.open, async () => {
      inFlight += 1;
      most = Math.max(most, inFlight);
      const d = deferred();
      gates.push(() => d.resolve());
      await d.promise;
      inFlight -= 1;
      return emptyResult();
    }));
    await new Promise((r) => setTimeout(r, 50));
    expect(inFlight).toBe(3);
    expect(source.pulls).toHaveLength(3);
    // Capacity 15, one message in each of three writes: each pull asks for at most batchSize.
    expect(source.pulls.every((n) => n === 5)).toBe(true);
    gates.shift()!();
    await new Promise((r) => setTimeout(r, 20));
    expect(source.pulls).toHaveLength(4);
    stop.abort();
    for (const g of gates.splice(0)) g();
    await new Promise((r) => setTimeout(r, 5));
    for (const g of gates.splice(0)) g();
    await done;
    expect(most).toBe(3);
  });

  it("a pull never asks for more than the capacity left (held messages count)", async () => {
    const stop = new AbortController();
    const gates: Array<() => void> = [];
    const source = scripted([[fakeMsg(), fakeMsg(), fakeMsg()], [fakeMsg()]]);
    // Capacity 2 × 4 = 8; 3 held after the first pull, so the second may ask for 4 at most (batchSize).
    const capacityRun = runBatches({ ...validateRunOptions({ concurrency: 2, batchSize: 4 }), signal: stop.signal }, context(source.open, async () => {
      const d = deferred();
      gates.push(() => d.resolve());
      await d.promise;
      return emptyResult();
    }));
    await new Promise((r) => setTimeout(r, 30));
    expect(source.pulls.slice(0, 2)).toEqual([4, 4]);
    stop.abort();
    for (const g of gates.splice(0)) g();
    await new Promise((r) => setTimeout(r, 5));
    for (const g of gates.splice(0)) g();
    await capacityRun;
  });

  it("a stream sequence appears at most once in a batch: the latest delivery is kept", async () => {
    const stop = new AbortController();
    const first = fakeMsg({ seq: 7, deliveryCount: 1 });
    const again = fakeMsg({ seq: 7, deliveryCount: 2 });
    const other = fakeMsg({ seq: 8 });
    const batches: JsMsg[][] = [[first, other, again]];
    const seen: JsMsg[][] = [];
    const source = scripted(batches, () => {
      if (batches.length === 0) stop.abort();
    });
    await runBatches({ ...validateRunOptions({}), signal: stop.signal }, context(source.open, async (msgs) => {
      seen.push([...msgs]);
      stop.abort();
      return emptyResult();
    }));
    expect(seen).toEqual([[other, again]]);
  });

  it("resolves only after every started batch has settled, then flushes once", async () => {
    const stop = new AbortController();
    const d = deferred();
    let settled = false;
    const flushes = { n: 0 };
    const done = runBatches({ ...validateRunOptions({ concurrency: 2 }), signal: stop.signal }, context(scripted([[fakeMsg()]]).open, async () => {
      await d.promise;
      settled = true;
      return emptyResult();
    }, flushes));
    await new Promise((r) => setTimeout(r, 20));
    stop.abort();
    let resolved = false;
    void done.then(() => (resolved = true));
    await new Promise((r) => setTimeout(r, 20));
    expect(resolved).toBe(false);
    expect(flushes.n).toBe(0);
    d.resolve();
    await done;
    expect(settled).toBe(true);
    expect(flushes.n).toBe(1);
  });

  it("a batch refused before its write started (a malformed message) ends the loop, which rejects with the error: nothing unhandled, no pull after it, the other batch settled", async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (e: unknown): void => void unhandled.push(e);
    process.on("unhandledRejection", onUnhandled);
    try {
      const bug = new TypeError("msgs[0] is not a JetStream message (it has no working() method)");
      const source = scripted([[fakeMsg()], [fakeMsg()], [fakeMsg()], [fakeMsg()]]);
      const flushes = { n: 0 };
      let calls = 0;
      let settled = 0;
      const done = runBatches({ ...validateRunOptions({ concurrency: 2 }) }, context(source.open, async () => {
        calls += 1;
        if (calls === 2) throw bug;
        await new Promise((r) => setTimeout(r, 50));
        settled += 1;
        return emptyResult();
      }, flushes));
      await expect(done).rejects.toBe(bug);
      // Let a rejection nobody handled surface (Node reports it after the microtasks drain).
      await new Promise((r) => setTimeout(r, 20));
      expect(unhandled).toEqual([]);
      expect(calls).toBe(2);
      expect(settled).toBe(1);
      expect(source.pulls).toHaveLength(2);
      expect(flushes.n).toBe(1);
    } finally {
      process.off("unhandledRejection", onUnhandled);
    }
  });

  it("a loop restarted after each failure leaves no listener on the host's signal", async () => {
    const host = new AbortController();
    const closed = { isClosed: () => true } as never;
    const failing = async (): Promise<PullSource> => ({
      pull: async () => {
        throw new Error("connection closed");
      },
      outstanding: 0,
      refills: false,
      roomChanged: () => undefined,
      close: async () => undefined,
      onNotice: undefined,
      onEnded: undefined,
    });
    for (let i = 0; i < 12; i++) {
      await expect(runBatches({ ...validateRunOptions({}), signal: host.signal }, { ...context(failing, async () => emptyResult()), connection: closed })).rejects.toThrow("connection closed");
    }
    expect(getEventListeners(host.signal, "abort")).toHaveLength(0);
  });

  it("a pull that failed on a connection closed for good, or draining, is told apart from one to retry, on either client", () => {
    const named = (name: string, code?: string): Error => Object.assign(new Error(name), { name }, code === undefined ? {} : { code });
    // The 3.x client, this library, and the nats 2.x client (a NatsError known by its code).
    expect(closedOrDraining(named("ClosedConnectionError"), undefined)).toBe(true);
    expect(closedOrDraining(named("ConnectionClosedError"), undefined)).toBe(true);
    expect(closedOrDraining(named("NatsError", "CONNECTION_CLOSED"), undefined)).toBe(true);
    // A draining connection refuses every pull until it closes, on either client.
    expect(closedOrDraining(named("DrainingConnectionError"), { isClosed: () => false })).toBe(true);
    expect(closedOrDraining(named("NatsError", "CONNECTION_DRAINING"), { isClosed: () => false })).toBe(true);
    // Or the connection says so, whatever the error.
    expect(closedOrDraining(new Error("anything"), { isClosed: () => true })).toBe(true);
    // Errors worth a retry: a timeout, a disconnect, a NatsError of another code, not an Error.
    expect(closedOrDraining(named("NatsError", "TIMEOUT"), { isClosed: () => false })).toBe(false);
    expect(closedOrDraining(named("TimeoutError"), undefined)).toBe(false);
    expect(closedOrDraining({ code: "CONNECTION_CLOSED" }, undefined)).toBe(false);
    expect(closedOrDraining(named("NatsError", "CONNECTION_CLOSED"), { isClosed: () => { throw new Error("gone"); } })).toBe(true);
  });

  it("the shutdown bound of batches written after the abort does not outlive the loop", async () => {
    const stop = new AbortController();
    const timeouts = (): number => process.getActiveResourcesInfo().filter((r) => r === "Timeout").length;
    const batches = [[fakeMsg()], [fakeMsg()], [fakeMsg()]];
    let written = 0;
    // Every pull after the first hands a batch over while the loop is already stopping.
    const source = scripted(batches, () => {
      if (batches.length < 3) stop.abort();
    });
    const run = runBatches({ ...validateRunOptions({ concurrency: 4 }), signal: stop.signal }, {
      ...context(source.open, async () => {
        written += 1;
        return emptyResult();
      }),
      shutdownTimeoutMs: 60_000,
    });
    await run;
    await new Promise((r) => setTimeout(r, 10));
    const before = timeouts();
    expect(written).toBe(2);
    expect(source.closes).toBe(1);
    expect(timeouts()).toBeLessThanOrEqual(before);
    expect(process.getActiveResourcesInfo().filter((r) => r === "Timeout").length).toBeLessThan(5);
  });

  it("what a source brings between pulls (a pinned subscription) waits in the intake and starts as a batch", async () => {
    const stop = new AbortController();
    let arrive!: Arrival;
    const stray = [fakeMsg(), fakeMsg()];
    const seen: JsMsg[][] = [];
    const open = async (a: Arrival): Promise<PullSource> => {
      arrive = a;
      return {
        pull: async () => {
          const n = stray.length;
          for (const m of stray.splice(0)) arrive(m, performance.now());
          await new Promise((r) => setTimeout(r, 5));
          return n;
        },
        outstanding: 0,
        refills: false,
        roomChanged: () => undefined,
        close: async () => arrive(fakeMsg(), performance.now()),
        onNotice: undefined,
        onEnded: undefined,
      };
    };
    await runBatches({ ...validateRunOptions({ batchSize: 10 }), signal: stop.signal }, context(open, async (msgs): Promise<BatchResult> => {
      seen.push([...msgs]);
      stop.abort();
      return emptyResult();
    }));
    // The pull's two, then the one that arrived while the source closed.
    expect(seen.map((b) => b.length)).toEqual([2, 1]);
  });

  it("pulls served in turns (as the server serves pulls open at once): one batch per pull, never more writes than concurrency, every message once", async () => {
    const stop = new AbortController();
    const stock = Array.from({ length: 60 }, () => fakeMsg());
    const open: Array<{ max: number; got: number; filled: (() => void) | undefined; end: (n: number) => void }> = [];
    let pullsWithMessages = 0;
    // The "server": one message every millisecond to the next open pull in turn; a filled pull
    // is over at once (filled) and settles a few turns later, as the client's fetch does.
    const server = setInterval(() => {
      const p = open.shift();
      if (p === undefined) return;
      const m = stock.shift();
      if (m === undefined) {
        open.push(p);
        return;
      }
      if (p.got === 0) pullsWithMessages += 1;
      p.got += 1;
      arriveTo!(m, performance.now());
      if (p.got < p.max) open.push(p);
      else {
        p.filled?.();
        setTimeout(() => p.end(p.got), 2);
      }
    }, 1);
    let arriveTo: Arrival | undefined;
    const source: PullSource = {
      pull: (max, filled) =>
        new Promise<number>((resolve) => {
          const p = { max, got: 0, filled, end: resolve };
          open.push(p);
          // An expiry for pulls the stock cannot fill.
          setTimeout(() => {
            const i = open.indexOf(p);
            if (i >= 0) open.splice(i, 1);
            if (p.got < p.max) resolve(p.got);
          }, 40);
        }),
      get outstanding() {
        return open.reduce((n, p) => n + p.max - p.got, 0);
      },
      refills: false,
      roomChanged: () => undefined,
      close: async () => undefined,
      onNotice: undefined,
      onEnded: undefined,
    };
    let inFlight = 0;
    let most = 0;
    const written: JsMsg[] = [];
    const sizes: number[] = [];
    const done = runBatches({ ...validateRunOptions({ concurrency: 3, batchSize: 5 }), signal: stop.signal }, context(async (arrive) => ((arriveTo = arrive), source), async (msgs) => {
      inFlight += 1;
      most = Math.max(most, inFlight);
      sizes.push(msgs.length);
      written.push(...msgs);
      await new Promise((r) => setTimeout(r, 8));
      inFlight -= 1;
      return emptyResult();
    }));
    try {
      for (let i = 0; i < 400 && written.length < 60; i++) await new Promise((r) => setTimeout(r, 5));
    } finally {
      stop.abort();
      await done;
      clearInterval(server);
    }
    expect(new Set(written).size).toBe(60);
    expect(written).toHaveLength(60);
    expect(most).toBeLessThanOrEqual(3);
    expect(Math.max(...sizes)).toBeLessThanOrEqual(5);
    expect(sizes.length).toBeLessThanOrEqual(pullsWithMessages);
  });

  it("Waker: one listener on the signal however often the loop waits, removed by dispose; an abort wakes a waiting loop", async () => {
    const ctl = new AbortController();
    const wake = new Waker(ctl.signal);
    for (let i = 0; i < 100; i++) {
      const waiting = wake.wait();
      wake.wake();
      await waiting;
    }
    expect(getEventListeners(ctl.signal, "abort")).toHaveLength(1);
    const waiting = wake.wait();
    ctl.abort();
    await waiting;
    await wake.wait();
    wake.dispose();
    expect(getEventListeners(ctl.signal, "abort")).toHaveLength(0);
    const other = new AbortController();
    const w2 = new Waker(other.signal);
    w2.dispose();
    expect(getEventListeners(other.signal, "abort")).toHaveLength(0);
  });
});

describe("runEachMessage", () => {
  it("a message refused before its handler ran (a malformed message) ends the loop, which rejects with the error: nothing unhandled, no pull after it", async () => {
    const unhandled: unknown[] = [];
    const onUnhandled = (e: unknown): void => void unhandled.push(e);
    process.on("unhandledRejection", onUnhandled);
    try {
      const bug = new TypeError("msgs[0] is not a JetStream message (it has no working() method)");
      const pulls: number[] = [];
      let open = 0;
      const source = async (arrive: Arrival): Promise<PullSource> => ({
        async pull(max) {
          pulls.push(max);
          open += max;
          arrive(fakeMsg(), performance.now());
          await new Promise((r) => setTimeout(r, 5));
          open -= max;
          return 1;
        },
        // What the open pulls still ask for: the loop pulls only for room left.
        get outstanding() {
          return open;
        },
        refills: false,
        roomChanged: () => undefined,
        close: async () => undefined,
        onNotice: undefined,
        onEnded: undefined,
      });
      let calls = 0;
      const each: EachContext = {
        ...context(source, async () => emptyResult()),
        processOne: async () => {
          calls += 1;
          throw bug;
        },
      };
      const done = runEachMessage({ ...validateRunOptions({ concurrency: 1 }) }, each);
      await expect(done).rejects.toBe(bug);
      await new Promise((r) => setTimeout(r, 20));
      expect(unhandled).toEqual([]);
      expect(calls).toBe(1);
      expect(pulls).toHaveLength(1);
    } finally {
      process.off("unhandledRejection", onUnhandled);
    }
  });

  it("pulls again when its subscription ends outside a pull, its refills unanswered (the nats 2.x client after a deleted consumer)", async () => {
    const stop = new AbortController();
    const pulls: number[] = [];
    let ended = false;
    let source: PullSource | undefined;
    const open = async (): Promise<PullSource> =>
      (source = {
        async pull(max) {
          pulls.push(max);
          // The first window finds the subscription ended: it is opened again, and the new one
          // sends its refill at once (outstanding), which nobody answers.
          if (pulls.length === 1) throw new Error("consumer deleted");
          stop.abort();
          return 0;
        },
        get outstanding() {
          return pulls.length >= 1 && !ended ? 100_000 : 0;
        },
        refills: true,
        roomChanged: () => undefined,
        close: async () => undefined,
        onNotice: undefined,
        onEnded: undefined,
      });
    const each: EachContext = { ...context(open, async () => emptyResult()), processOne: async () => emptyResult() };
    const loop = runEachMessage({ ...validateRunOptions({ concurrency: 8 }), signal: stop.signal }, each);
    // After the failure's pause the loop waits: its subscription has a refill outstanding.
    await new Promise((r) => setTimeout(r, 300));
    expect(pulls).toHaveLength(1);
    // That subscription ends without a pull open: the loop is told, and pulls again.
    ended = true;
    source!.onEnded?.();
    await loop;
    expect(pulls).toHaveLength(2);
  });
});
