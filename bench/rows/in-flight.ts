/**
 * Item 10 — heartbeats for many messages in flight on a real nats-server. Shape: a durable
 * consumer with a short AckWait (2 s; 1 s in the smoke run) and 1,000 messages;
 * `CommitThenAck.runEach` with heartbeats on (interval 1 s; 0.5 s in the smoke run) and
 * `concurrency: 1000`, so all 1,000 messages are in flight at once, each in a handler that stays
 * pending, every one on its own lease (runEach pulls only for free handlers, so a message in
 * flight is a running handler). The handlers last several AckWait periods (until the arm
 * ends), so every message lives on its beats alone. Per arm:
 *
 * - timers: a census of the global timer functions (as in item 5), open for the whole arm and
 *   recording where each timer was created, counts the live timers created by the library's
 *   scheduler (`src/lease/scheduler.ts`) and by any library file, while all 1,000 are held;
 * - CPU: `process.cpuUsage()` over a window of whole beat periods (opened a quarter period
 *   after the last message arrived, after a full garbage collection, so neither the previous
 *   arm's garbage nor this arm's set-up is collected inside it; closed half a period after the
 *   last round of the window),
 *   divided by the `+WPI` frames sent in it (the client's `outMsgs`: nothing else is published
 *   while the loop waits for a free slot), per 100,000 frames. The baseline, as in item 4:
 *   the same number of messages fetched by hand from a fresh consumer and kept alive by raw
 *   `nc.publish(reply, "+WPI")` on one interval, the same number of rounds, the same window.
 *   The arms alternate round by round (census open in both, so both pay its wrapping).
 *   For diagnosis, from the same windows: the main thread's CPU alone (Linux), which leaves
 *   out V8's garbage-collection and compiler threads, and the client's socket writes per
 *   round (frames published in one tick share a write).
 * - redeliveries: consumer info after the window (`num_redelivered` 0, every message
 *   delivered once), then all are released and acknowledged.
 */
