/**
 * Item 12 — the heartbeat thread on a real nats-server. Shape as item 10: a durable consumer
 * with AckWait 2 s (1 s in the smoke run) and 1,000 messages; `CommitThenAck.runEach` with
 * heartbeats on (interval 1 s; 0.5 s in the smoke run), `concurrency: 1000` and
 * `heartbeat: { thread: true }`, so all 1,000 messages are in flight at once, each in a handler
 * that stays pending (about 3 AckWait periods), each its own batch, and every `+WPI` is sent by
 * the process-wide worker thread on its own connection, while the main thread looks after
 * every batch with one watch per interval (the thread's summary in shared memory, one field per
 * delivery). Baselines: item 10's raw arm (the
 * same 1,000 messages fetched by hand and kept alive by raw `nc.publish(reply, "+WPI")` from
 * the main thread on one interval), and item 10's library arm (the same loop, beating from the
 * main thread). A fourth arm holds the same 1,000 messages with nothing beating them (AckWait
 * 60 s), for the main thread's floor under 12a (12g). The arms alternate round by round.
 *
 * - Window: item 10's (five whole beat periods from a quarter period after the last message
 *   arrived, after a full collection), closed half a period after the fifth round counted from
 *   the middle of the arrivals (the handlers' starts), so every message has exactly five rounds
 *   in it while they arrive within half a period.
 * - Frames are counted by the server (`/connz` `in_msgs` of the connection that beats: the
 *   thread's own in the thread's arm, `nc` in the others), the same way in every arm: the
 *   thread's frames never pass through `nc`, and a spy subscription in this process would add
 *   its CPU to the arms.
 * - CPU per 100,000 frames: the main thread alone (`/proc/self/task/<pid>/schedstat`), the whole
 *   process (`process.cpuUsage()`, every thread), and the threads that appeared when the
 *   heartbeat thread started (the worker and what it started, same reading); and the timers the
 *   main thread created in the window (a census without stacks, open in every arm).
 * - The thread: the first thread arm's loop starts it lazily and waits until its connection is
 *   up before its first pull; the row then holds a handle on that same thread (same connection
 *   data, so the same worker) until it ends, as a service's loops hold it for their life, so
 *   later arms find it up and its code compiled. In the other arms it sits idle (its CPU there
 *   is in the note). With a warm-up round (the full run), the first arms are not counted. At the
 *   end the row lets it go and waits until it has exited.
 * - Memory: resident memory of the process (every thread) after a full collection before the
 *   first thread arm's loop started (no thread yet), against the end of its window (thread up,
 *   beating 1,000 messages); the baseline is the same reading across the first arm beating from
 *   the main thread, which runs just before it. One sample each: the thread starts once per
 *   process.
 * - Correctness: consumer info after each window (every message delivered once,
 *   `num_redelivered` 0); then the loop is stopped and the handlers return, and every message
 *   must be acknowledged.
 */
