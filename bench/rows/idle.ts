/**
 * Item 9 — what a loop costs when there is nothing to fetch. Shape: an empty stream; batch
 * size 100, fetch expiry 1,000 ms; for a fixed wall time, the process CPU of
 * `CommitThenAck.run` (heartbeats on, interval 10 s, AckWait 30 s) against a hand-written
 * idle loop (`fetch` the same batch size with the same expiry, write and ack whatever came,
 * fetch again). One idle loop costs a few hundred microseconds of CPU per second, below what
 * `process.cpuUsage()` can tell apart from the process's own background, so each arm runs 64
 * loops side by side, each on its own durable consumer (a service consuming several streams),
 * and the figure is the CPU per loop and second. Every window starts once every loop has its
 * first pull out and a full garbage collection has run (so no arm pays for the garbage of the
 * one before), and ends before any loop is stopped: start-up and shutdown are not counted.
 * Also from each window: the pull requests published (the client's `outMsgs`, to show both
 * arms asked the server equally often), the client's socket writes per pull (pulls published
 * in one tick share a write), and the main thread's CPU alone (Linux), which leaves out V8's
 * garbage-collection and compiler threads. After the timed rounds, one more window per arm
 * counts the promises and timers created in it (an `async_hooks` init hook, which slows what
 * it watches, so that window's CPU is not used): a count, the same from run to run, where the
 * CPU of an idle loop moves by more than the goal's margin.
 */
