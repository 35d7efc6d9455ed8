/**
 * Item 14 — the intake of `CommitThenAck.run` under 1,000 messages in flight, on a real
 * nats-server. Shape as item 10, with the batch loop: a durable consumer with AckWait 2 s (1 s in
 * the smoke run) and a stream of exactly `batchSize × concurrency` messages (100 × 10);
 * `run` with `batchSize: 100`, `concurrency: 10` and heartbeats on (interval 1 s; 0.5 s in the
 * smoke run), and a write that stays pending until the arm ends (about 3¼ AckWait periods), so
 * all 1,000 messages are held in 10 writes and live on their beats alone. Per arm:
 *
 * - CPU: `process.cpuUsage()` over five whole beat periods as in item 10, one period later:
 *   opened a quarter period after the first round (the census's), after a full collection,
 *   closed half a period after the sixth; divided by the `+WPI` frames sent in it (the client's
 *   `outMsgs`: the loop pulls nothing while its 10 writes hold its whole capacity), per 100,000
 *   frames. The baseline is item 10's: the same 1,000 messages fetched by hand from a fresh
 *   consumer and kept alive by raw `nc.publish(reply, "+WPI")` on one interval (the least a
 *   process can send), the same rounds, the same window. The arms alternate round by round. For
 *   diagnosis, from the same windows: the main thread alone, the client's socket writes per
 *   round, and the timers created (a census without stacks, open in both arms).
 * - redeliveries: consumer info after the window (`num_redelivered`, and every message delivered
 *   once), then all are released and acknowledged.
 * - timers: the census of item 10, open in both arms from the start of the arm until one beat
 *   period after the last batch arrived (so it saw every timer made at the start and every timer
 *   of a round), counts the live timers created by the library's scheduler while all 1,000 are
 *   held; it is closed before the CPU window, which opens a period later: recording where each
 *   timer was made costs a stack trace per timer, and the library's arm makes more of them.
 */