import type { JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { CommitThenAck, verifyInProgressPolicy, type VerifiedInProgressPolicy } from "../../src/index.js";
import { HeartbeatThread } from "../../src/lease/heartbeat-thread.js";
import { threadConnectionFor } from "../../src/lease/heartbeat-thread-options.js";
import type { Bench } from "../context.js";
import { figure, goals, withProblems, type Figure } from "../figure.js";
import { RawKeepAlive } from "../keep-alive.js";
import { ResidentBatch } from "../resident-batch.js";
import { addConsumer, consumerCounts, createStream, fetchExactly, waitAllAcked, type BenchStream } from "../jetstream.js";
import { cpuMs, heapAfterGc, interleave, mainThreadCpuMs, median, pluck, sleep } from "../measure.js";
import { publishedBetween, publishedByConnection } from "../server-counts.js";
import { residentBytes, threadIds, threadsCpuMs, threadsSince, untilThreadsEnded } from "../threads.js";
import { TimerCensus } from "../timer-census.js";
import { check, untilHeld, type Shape } from "./in-flight.js";

const MB = 1024 * 1024;

interface Sample {
  /** Process CPU milliseconds per 100,000 frames in the window. */
  readonly processPer100k: number;
  /** The main thread alone (NaN off Linux). */
  readonly mainPer100k: number;
  /** The main thread's CPU in the window, ms (NaN off Linux). */
  readonly mainMs: number;
  /** The heartbeat thread's threads (NaN before it exists, or off Linux). */
  readonly workerPer100k: number;
  /** The heartbeat thread's CPU in the window, ms (what it costs idle in the raw arm). */
  readonly workerMs: number;
  /** `+WPI` frames in the window, as the server counted them on the connection that beats. */
  readonly frames: number;
  /** What the other connections of the process published in the window. */
  readonly otherPublished: number;
  /** How long the messages took to arrive, first to last, ms. */
  readonly spreadMs: number;
  /** Timers the main thread created per second in the window (the library's scheduler arms one per wake-up). */
  readonly timersPerSecond: number;
}

/** What the arms share across the row: the thread's threads, the handle holding it, the memory readings. */
interface RowState {
  workerTids: string[];
  handle: HeartbeatThread | undefined;
  /** RSS across the first thread arm (the thread's start), and across the first main-thread arm and raw arm (before it), bytes. */
  threadRss: { before: number; after: number } | undefined;
  mainRss: { before: number; after: number } | undefined;
  rawRss: { before: number; after: number } | undefined;
  /** The resident batch's connection (bench/resident-batch.ts): its frames are no arm's. */
  residentCid: number | undefined;
}

interface WindowResult extends Sample {
  /** RSS at the end of the window. */
  readonly rss: number;
}

/** When the messages of an arm arrived (performance.now()): the first and the last. */
interface Arrivals {
  readonly first: number;
  readonly last: number;
}

/**
 * The window of item 10 — whole beat periods, opened a quarter period after the last message
 * arrived, after a full collection — closed half a period after the `periods`-th round counted
 * from the middle of the arrivals, so every message has exactly `periods` rounds in it while
 * the arrivals spread over less than half a period. Frames are counted by the server on the
 * connections `beating` selects; CPU of the main thread, the process and the heartbeat
 * thread's threads.
 */
async function measureWindow(
  monitorUrl: string,
  arrived: Arrivals,
  shape: Shape,
  beating: (cid: number) => boolean,
  workerTids: readonly string[],
): Promise<WindowResult> {
  heapAfterGc();
  await sleep(Math.max(0, arrived.last + shape.intervalMs / 4 - performance.now()));
  const pub0 = await publishedByConnection(monitorUrl);
  // Counts the main thread's timers (the worker's are its own): no stacks, a small cost per timer.
  const census = new TimerCensus();
  const worker0 = threadsCpuMs(workerTids);
  const main0 = mainThreadCpuMs();
  const cpu0 = cpuMs();
  const t0 = performance.now();
  try {
    await sleep(Math.max(0, (arrived.first + arrived.last) / 2 + (shape.periods + 0.5) * shape.intervalMs - performance.now()));
  } finally {
    census.close();
  }
  const cpu1 = cpuMs();
  const main1 = mainThreadCpuMs();
  const worker1 = threadsCpuMs(workerTids);
  const seconds = (performance.now() - t0) / 1000;
  const rss = residentBytes();
  const pub1 = await publishedByConnection(monitorUrl);
  const frames = Math.max(1, publishedBetween(pub0, pub1, (cid) => beating(cid)));
  const per100k = (ms: number): number => (ms / frames) * 100_000;
  return {
    processPer100k: per100k(cpu1 - cpu0),
    mainPer100k: per100k(main1 - main0),
    mainMs: main1 - main0,
    workerPer100k: per100k(worker1 - worker0),
    workerMs: worker1 - worker0,
    frames,
    otherPublished: publishedBetween(pub0, pub1, (cid) => !beating(cid)),
    spreadMs: arrived.last - arrived.first,
    timersPerSecond: census.created / seconds,
    rss,
  };
}

function sampleOf(w: WindowResult): Sample {
  const { rss: _rss, ...sample } = w;
  return sample;
}

/**
 * `runEach` holding every message in a pending handler: beats from the heartbeat thread
 * (`thread`), or from the main thread as in item 10 (`main`).
 */
async function eachArm(
  kind: "thread" | "main",
  s: BenchStream,
  nc: NatsConnection,
  monitorUrl: string,
  shape: Shape,
  policy: VerifiedInProgressPolicy,
  state: RowState,
  problems: string[],
): Promise<Sample> {
  const { name, consumer } = await addConsumer(s, { ackWaitMs: shape.ackWaitMs, maxAckPending: shape.n });
  const starting = kind === "thread" && state.handle === undefined;
  const firstMain = kind === "main" && state.mainRss === undefined && state.handle === undefined;
  heapAfterGc();
  const rss0 = residentBytes();
  const before = new Set(threadIds());
  const ack = new CommitThenAck({ inProgress: policy, connection: nc, ...(kind === "thread" ? { heartbeat: { thread: true } } : {}) });
  const stop = new AbortController();
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  let first = Number.NaN;
  let last = Number.NaN;
  const handler = (): Promise<void> => {
    last = performance.now();
    if (Number.isNaN(first)) first = last;
    return held;
  };
  const what = kind === "thread" ? "runEach with the thread" : "runEach, main-thread beats";
  let run: Promise<void> | undefined;
  try {
    run = ack.runEach(consumer, handler, {
      concurrency: shape.concurrency,
      expiresMs: 1000,
      signal: stop.signal,
      onError: (err, ctx) => problems.push(`${what} ${ctx.during}: ${String(err)}`),
    });
    // With the thread, the loop waited for its connection before its first pull: it is up.
    await untilHeld(s, name, shape.n);
    if (starting) {
      state.workerTids = threadsSince(before);
      // The same connection data as the loop's (`thread: true` copies `nc`): the same thread.
      const handle = HeartbeatThread.acquire(threadConnectionFor(true, [nc], "bench")!);
      state.handle = handle;
      if (handle.state !== "connected") problems.push(`the row's handle found the heartbeat thread ${handle.state}, not the loop's connected thread`);
    }
    const ownCid = nc.info?.client_id;
    const beating = kind === "thread" ? (cid: number) => cid !== ownCid && cid !== state.residentCid : (cid: number) => cid === ownCid;
    const w = await measureWindow(monitorUrl, { first, last }, shape, beating, state.workerTids);
    if (starting) state.threadRss = { before: rss0, after: w.rss };
    if (firstMain) state.mainRss = { before: rss0, after: w.rss };
    check(`${what} after the window`, await consumerCounts(s, name), shape.n, problems);
    // The loop stops pulling before its handlers return (each is acknowledged as it returns):
    // slots freed while it still pulls would send a refill the stream cannot fill, and the
    // client's idle-heartbeat monitor, counting misses since the last delivery, reports
    // heartbeats_missed on it at once (see docs/benchmarks.md, other findings).
    stop.abort();
    release();
    await run;
    await waitAllAcked(s, name, shape.n);
    return sampleOf(w);
  } finally {
    release();
    stop.abort();
    await run;
    await s.jsm.consumers.delete(s.stream, name);
  }
}

async function rawArm(s: BenchStream, nc: NatsConnection, monitorUrl: string, shape: Shape, state: RowState, problems: string[]): Promise<Sample> {
  const { name, consumer } = await addConsumer(s, { ackWaitMs: shape.ackWaitMs, maxAckPending: shape.n });
  heapAfterGc();
  const rss0 = residentBytes();
  const raw = new RawKeepAlive(nc, shape.intervalMs);
  let msgs: JsMsg[] = [];
  try {
    let first = Number.NaN;
    let last = Number.NaN;
    msgs = await fetchExactly(consumer, shape.n, shape.n, (batch) => {
      last = performance.now();
      if (Number.isNaN(first)) first = last;
      raw.add(batch, Date.now());
    });
    const ownCid = nc.info?.client_id;
    const w = await measureWindow(monitorUrl, { first, last }, shape, (cid) => cid === ownCid, state.workerTids);
    if (state.rawRss === undefined && state.handle === undefined) state.rawRss = { before: rss0, after: w.rss };
    check("raw publishes after the window", await consumerCounts(s, name), shape.n, problems);
    await raw.stop();
    for (const m of msgs) m.ack();
    await nc.flush();
    await waitAllAcked(s, name, shape.n);
    return sampleOf(w);
  } finally {
    await raw.stop();
    await s.jsm.consumers.delete(s.stream, name);
  }
}

/**
 * The floor under 12a: the same messages fetched and held, nothing beating them (AckWait long
 * enough that none is redelivered in the window), the resident batch beside them as in every
 * arm. What the main thread spends here (timers of the window, the client, collections) is in
 * every arm; 12a's goal is read against it.
 */
async function heldArm(s: BenchStream, nc: NatsConnection, monitorUrl: string, shape: Shape, state: RowState, problems: string[]): Promise<Sample> {
  const { name, consumer } = await addConsumer(s, { ackWaitMs: HELD_ACK_WAIT_MS, maxAckPending: shape.n });
  let msgs: JsMsg[] = [];
  try {
    let first = Number.NaN;
    let last = Number.NaN;
    msgs = await fetchExactly(consumer, shape.n, shape.n, () => {
      last = performance.now();
      if (Number.isNaN(first)) first = last;
    });
    const ownCid = nc.info?.client_id;
    const w = await measureWindow(monitorUrl, { first, last }, shape, (cid) => cid === ownCid, state.workerTids);
    check("messages held, nothing beating, after the window", await consumerCounts(s, name), shape.n, problems);
    for (const m of msgs) m.ack();
    await nc.flush();
    await waitAllAcked(s, name, shape.n);
    return sampleOf(w);
  } finally {
    await s.jsm.consumers.delete(s.stream, name);
  }
}

/** AckWait of the held arm's consumer: far past its window, so nothing is redelivered in it. */
const HELD_ACK_WAIT_MS = 60_000;

const fixed = (xs: readonly number[], digits = 0): string => xs.map((x) => (Number.isFinite(x) ? x.toFixed(digits) : "–")).join(", ");

export async function heartbeatThread(bench: Bench): Promise<Figure[]> {
  const c = bench.config.thread;
  const shape: Shape = { n: c.messages, concurrency: c.concurrency, ackWaitMs: c.ackWaitMs, intervalMs: c.intervalMs, periods: c.periods };
  const policy = verifyInProgressPolicy(
    { enabled: true, intervalMs: c.intervalMs, maxHeartbeats: 10_000, shutdownTimeoutMs: 1000 },
    { ackWaitMs: c.ackWaitMs, source: "configured" },
  );
  const nc = await bench.server.connect();
  const problems: string[] = [];
  // Beside every arm, so each measures beats of a running service (bench/resident-batch.ts).
  const resident = await ResidentBatch.start(bench, policy, c.ackWaitMs, problems);
  const state: RowState = { workerTids: [], handle: undefined, threadRss: undefined, mainRss: undefined, rawRss: undefined, residentCid: resident.clientId };
  const url = bench.monitorUrl;
  try {
    const s = await createStream(nc, "THREAD", shape.n);
    // The thread's arm last: the first raw and main-thread arms run before the thread exists.
    const samples = await interleave<"raw" | "held" | "main" | "thread", Sample>(
      {
        raw: () => rawArm(s, nc, url, shape, state, problems),
        held: () => heldArm(s, nc, url, shape, state, problems),
        main: () => eachArm("main", s, nc, url, shape, policy, state, problems),
        thread: () => eachArm("thread", s, nc, url, shape, policy, state, problems),
      },
      c.rounds,
      c.warmup,
    );
    await s.jsm.streams.delete(s.stream);
    const th = samples.thread;
    const main = samples.main;
    const raw = samples.raw;
    const count = shape.n.toLocaleString("en-US");
    const held = `${count} msgs in flight (runEach, ${shape.concurrency} handlers, AckWait ${shape.ackWaitMs / 1000} s, beats every ${shape.intervalMs / 1000} s)`;
    const framesNote =
      `+WPI frames per window (the server's count on the connection that beats): ${fixed(pluck(th, "frames"))} (thread), ${fixed(pluck(main, "frames"))} (main-thread beats), ` +
      `${fixed(pluck(raw, "frames"))} (raw), ${shape.periods} rounds of ${count} expected; published by nc in the thread arm's windows: ${fixed(pluck(th, "otherPublished"))}; ` +
      `the messages arrived within ${fixed(pluck(th, "spreadMs"))} ms (thread arm), ${fixed(pluck(main, "spreadMs"))} ms (main-thread beats); ` +
      `timers the main thread created per second in the window (one per wake-up of the library's scheduler): ${fixed(pluck(th, "timersPerSecond"), 1)} (thread), ` +
      `${fixed(pluck(main, "timersPerSecond"), 1)} (main-thread beats), ${fixed(pluck(raw, "timersPerSecond"), 1)} (raw)`;
    const mainTh = median(pluck(th, "mainPer100k"));
    const mainRaw = median(pluck(raw, "mainPer100k"));
    const out: Figure[] = [];
    if (Number.isFinite(mainTh)) {
      out.push(
        figure({
          id: "12a",
          item: 12,
          name: `CPU of the main thread, beats from the heartbeat thread, ${held}`,
          unit: "ms CPU/100k +WPI",
          value: mainTh,
          baselineName: "raw +WPI publishes from the main thread, same msgs and rounds",
          baseline: mainRaw,
          goal: goals.ratioAtMost(0.1),
          samples: { value: pluck(th, "mainPer100k"), baseline: pluck(raw, "mainPer100k") },
          note:
            "the thread sends every frame: what is left on the main thread is the watch's look once per interval (the thread's summary, one field per delivery; " +
            `each message a batch of its own under runEach), the loop and the resident batch; near 0 against sending the frames is the goal; ${framesNote}`,
        }),
      );
    }
    out.push(
      figure({
        id: "12b",
        item: 12,
        name: `CPU of the process (every thread), beats from the heartbeat thread, ${held}`,
        unit: "ms CPU/100k +WPI",
        value: median(pluck(th, "processPer100k")),
        baselineName: "raw +WPI publishes from the main thread",
        baseline: median(pluck(raw, "processPer100k")),
        goal: goals.ratioAtMost(1.1),
        samples: { value: pluck(th, "processPer100k"), baseline: pluck(raw, "processPer100k") },
      }),
    );
    const rss = state.threadRss;
    const mainRss = state.mainRss;
    const rawRss = state.rawRss;
    if (rss !== undefined && mainRss !== undefined) {
      const mb = (r: { before: number; after: number }): number => (r.after - r.before) / MB;
      const span = (r: { before: number; after: number }): string => `${(r.before / MB).toFixed(1)} → ${(r.after / MB).toFixed(1)} MB`;
      out.push(
        figure({
          id: "12c",
          item: 12,
          name: `resident memory of the process across the first thread arm: the thread started and beating ${count} msgs`,
          unit: "MB",
          value: mb(rss),
          baselineName: "across the first arm with main-thread beats, before the thread existed",
          baseline: mb(mainRss),
          goal: goals.addedAtMost(40, "MB"),
          samples: { value: [mb(rss)], baseline: [mb(mainRss)] },
          note:
            `RSS ${span(rss)} (thread arm), ${span(mainRss)} (main-thread beats)${rawRss !== undefined ? `, ${span(rawRss)} (raw arm, first of the row)` : ""}; ` +
            "one sample each: the thread starts once per process. The worker is a second V8 isolate with its own heap, NATS client and connection; " +
            "run from the sources, it also registers tsx's loader (a thread of its own) and compiles the sources it imports, where the package's worker loads one prebuilt file",
        }),
      );
    }
    const workerTh = median(pluck(th, "workerPer100k"));
    if (Number.isFinite(workerTh)) {
      out.push(
        figure({
          id: "12d",
          item: 12,
          name: "  CPU of the heartbeat thread's threads alone, same windows",
          unit: "ms CPU/100k +WPI",
          value: workerTh,
          baselineName: "raw +WPI publishes, main thread",
          baseline: mainRaw,
          samples: { value: pluck(th, "workerPer100k"), baseline: pluck(raw, "mainPer100k") },
          note:
            `${state.workerTids.length} threads appeared when the thread started; their CPU in the other arms' windows (the thread idle): ` +
            `${fixed(pluck(raw, "workerMs"), 2)} ms (raw), ${fixed(pluck(main, "workerMs"), 2)} ms (main-thread beats)`,
        }),
      );
    }
    const mainMain = median(pluck(main, "mainPer100k"));
    if (Number.isFinite(mainTh) && Number.isFinite(mainMain)) {
      out.push(
        figure({
          id: "12e",
          item: 12,
          name: "  CPU of the main thread, beats from the heartbeat thread (same windows as 12a)",
          unit: "ms CPU/100k +WPI",
          value: mainTh,
          baselineName: "the same loop beating from the main thread (item 10's arm), same rounds",
          baseline: mainMain,
          samples: { value: pluck(th, "mainPer100k"), baseline: pluck(main, "mainPer100k") },
        }),
      );
    }
    out.push(
      figure({
        id: "12f",
        item: 12,
        name: "  CPU of the process, beats from the heartbeat thread (same windows as 12b)",
        unit: "ms CPU/100k +WPI",
        value: median(pluck(th, "processPer100k")),
        baselineName: "the same loop beating from the main thread",
        baseline: median(pluck(main, "processPer100k")),
        samples: { value: pluck(th, "processPer100k"), baseline: pluck(main, "processPer100k") },
      }),
    );
    // The floor: the held arm's main-thread CPU, per 100,000 of the raw arm's frames (same windows).
    const heldMs = pluck(samples.held, "mainMs");
    const rawFrames = median(pluck(raw, "frames"));
    const heldPer100k = heldMs.map((ms) => (ms / rawFrames) * 100_000);
    const floor = median(heldPer100k);
    if (Number.isFinite(floor) && Number.isFinite(mainRaw)) {
      out.push(
        figure({
          id: "12g",
          item: 12,
          name: `  CPU of the main thread, the same msgs held and nothing beating (the floor under 12a)`,
          unit: "ms CPU/100k +WPI",
          value: floor,
          baselineName: "raw +WPI publishes, main thread (12a's baseline)",
          baseline: mainRaw,
          samples: { value: heldPer100k, baseline: pluck(raw, "mainPer100k") },
          note:
            `per 100,000 of the raw arm's frames (median ${fixed([rawFrames])} per window); main-thread ms per window: ${fixed(heldMs, 1)} (held), ` +
            `${fixed(pluck(th, "mainMs"), 1)} (thread), ${fixed(pluck(raw, "mainMs"), 1)} (raw); 12a's goal (0.1×) is ${fixed([(0.1 * mainRaw * rawFrames) / 100_000], 1)} ms per window`,
        }),
      );
    }
    return withProblems(out, problems);
  } finally {
    const handle = state.handle;
    if (handle !== undefined) {
      handle.release();
      // Not in the next row's way: the thread closes after its idle grace once nothing holds it.
      await Promise.race([handle.exited, sleep(10_000)]);
      await untilThreadsEnded(state.workerTids, 2000);
    }
    await resident.dispose();
    await nc.close();
  }
}