import { createHook } from "node:async_hooks";
import type { Consumer, JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { CommitThenAck, verifyInProgressPolicy, type VerifiedInProgressPolicy } from "../../src/index.js";
import type { Bench } from "../context.js";
import { figure, goals, type Figure } from "../figure.js";
import { addConsumer, createStream } from "../jetstream.js";
import { countSocketWrites } from "../socket-writes.js";
import { cpuMs, heapAfterGc, interleave, mainThreadCpuMs, medians, pluck, sleep } from "../measure.js";

const ACK_WAIT_MS = 30_000;
/** Time for every loop's first pull to go out before the window opens. */
const SETTLE_MS = 300;
/** Time for the collector's concurrent sweeping to finish after the forced collection. */
const GC_SETTLE_MS = 100;

interface Shape {
  readonly batchSize: number;
  readonly expiresMs: number;
  readonly windowMs: number;
}

interface Window {
  /** Process CPU per loop and second of wall time, µs. */
  readonly cpuUs: number;
  /** The same, main thread alone (NaN off Linux). */
  readonly mainUs: number;
  /** Messages the client published in the window (pull requests), per loop and second. */
  readonly pulls: number;
  /** Client socket writes per pull request (pulls that go out in one tick share a write). */
  readonly writesPerPull: number;
}

/** Async resources created in a counting window, per loop and second. */
interface Created {
  readonly promises: number;
  readonly timers: number;
}

/** A running set of loops: `stop` ends them and resolves once all have returned. */
type Loops = { stop(): Promise<void> };

function startLibrary(consumers: readonly Consumer[], shape: Shape, policy: VerifiedInProgressPolicy): Loops {
  const write = async (_msgs: readonly JsMsg[]): Promise<void> => {};
  // One signal per loop, as the hand loops have one flag each (and Node warns when more than
  // ten listeners share one signal).
  const stops = consumers.map(() => new AbortController());
  const runs = consumers.map((consumer, i) => {
    const ack = new CommitThenAck({ inProgress: policy });
    return ack.run(consumer, write, { batchSize: shape.batchSize, expiresMs: shape.expiresMs, signal: stops[i]!.signal });
  });
  return {
    async stop() {
      for (const s of stops) s.abort();
      await Promise.all(runs);
    },
  };
}

function startHand(consumers: readonly Consumer[], shape: Shape): Loops {
  let stopped = false;
  const current = new Set<{ stop(err?: Error): void }>();
  const write = async (_msgs: readonly JsMsg[]): Promise<void> => {};
  const runs = consumers.map(async (consumer) => {
    while (!stopped) {
      const iter = await consumer.fetch({ max_messages: shape.batchSize, expires: shape.expiresMs });
      current.add(iter);
      const batch: JsMsg[] = [];
      for await (const m of iter) batch.push(m);
      current.delete(iter);
      if (batch.length === 0) continue;
      await write(batch);
      for (const m of batch) m.ack();
    }
  });
  return {
    async stop() {
      stopped = true;
      for (const iter of current) iter.stop();
      await Promise.all(runs);
    },
  };
}

/** One window with an init hook on: the promises and timers the arm creates, per loop and second. */
async function count(loops: number, shape: Shape, start: () => Loops): Promise<Created> {
  const running = start();
  try {
    await sleep(SETTLE_MS);
    let promises = 0;
    let timers = 0;
    const hook = createHook({
      init(_id, type) {
        if (type === "PROMISE") promises += 1;
        else if (type === "Timeout") timers += 1;
      },
    }).enable();
    const t0 = performance.now();
    await sleep(shape.windowMs);
    hook.disable();
    const perLoopSecond = (n: number): number => n / (loops * ((performance.now() - t0) / 1000));
    return { promises: perLoopSecond(promises), timers: perLoopSecond(timers) };
  } finally {
    await running.stop();
  }
}

async function measure(nc: NatsConnection, loops: number, shape: Shape, start: () => Loops): Promise<Window> {
  const running = start();
  try {
    await sleep(SETTLE_MS);
    // The previous arm's garbage and this one's start-up are collected before the window, or a
    // collection of them would land in whichever window comes next.
    heapAfterGc();
    await sleep(GC_SETTLE_MS);
    const writes = countSocketWrites(nc);
    const out0 = nc.stats().outMsgs;
    const main0 = mainThreadCpuMs();
    const cpu0 = cpuMs();
    const t0 = performance.now();
    await sleep(shape.windowMs);
    const cpu1 = cpuMs();
    const main1 = mainThreadCpuMs();
    const seconds = (performance.now() - t0) / 1000;
    const out1 = nc.stats().outMsgs;
    const written = writes.writes;
    writes.restore();
    const per = (ms: number): number => (ms * 1000) / (loops * seconds);
    return { cpuUs: per(cpu1 - cpu0), mainUs: per(main1 - main0), pulls: (out1 - out0) / (loops * seconds), writesPerPull: written / Math.max(1, out1 - out0) };
  } finally {
    await running.stop();
  }
}

export async function idle(bench: Bench): Promise<Figure[]> {
  const c = bench.config.idle;
  const shape: Shape = { batchSize: c.batchSize, expiresMs: c.expiresMs, windowMs: c.windowMs };
  const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 10_000 }, { ackWaitMs: ACK_WAIT_MS, source: "configured" });
  const nc = await bench.server.connect();
  try {
    const s = await createStream(nc, "IDLE", 0);
    const consumers: Consumer[] = [];
    for (let i = 0; i < c.loops; i++) consumers.push((await addConsumer(s, { ackWaitMs: ACK_WAIT_MS, maxAckPending: 1000 })).consumer);
    const samples = await interleave<"hand" | "library", Window>(
      {
        hand: () => measure(nc, c.loops, shape, () => startHand(consumers, shape)),
        library: () => measure(nc, c.loops, shape, () => startLibrary(consumers, shape, policy)),
      },
      c.rounds,
      // The hand loop's code takes a few windows to warm up; the smoke run only proves the row runs.
      bench.config.mode === "smoke" ? 0 : 2,
    );
    const created = { hand: await count(c.loops, shape, () => startHand(consumers, shape)), library: await count(c.loops, shape, () => startLibrary(consumers, shape, policy)) };
    await s.jsm.streams.delete(s.stream);
    const cpu = medians({ hand: pluck(samples.hand, "cpuUs"), library: pluck(samples.library, "cpuUs") });
    const main = medians({ hand: pluck(samples.hand, "mainUs"), library: pluck(samples.library, "mainUs") });
    const pulls = medians({ hand: pluck(samples.hand, "pulls"), library: pluck(samples.library, "pulls") });
    const writes = medians({ hand: pluck(samples.hand, "writesPerPull"), library: pluck(samples.library, "writesPerPull") });
    return [
      figure({
        id: "9a",
        item: 9,
        name: `CommitThenAck.run idle (empty stream), heartbeats on, batch ${c.batchSize}, expires ${c.expiresMs} ms, ${c.loops} loops × ${c.windowMs / 1000} s`,
        unit: "µs CPU/loop/s",
        value: cpu.library,
        baselineName: "hand-written idle fetch loop",
        baseline: cpu.hand,
        goal: goals.ratioAtMost(1.05),
        samples: { value: pluck(samples.library, "cpuUs"), baseline: pluck(samples.hand, "cpuUs") },
        note:
          `pull requests per loop and second: ${pulls.library.toFixed(2)} (library), ${pulls.hand.toFixed(2)} (hand-written); ` +
          `client socket writes per pull: ${writes.library.toFixed(2)} (library), ${writes.hand.toFixed(2)} (hand-written)`,
      }),
      ...(Number.isFinite(main.library)
        ? [
            figure({
              id: "9b",
              item: 9,
              name: "  CPU of the main thread alone, same windows (V8's helper threads left out)",
              unit: "µs CPU/loop/s",
              value: main.library,
              baselineName: "hand-written idle fetch loop",
              baseline: main.hand,
              samples: { value: pluck(samples.library, "mainUs"), baseline: pluck(samples.hand, "mainUs") },
            }),
          ]
        : []),
      figure({
        id: "9c",
        item: 9,
        name: "  promises created per loop and second (one counting window; the process's own included)",
        unit: "promises/loop/s",
        value: created.library.promises,
        baselineName: "hand-written idle fetch loop",
        baseline: created.hand.promises,
        note: `timers created per loop and second: ${created.library.timers.toFixed(2)} (library), ${created.hand.timers.toFixed(2)} (hand-written)`,
      }),
    ];
  } finally {
    await nc.close();
  }
}