import type { JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { CommitThenAck, verifyInProgressPolicy, type VerifiedInProgressPolicy } from "../../src/index.js";
import type { Bench } from "../context.js";
import { figure, goals, withProblems, type Figure } from "../figure.js";
import { RawKeepAlive } from "../keep-alive.js";
import { addConsumer, consumerCounts, createStream, fetchExactly, waitAllAcked, type BenchStream } from "../jetstream.js";
import { interleave, median, pluck, sleep } from "../measure.js";
import { TimerCensus } from "../timer-census.js";
import { check, isLibrary, isScheduler, untilHeld, window, type Shape, type WindowResult } from "./in-flight.js";

/**
 * Beat periods the timer census stays open after the last batch arrived, before the CPU window:
 * the census records where each timer was created (a stack trace per timer), a cost that would
 * fall on the arm that creates more timers.
 */
const CENSUS_PERIODS = 1;

interface Intake extends Shape {
  readonly batchSize: number;
}

interface Sample {
  /** CPU milliseconds per 100,000 frames in the window. */
  readonly cpuPer100k: number;
  /** The same, main thread alone (NaN off Linux). */
  readonly mainPer100k: number;
  readonly writesPerRound: number;
  readonly frames: number;
  /** `num_redelivered` after the window. */
  readonly redelivered: number;
  /** Live timers created by the library's scheduler while everything was held (NaN for the raw arm). */
  readonly schedulerTimers: number;
  /** Live timers created by any library file. */
  readonly libraryTimers: number;
  /** Writes started when the window opened. */
  readonly writes: number;
  /** Timers created per second in the window (the scheduler arms one per tick: about its wake-ups). */
  readonly timersPerSecond: number;
}

/** Waits until `count()` reaches `n` (the loop's writes started), at most 10 s. */
async function untilCount(count: () => number, n: number, what: string): Promise<void> {
  const deadline = performance.now() + 10_000;
  while (count() < n) {
    if (performance.now() > deadline) throw new Error(`${what}: ${count()} of ${n} after 10 s`);
    await sleep(5);
  }
}

function windowFields(w: WindowResult): Pick<Sample, "cpuPer100k" | "mainPer100k" | "writesPerRound" | "frames" | "timersPerSecond"> {
  return { cpuPer100k: w.cpuPer100k, mainPer100k: w.mainPer100k, writesPerRound: w.writesPerRound, frames: w.frames, timersPerSecond: w.created / w.seconds };
}

async function libraryArm(s: BenchStream, nc: NatsConnection, shape: Intake, policy: VerifiedInProgressPolicy, problems: string[]): Promise<Sample> {
  const { name, consumer } = await addConsumer(s, { ackWaitMs: shape.ackWaitMs, maxAckPending: shape.n });
  const census = new TimerCensus({ stacks: true });
  const ack = new CommitThenAck({ inProgress: policy, connection: nc });
  const stop = new AbortController();
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  let writes = 0;
  let lastWriteAt = 0;
  const write = (_msgs: readonly JsMsg[]): Promise<void> => {
    writes += 1;
    lastWriteAt = performance.now();
    return held;
  };
  let run: Promise<void> | undefined;
  try {
    run = ack.run(consumer, write, {
      batchSize: shape.batchSize,
      concurrency: shape.concurrency,
      expiresMs: 1000,
      signal: stop.signal,
      onError: (err, ctx) => problems.push(`run ${ctx.during}: ${String(err)}`),
    });
    await untilHeld(s, name, shape.n);
    await untilCount(() => writes, shape.concurrency, "writes started");
    // The last batch started its write as it arrived: rounds count from there. The census
    // sees one whole round, then closes before the CPU window (one period later).
    await sleep(Math.max(0, lastWriteAt + (CENSUS_PERIODS + 0.25) * shape.intervalMs - performance.now()));
    const schedulerTimers = census.liveFrom(isScheduler);
    const libraryTimers = census.liveFrom(isLibrary);
    census.close();
    const counter = new TimerCensus();
    const w = await window(nc, lastWriteAt + CENSUS_PERIODS * shape.intervalMs, shape, counter).finally(() => counter.close());
    const startedWrites = writes;
    const counts = await consumerCounts(s, name);
    check("run after the window", counts, shape.n, problems);
    release();
    await waitAllAcked(s, name, shape.n);
    return { ...windowFields(w), redelivered: counts.redelivered, schedulerTimers, libraryTimers, writes: startedWrites };
  } finally {
    release();
    stop.abort();
    await run;
    census.close();
    await s.jsm.consumers.delete(s.stream, name);
  }
}

async function rawArm(s: BenchStream, nc: NatsConnection, shape: Intake, problems: string[]): Promise<Sample> {
  const { name, consumer } = await addConsumer(s, { ackWaitMs: shape.ackWaitMs, maxAckPending: shape.n });
  const census = new TimerCensus({ stacks: true });
  const raw = new RawKeepAlive(nc, shape.intervalMs);
  let msgs: JsMsg[] = [];
  try {
    msgs = await fetchExactly(consumer, shape.n, shape.n, (batch) => raw.add(batch, Date.now()));
    const arrivedAt = performance.now();
    await sleep(Math.max(0, arrivedAt + (CENSUS_PERIODS + 0.25) * shape.intervalMs - performance.now()));
    const schedulerTimers = census.liveFrom(isScheduler);
    census.close();
    const counter = new TimerCensus();
    const w = await window(nc, arrivedAt + CENSUS_PERIODS * shape.intervalMs, shape, counter).finally(() => counter.close());
    const counts = await consumerCounts(s, name);
    check("raw publishes after the window", counts, shape.n, problems);
    await raw.stop();
    for (const m of msgs) m.ack();
    await nc.flush();
    await waitAllAcked(s, name, shape.n);
    return { ...windowFields(w), redelivered: counts.redelivered, schedulerTimers, libraryTimers: Number.NaN, writes: Number.NaN };
  } finally {
    await raw.stop();
    census.close();
    await s.jsm.consumers.delete(s.stream, name);
  }
}

export async function intakeInFlight(bench: Bench): Promise<Figure[]> {
  const c = bench.config.intake;
  const n = c.batchSize * c.concurrency;
  const shape: Intake = { n, concurrency: c.concurrency, batchSize: c.batchSize, ackWaitMs: c.ackWaitMs, intervalMs: c.intervalMs, periods: c.periods };
  const policy = verifyInProgressPolicy(
    { enabled: true, intervalMs: c.intervalMs, maxHeartbeats: 10_000, shutdownTimeoutMs: 1000 },
    { ackWaitMs: c.ackWaitMs, source: "configured" },
  );
  const nc = await bench.server.connect();
  const problems: string[] = [];
  try {
    const s = await createStream(nc, "INTAKE", n);
    const samples = await interleave<"library" | "raw", Sample>(
      { library: () => libraryArm(s, nc, shape, policy, problems), raw: () => rawArm(s, nc, shape, problems) },
      c.rounds,
      0,
    );
    await s.jsm.streams.delete(s.stream);
    const lib = samples.library;
    const raw = samples.raw;
    const count = n.toLocaleString("en-US");
    const held = `${count} msgs in flight (run, ${c.concurrency} writes of ${c.batchSize}, AckWait ${c.ackWaitMs / 1000} s, beats every ${c.intervalMs / 1000} s)`;
    const mainLib = median(pluck(lib, "mainPer100k"));
    const writesLib = median(pluck(lib, "writesPerRound"));
    return withProblems(
      [
        figure({
          id: "14a",
          item: 14,
          name: `CPU of the beats, ${held}`,
          unit: "ms CPU/100k +WPI",
          value: median(pluck(lib, "cpuPer100k")),
          baselineName: "raw +WPI publishes on one interval, same msgs and rounds",
          baseline: median(pluck(raw, "cpuPer100k")),
          goal: goals.ratioAtMost(1.1),
          samples: { value: pluck(lib, "cpuPer100k"), baseline: pluck(raw, "cpuPer100k") },
          note:
            `+WPI frames per window: ${pluck(lib, "frames").join(", ")} (library), ${pluck(raw, "frames").join(", ")} (raw), ` +
            `${c.periods} rounds of ${count} expected; writes started: ${pluck(lib, "writes").join(", ")}; timers created per second in the window ` +
            `(a timer is armed per wake-up of the library's scheduler): ${pluck(lib, "timersPerSecond").map((x) => x.toFixed(1)).join(", ")} (library), ` +
            `${pluck(raw, "timersPerSecond").map((x) => x.toFixed(1)).join(", ")} (raw)`,
        }),
        figure({
          id: "14b",
          item: 14,
          name: `redelivered messages, ${held}`,
          unit: "msgs",
          value: Math.max(...pluck(lib, "redelivered")),
          baselineName: "raw +WPI publishes",
          baseline: Math.max(...pluck(raw, "redelivered")),
          goal: goals.valueExactly(0, "exactly 0 (most of any round)"),
          note: `num_redelivered after each window: ${pluck(lib, "redelivered").join(", ")} (library), ${pluck(raw, "redelivered").join(", ")} (raw)`,
        }),
        figure({
          id: "14c",
          item: 14,
          name: `live timers of the library's scheduler, ${held}`,
          unit: "timers",
          value: Math.max(...pluck(lib, "schedulerTimers")),
          baselineName: "one shared timer",
          baseline: 1,
          goal: goals.valueExactly(1, "exactly 1 (most of any round)"),
          note: `per round: ${pluck(lib, "schedulerTimers").join(", ")}; live timers created by any library file: ${pluck(lib, "libraryTimers").join(", ")}`,
        }),
        ...(Number.isFinite(mainLib)
          ? [
              figure({
                id: "14d",
                item: 14,
                name: "  CPU of the main thread alone, same windows (V8's helper threads left out)",
                unit: "ms CPU/100k +WPI",
                value: mainLib,
                baselineName: "raw +WPI publishes",
                baseline: median(pluck(raw, "mainPer100k")),
                samples: { value: pluck(lib, "mainPer100k"), baseline: pluck(raw, "mainPer100k") },
              }),
            ]
          : []),
        ...(Number.isFinite(writesLib)
          ? [
              figure({
                id: "14e",
                item: 14,
                name: "  client socket writes per beat round, same windows",
                unit: "writes/round",
                value: writesLib,
                baselineName: "raw +WPI publishes",
                baseline: median(pluck(raw, "writesPerRound")),
                samples: { value: pluck(lib, "writesPerRound"), baseline: pluck(raw, "writesPerRound") },
              }),
            ]
          : []),
      ],
      problems,
    );
  } finally {
    await nc.close();
  }
}
