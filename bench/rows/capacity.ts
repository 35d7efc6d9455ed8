/**
 * Item 4 — capacity: one process, one connection, N messages fetched and held in flight
 * through 3× AckWait by the library, with zero redeliveries (consumer info: `num_redelivered`,
 * `delivered.consumer_seq`). Then the CPU of the beats: the same N messages stay held while the
 * way of keeping them alive changes every few beat periods — library, raw `+WPI` publishes,
 * naive interval per message (item 6) — interleaved, each window starting with a round at once
 * so nothing expires at a hand-over. CPU is `process.cpuUsage()` over each window, per frame.
 */
import type { JsMsg } from "@nats-io/jetstream";
import { verifyInProgressPolicy } from "../../src/index.js";
import type { Bench } from "../context.js";
import { figure, goals, type Figure } from "../figure.js";
import { LibraryKeepAlive, RawKeepAlive, type KeepAlive } from "../keep-alive.js";
import { addConsumer, consumerCounts, createStream, fetchExactly, type ConsumerCounts } from "../jetstream.js";
import { cpuMs, interleave, medians, pluck, sleep } from "../measure.js";
import { NaiveKeepAlive } from "../naive.js";

interface Window {
  /** CPU milliseconds per 100,000 frames. */
  readonly cpuPer100k: number;
  readonly frames: number;
}

/** Holds every batch with `keeper` for `periods` beat periods (each window: periods × N frames). */
async function measureWindow(keeper: KeepAlive, batches: ReadonlyArray<readonly JsMsg[]>, periods: number, intervalMs: number): Promise<Window> {
  const frames0 = keeper.frames;
  const cpu0 = cpuMs();
  const start = performance.now();
  for (const b of batches) keeper.add(b, "now");
  // Half a period after the last round: every round of the window is complete, none begun.
  await sleep(Math.max(0, start + (periods - 0.5) * intervalMs - performance.now()));
  const cpu1 = cpuMs();
  const frames = keeper.frames - frames0;
  await keeper.stop();
  return { cpuPer100k: ((cpu1 - cpu0) / frames) * 100_000, frames };
}

function describe(c: ConsumerCounts): string {
  return `delivered.consumer_seq ${c.delivered}, num_redelivered ${c.redelivered}, num_ack_pending ${c.ackPending}`;
}

export async function capacity(bench: Bench): Promise<Figure[]> {
  const c = bench.config.capacity;
  const n = c.messages;
  const policy = verifyInProgressPolicy(
    { enabled: true, intervalMs: c.intervalMs, maxHeartbeats: 10_000, shutdownTimeoutMs: 1000 },
    { ackWaitMs: c.ackWaitMs, source: "configured" },
  );
  const nc = await bench.server.connect();
  try {
    const s = await createStream(nc, "HOLD", n);
    const { name, consumer } = await addConsumer(s, { ackWaitMs: c.ackWaitMs, maxAckPending: n });

    // Phase 1: every batch goes under the library as soon as it arrives, then all are held
    // until 3× AckWait after the last one arrived.
    const library = new LibraryKeepAlive(policy);
    const batches: JsMsg[][] = [];
    const fetchStart = performance.now();
    await fetchExactly(consumer, n, c.fetchBatch, (msgs) => {
      batches.push(msgs);
      library.add(msgs, Date.now());
    });
    const fetchS = (performance.now() - fetchStart) / 1000;
    const holdMs = 3 * c.ackWaitMs;
    const cpu0 = cpuMs();
    const frames0 = library.frames;
    await sleep(holdMs);
    const holdCpuPer100k = ((cpuMs() - cpu0) / Math.max(1, library.frames - frames0)) * 100_000;
    const afterHold = await consumerCounts(s, name);
    await library.stop();
    const lostInHold = library.lostMessages;

    // Phase 2: CPU per frame, the three ways interleaved over the same held messages.
    const raw = new RawKeepAlive(nc, c.intervalMs);
    raw.prepare(batches);
    const naive = new NaiveKeepAlive(c.intervalMs);
    const samples = await interleave<"library" | "raw" | "naive", Window>(
      {
        library: () => measureWindow(library, batches, c.periodsPerArm, c.intervalMs),
        raw: () => measureWindow(raw, batches, c.periodsPerArm, c.intervalMs),
        naive: () => measureWindow(naive, batches, c.periodsPerArm, c.intervalMs),
      },
      c.rounds,
      0,
    );
    const end = await consumerCounts(s, name);
    await s.jsm.streams.delete(s.stream);

    const cpu = medians({ library: pluck(samples.library, "cpuPer100k"), raw: pluck(samples.raw, "cpuPer100k"), naive: pluck(samples.naive, "cpuPer100k") });
    const clean = (x: ConsumerCounts): boolean => x.redelivered === 0 && x.delivered === n;
    // Held = never redelivered and never given up on by the library (a lost lease).
    const held = n - Math.max(afterHold.delivered - n, afterHold.redelivered, lostInHold);
    const verdict = (phase: ConsumerCounts): string => (clean(phase) ? "zero redeliveries" : "REDELIVERED");
    const count = n.toLocaleString("en-US");
    return [
      figure({
        id: "4a",
        item: 4,
        name: `in-flight messages held through 3× AckWait (${c.ackWaitMs / 1000} s, beats every ${c.intervalMs / 1000} s), one connection`,
        unit: "msgs",
        value: held,
        baselineName: "target",
        baseline: n,
        goal: goals.valueAtLeast(n, `≥ ${count}, 0 redelivered`),
        note:
          `fetched in ${fetchS.toFixed(1)} s in batches of ${c.fetchBatch}, held ${holdMs / 1000} s after the last; ` +
          `after the hold: ${describe(afterHold)} (${verdict(afterHold)}); after the CPU windows too: ${describe(end)} (${verdict(end)}); ` +
          `CPU during the hold ${holdCpuPer100k.toFixed(1)} ms per 100k frames` +
          (library.lostMessages > 0 ? `; leases lost for ${library.lostMessages} messages (${String(library.firstFailure)})` : ""),
      }),
      figure({
        id: "4b",
        item: 4,
        name: `CPU of the beats holding ${count} messages (withInProgress)`,
        unit: "ms CPU/100k +WPI",
        value: cpu.library,
        baselineName: "raw +WPI publishes, same rounds",
        baseline: cpu.raw,
        goal: goals.ratioAtMost(1.1),
        samples: { value: pluck(samples.library, "cpuPer100k"), baseline: pluck(samples.raw, "cpuPer100k") },
      }),
      figure({
        id: "6b",
        item: 6,
        name: `naive: CPU holding ${count} messages, setInterval per message`,
        unit: "ms CPU/100k +WPI",
        value: cpu.naive,
        baselineName: "raw, as 4b",
        baseline: cpu.raw,
        samples: { value: pluck(samples.naive, "cpuPer100k"), baseline: pluck(samples.raw, "cpuPer100k") },
      }),
    ];
  } finally {
    await nc.close();
  }
}
