/**
 * Item 5 — scaling: timer handles and heap with 1, 100 and 1,000 concurrent batches under
 * supervision (fake messages; the beats are not due during the measurement). The library's
 * timers must stay constant; the heap is reported per in-flight message, against the naive
 * interval per message (item 6), measured in the same rounds. The messages and the host's own
 * pending writes exist before the first heap reading, so only the keeping-alive is counted.
 */
import type { JsMsg } from "@nats-io/jetstream";
import { setImmediate as yieldToLoop } from "node:timers/promises";
import { verifyInProgressPolicy, withInProgress, type VerifiedInProgressPolicy } from "../../src/index.js";
import type { BenchConfig } from "../config.js";
import { fakeMsgs } from "../fake-msg.js";
import { figure, goals, type Figure } from "../figure.js";
import { heapAfterGc, interleave, medians, pluck } from "../measure.js";
import { NaiveKeepAlive } from "../naive.js";
import { TimerCensus } from "../timer-census.js";

interface Footprint {
  /** Live timers added (ref'd or not). */
  readonly timers: number;
  /** Of those, the ones `process.getActiveResourcesInfo()` lists (ref'd). */
  readonly reffed: number;
  readonly bytesPerMessage: number;
}

/** A host's pending writes: one promise per batch, settled by `release`. */
function pendingWrites(count: number): { writes: Promise<void>[]; release: () => void } {
  const resolvers: Array<() => void> = [];
  const writes: Promise<void>[] = [];
  for (let i = 0; i < count; i++) writes.push(new Promise<void>((resolve) => resolvers.push(resolve)));
  return { writes, release: () => resolvers.forEach((r) => r()) };
}

async function libraryFootprint(census: TimerCensus, batches: readonly JsMsg[][], policy: VerifiedInProgressPolicy): Promise<Footprint> {
  const { writes, release } = pendingWrites(batches.length);
  const timers0 = census.count();
  const heap0 = heapAfterGc();
  const runs = batches.map((b, i) => withInProgress(b, () => writes[i]!, policy));
  await yieldToLoop();
  const timers1 = census.count();
  const bytes = heapAfterGc() - heap0;
  release();
  await Promise.all(runs);
  return footprint(timers1.live - timers0.live, timers1.reffed - timers0.reffed, bytes, batches);
}

function footprint(timers: number, reffed: number, bytes: number, batches: readonly JsMsg[][]): Footprint {
  return { timers, reffed, bytesPerMessage: bytes / (batches.length * batches[0]!.length) };
}

async function naiveFootprint(census: TimerCensus, batches: readonly JsMsg[][], intervalMs: number): Promise<Footprint> {
  const { writes, release } = pendingWrites(batches.length);
  const timers0 = census.count();
  const heap0 = heapAfterGc();
  const naive = new NaiveKeepAlive(intervalMs);
  // What such a service does per batch: start the intervals, await the write, clear them.
  const runs = batches.map(async (b, i) => {
    naive.add(b, Date.now());
    await writes[i];
  });
  await yieldToLoop();
  const timers1 = census.count();
  const bytes = heapAfterGc() - heap0;
  release();
  await Promise.all(runs);
  await naive.stop();
  return footprint(timers1.live - timers0.live, timers1.reffed - timers0.reffed, bytes, batches);
}

export async function scaling(config: BenchConfig): Promise<Figure[]> {
  const c = config.scaling;
  const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 60_000, maxHeartbeats: 12 }, { ackWaitMs: 120_000, source: "configured" });
  const results = new Map<number, { library: Footprint[]; naive: Footprint[] }>();
  const census = new TimerCensus();
  try {
    for (const count of c.batches) {
      const batches = Array.from({ length: count }, () => fakeMsgs(c.batchSize));
      const samples = await interleave<"library" | "naive", Footprint>(
        { library: () => libraryFootprint(census, batches, policy), naive: () => naiveFootprint(census, batches, 60_000) },
        c.rounds,
        1,
      );
      results.set(count, samples);
    }
  } finally {
    census.close();
  }

  const one = c.batches[0]!;
  const timersAtOne = median1(results.get(one)!.library, "timers");
  const out: Figure[] = [];
  const letters = "abcdefghij";
  c.batches.forEach((count, i) => {
    const s = results.get(count)!;
    const m = medians({
      libTimers: pluck(s.library, "timers"),
      libReffed: pluck(s.library, "reffed"),
      naiveTimers: pluck(s.naive, "timers"),
      naiveReffed: pluck(s.naive, "reffed"),
      libBytes: pluck(s.library, "bytesPerMessage"),
      naiveBytes: pluck(s.naive, "bytesPerMessage"),
    });
    const what = `${count.toLocaleString("en-US")} concurrent batch${count === 1 ? "" : "es"} × ${c.batchSize} msgs`;
    out.push(
      figure({
        id: `5${letters[i]}`,
        item: 5,
        name: `live timers, ${what}`,
        unit: "timers",
        value: m.libTimers,
        baselineName: `withInProgress, ${one} batch`,
        baseline: timersAtOne,
        goal: goals.ratioAtMost(1),
        note: `getActiveResourcesInfo() lists ${m.libReffed} of them: the library's timer is unref'd`,
      }),
      figure({
        id: `5${letters[i + c.batches.length]}`,
        item: 5,
        name: `heap per in-flight message, ${what}`,
        unit: "bytes/msg",
        value: m.libBytes,
        baselineName: "naive setInterval per message",
        baseline: m.naiveBytes,
        samples: { value: pluck(s.library, "bytesPerMessage"), baseline: pluck(s.naive, "bytesPerMessage") },
      }),
      figure({
        id: `6${letters[i + 2]}`,
        item: 6,
        name: `naive: live timers, ${what}`,
        unit: "timers",
        value: m.naiveTimers,
        baselineName: "withInProgress",
        baseline: m.libTimers,
        note: `getActiveResourcesInfo() lists ${m.naiveReffed} of them`,
      }),
    );
  });
  return out;
}

function median1(samples: readonly Footprint[], field: keyof Footprint): number {
  return medians({ x: pluck(samples, field) }).x;
}