import type { JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { CommitThenAck, verifyInProgressPolicy, type VerifiedInProgressPolicy } from "../../src/index.js";
import type { Bench } from "../context.js";
import { figure, goals, withProblems, type Figure } from "../figure.js";
import { RawKeepAlive } from "../keep-alive.js";
import { ResidentBatch } from "../resident-batch.js";
import { addConsumer, consumerCounts, createStream, fetchExactly, waitAllAcked, type BenchStream, type ConsumerCounts } from "../jetstream.js";
import { cpuMs, heapAfterGc, interleave, mainThreadCpuMs, median, pluck, sleep } from "../measure.js";
import { countSocketWrites } from "../socket-writes.js";
import { TimerCensus } from "../timer-census.js";

export interface Shape {
  readonly n: number;
  readonly concurrency: number;
  readonly ackWaitMs: number;
  readonly intervalMs: number;
  readonly periods: number;
}

interface Sample {
  /** CPU milliseconds per 100,000 frames in the window. */
  readonly cpuPer100k: number;
  /** The same, main thread alone (NaN off Linux). */
  readonly mainPer100k: number;
  /** Client socket writes per beat round in the window. */
  readonly writesPerRound: number;
  readonly frames: number;
  /** Live timers created by the library's scheduler while everything was held (NaN for the raw arm). */
  readonly schedulerTimers: number;
  /** Live timers created by any library file. */
  readonly libraryTimers: number;
  /** Live timers of any origin created during the arm. */
  readonly allTimers: number;
  /** Timers created during the CPU window (census wrappers, stack traces: a cost both arms share). */
  readonly createdInWindow: number;
}

export const isScheduler = (stack: string): boolean => stack.includes("/src/lease/scheduler.ts");
/** A library file anywhere on the stack (a client timer the library's call made counts too). */
export const isLibrary = (stack: string): boolean => stack.includes("/src/");

/** Waits until the consumer shows `n` messages delivered and awaiting their ACK. */
export async function untilHeld(s: BenchStream, name: string, n: number): Promise<void> {
  const deadline = performance.now() + 10_000;
  for (;;) {
    const c = await consumerCounts(s, name);
    if (c.delivered >= n && c.ackPending >= n) return;
    if (performance.now() > deadline) throw new Error(`consumer ${name}: ${c.ackPending} of ${n} in flight after 10 s`);
    await sleep(5);
  }
}

export interface WindowResult {
  readonly cpuPer100k: number;
  readonly mainPer100k: number;
  readonly writesPerRound: number;
  readonly frames: number;
  readonly created: number;
  /** The window's length, seconds. */
  readonly seconds: number;
}

/**
 * The CPU window: from a quarter period after `arrivedAt` to half a period after the last round
 * (`created`: the timers `census` saw created in it, NaN without one).
 */
export async function window(nc: NatsConnection, arrivedAt: number, shape: Shape, census?: TimerCensus): Promise<WindowResult> {
  // What the previous arm and this arm's set-up left behind is collected now, before the
  // window: otherwise a collection of it lands in whichever window comes next.
  heapAfterGc();
  await sleep(Math.max(0, arrivedAt + shape.intervalMs / 4 - performance.now()));
  const writes = countSocketWrites(nc);
  try {
    const out0 = nc.stats().outMsgs;
    const created0 = census?.created ?? Number.NaN;
    const main0 = mainThreadCpuMs();
    const cpu0 = cpuMs();
    const t0 = performance.now();
    await sleep(Math.max(0, arrivedAt + (shape.periods + 0.5) * shape.intervalMs - performance.now()));
    const cpu1 = cpuMs();
    const seconds = (performance.now() - t0) / 1000;
    const main1 = mainThreadCpuMs();
    const frames = Math.max(1, nc.stats().outMsgs - out0);
    return {
      cpuPer100k: ((cpu1 - cpu0) / frames) * 100_000,
      mainPer100k: ((main1 - main0) / frames) * 100_000,
      writesPerRound: writes.writes / shape.periods,
      frames,
      created: (census?.created ?? Number.NaN) - created0,
      seconds,
    };
  } finally {
    writes.restore();
  }
}

function windowFields(w: WindowResult): Pick<Sample, "cpuPer100k" | "mainPer100k" | "writesPerRound" | "frames" | "createdInWindow"> {
  return { cpuPer100k: w.cpuPer100k, mainPer100k: w.mainPer100k, writesPerRound: w.writesPerRound, frames: w.frames, createdInWindow: w.created };
}

export function check(what: string, c: ConsumerCounts, n: number, problems: string[]): void {
  if (c.delivered !== n || c.redelivered !== 0) problems.push(`${what}: delivered ${c.delivered}, num_redelivered ${c.redelivered} (want ${n} and 0)`);
}

async function libraryArm(s: BenchStream, nc: NatsConnection, shape: Shape, policy: VerifiedInProgressPolicy, problems: string[]): Promise<Sample> {
  const { name, consumer } = await addConsumer(s, { ackWaitMs: shape.ackWaitMs, maxAckPending: shape.n });
  const census = new TimerCensus({ stacks: true });
  const live0 = census.count().live;
  const ack = new CommitThenAck({ inProgress: policy, connection: nc });
  const stop = new AbortController();
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  let run: Promise<void> | undefined;
  try {
    run = ack.runEach(consumer, () => held, {
      concurrency: shape.concurrency,
      expiresMs: 1000,
      signal: stop.signal,
      onError: (err, ctx) => problems.push(`runEach ${ctx.during}: ${String(err)}`),
    });
    await untilHeld(s, name, shape.n);
    const arrivedAt = performance.now();
    const w = await window(nc, arrivedAt, shape, census);
    // Still holding all of them: which timers are live.
    const schedulerTimers = census.liveFrom(isScheduler);
    const libraryTimers = census.liveFrom(isLibrary);
    const allTimers = census.count().live - live0;
    check("runEach after the window", await consumerCounts(s, name), shape.n, problems);
    release();
    await waitAllAcked(s, name, shape.n);
    return { ...windowFields(w), schedulerTimers, libraryTimers, allTimers };
  } finally {
    release();
    stop.abort();
    await run;
    census.close();
    await s.jsm.consumers.delete(s.stream, name);
  }
}

async function rawArm(s: BenchStream, nc: NatsConnection, shape: Shape, problems: string[]): Promise<Sample> {
  const { name, consumer } = await addConsumer(s, { ackWaitMs: shape.ackWaitMs, maxAckPending: shape.n });
  const census = new TimerCensus({ stacks: true });
  const live0 = census.count().live;
  const raw = new RawKeepAlive(nc, shape.intervalMs);
  let msgs: JsMsg[] = [];
  try {
    msgs = await fetchExactly(consumer, shape.n, shape.n, (batch) => raw.add(batch, Date.now()));
    const arrivedAt = performance.now();
    const w = await window(nc, arrivedAt, shape, census);
    const allTimers = census.count().live - live0;
    check("raw publishes after the window", await consumerCounts(s, name), shape.n, problems);
    await raw.stop();
    for (const m of msgs) m.ack();
    await nc.flush();
    await waitAllAcked(s, name, shape.n);
    return { ...windowFields(w), schedulerTimers: Number.NaN, libraryTimers: Number.NaN, allTimers };
  } finally {
    await raw.stop();
    census.close();
    await s.jsm.consumers.delete(s.stream, name);
  }
}

export async function inFlight(bench: Bench): Promise<Figure[]> {
  const c = bench.config.inFlight;
  const shape: Shape = { n: c.messages, concurrency: c.concurrency, ackWaitMs: c.ackWaitMs, intervalMs: c.intervalMs, periods: c.periods };
  const policy = verifyInProgressPolicy(
    { enabled: true, intervalMs: c.intervalMs, maxHeartbeats: 10_000, shutdownTimeoutMs: 1000 },
    { ackWaitMs: c.ackWaitMs, source: "configured" },
  );
  const nc = await bench.server.connect();
  const problems: string[] = [];
  // Beside every arm, so each measures beats of a running service (bench/resident-batch.ts).
  const resident = await ResidentBatch.start(bench, policy, c.ackWaitMs, problems);
  try {
    const s = await createStream(nc, "INFLIGHT", shape.n);
    const samples = await interleave<"library" | "raw", Sample>(
      { library: () => libraryArm(s, nc, shape, policy, problems), raw: () => rawArm(s, nc, shape, problems) },
      c.rounds,
      0,
    );
    await s.jsm.streams.delete(s.stream);
    const lib = samples.library;
    const cpuLib = median(pluck(lib, "cpuPer100k"));
    const cpuRaw = median(pluck(samples.raw, "cpuPer100k"));
    const mainLib = median(pluck(lib, "mainPer100k"));
    const mainRaw = median(pluck(samples.raw, "mainPer100k"));
    const writesLib = median(pluck(lib, "writesPerRound"));
    const writesRaw = median(pluck(samples.raw, "writesPerRound"));
    const most = (field: keyof Sample): number => Math.max(...pluck(lib, field));
    const count = shape.n.toLocaleString("en-US");
    const held = `${count} msgs in flight (runEach, ${shape.concurrency} handlers, AckWait ${shape.ackWaitMs / 1000} s, beats every ${shape.intervalMs / 1000} s)`;
    const framesNote =
      `+WPI frames per window: ${pluck(lib, "frames").join(", ")} (library), ${pluck(samples.raw, "frames").join(", ")} (raw), ` +
      `${shape.periods} rounds of ${count} expected; timers created in the window: ${pluck(lib, "createdInWindow").join(", ")} (library), ` +
      `${pluck(samples.raw, "createdInWindow").join(", ")} (raw)`;
    return withProblems(
      [
        figure({
          id: "10a",
          item: 10,
          name: `live timers of the library's scheduler, ${held}`,
          unit: "timers",
          value: most("schedulerTimers"),
          baselineName: "one shared timer",
          baseline: 1,
          goal: goals.valueExactly(1, "exactly 1 (most of any round)"),
          note:
            `per round: ${pluck(lib, "schedulerTimers").join(", ")}; live timers created by any library file: ${pluck(lib, "libraryTimers").join(", ")}; ` +
            `by anything during the arm (the client included): ${pluck(lib, "allTimers").join(", ")} (raw arm: ${pluck(samples.raw, "allTimers").join(", ")})`,
        }),
        figure({
          id: "10b",
          item: 10,
          name: `CPU of the beats, ${held}`,
          unit: "ms CPU/100k +WPI",
          value: cpuLib,
          baselineName: "raw +WPI publishes, same msgs and rounds",
          baseline: cpuRaw,
          goal: goals.ratioAtMost(1.1),
          samples: { value: pluck(lib, "cpuPer100k"), baseline: pluck(samples.raw, "cpuPer100k") },
          note: framesNote,
        }),
        ...(Number.isFinite(mainLib)
          ? [
              figure({
                id: "10c",
                item: 10,
                name: "  CPU of the main thread alone, same windows (V8's helper threads left out)",
                unit: "ms CPU/100k +WPI",
                value: mainLib,
                baselineName: "raw +WPI publishes",
                baseline: mainRaw,
                samples: { value: pluck(lib, "mainPer100k"), baseline: pluck(samples.raw, "mainPer100k") },
              }),
            ]
          : []),
        ...(Number.isFinite(writesLib)
          ? [
              figure({
                id: "10d",
                item: 10,
                name: "  client socket writes per beat round, same windows",
                unit: "writes/round",
                value: writesLib,
                baselineName: "raw +WPI publishes",
                baseline: writesRaw,
                samples: { value: pluck(lib, "writesPerRound"), baseline: pluck(samples.raw, "writesPerRound") },
              }),
            ]
          : []),
      ],
      problems,
    );
  } finally {
    await resident.dispose();
    await nc.close();
  }
}
