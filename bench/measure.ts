/**
 * Measuring on a shared, noisy machine: every figure is a median over rounds, the arms of a
 * comparison run interleaved inside each round (and in reverse order every other round, so a
 * linear drift cancels), and each arm is warmed up before anything is recorded.
 */
import { readFileSync } from "node:fs";
import { PerformanceObserver } from "node:perf_hooks";
import { setImmediate as yieldToLoop } from "node:timers/promises";

/** One arm of a comparison: produces one sample per call (a duration, a rate, a CPU figure). */
export type Arm<S = number> = () => Promise<S> | S;

/** The median of a non-empty list. */
export function median(samples: ArrayLike<number>): number {
  if (samples.length === 0) throw new RangeError("median of no samples");
  const sorted = Array.from(samples).sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/**
 * Runs every arm `rounds` times, interleaved: A B C, then C B A, then A B C, ... Each arm is
 * called `warmup` times first (results dropped). Returns every arm's samples in order.
 */
export async function interleave<K extends string, S = number>(
  arms: Readonly<Record<K, Arm<S>>>,
  rounds: number,
  warmup = 1,
): Promise<Record<K, S[]>> {
  const names = Object.keys(arms) as K[];
  const samples = Object.fromEntries(names.map((n) => [n, [] as S[]])) as Record<K, S[]>;
  for (let w = 0; w < warmup; w++) for (const n of names) await arms[n]();
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 === 0 ? names : [...names].reverse();
    for (const n of order) {
      // Let pending I/O and timers of the previous arm run outside the next arm's window.
      await yieldToLoop();
      samples[n].push(await arms[n]());
    }
  }
  return samples;
}

/** One field of structured samples. */
export function pluck<S, F extends keyof S>(samples: readonly S[], field: F): number[] {
  return samples.map((s) => Number(s[field]));
}

/** Medians of {@link interleave}'s samples. */
export function medians<K extends string>(samples: Readonly<Record<K, number[]>>): Record<K, number> {
  const out = {} as Record<K, number>;
  for (const k of Object.keys(samples) as K[]) out[k] = median(samples[k]);
  return out;
}

/** Monotonic nanoseconds as a number (precise to well below a microsecond for our spans). */
export function nowNs(): number {
  return Number(process.hrtime.bigint());
}

/** Process CPU time (user + system) in milliseconds since the process started. */
export function cpuMs(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
}

/**
 * A write that takes `micros` µs of wall time on the calling thread and never yields: it spins
 * on the monotonic clock, so it lasts the same in every arm however busy the machine is.
 */
export function spin(micros: number): void {
  const end = process.hrtime.bigint() + BigInt(Math.round(micros * 1000));
  while (process.hrtime.bigint() < end) {
    // busy
  }
}

/** V8 heap in use after a full collection (needs `node --expose-gc`). */
export function heapAfterGc(): number {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (typeof gc !== "function") throw new Error("run node with --expose-gc (npm run bench does)");
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

/** Waits `ms` milliseconds. */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * CPU time of the main thread alone in milliseconds (Linux: `/proc/self/task/<pid>/schedstat`,
 * nanoseconds), or NaN where it cannot be read. `process.cpuUsage()` counts every thread of the
 * process, V8's garbage-collection and compiler helpers included.
 */
export function mainThreadCpuMs(): number {
  try {
    return Number(readFileSync(`/proc/self/task/${process.pid}/schedstat`, "utf8").split(" ")[0]) / 1e6;
  } catch {
    return Number.NaN;
  }
}

/**
 * Counts the messages a loop acknowledged (its `onBatch` / `onResult`) and resolves `all` once
 * `n` were: a loop is timed until its work is done, not until its shutdown ended.
 */
export function untilAcked(n: number): { readonly all: Promise<void>; readonly onResult: (r: { readonly acked: number }) => void } {
  let acked = 0;
  let done!: () => void;
  const all = new Promise<void>((resolve) => (done = resolve));
  return {
    all,
    onResult: (r) => {
      acked += r.acked;
      if (acked >= n) done();
    },
  };
}

/**
 * Runs `body` and adds up the garbage collector's pauses of the main thread meanwhile (ms), as
 * Node.js reports them (`gc` performance entries: scavenges and full collections alike).
 */
export async function withGcPauses<T>(body: () => Promise<T>): Promise<{ readonly result: T; readonly gcMs: number }> {
  let gcMs = 0;
  const add = (entries: readonly { readonly duration: number }[]): void => {
    for (const e of entries) gcMs += e.duration;
  };
  const observer = new PerformanceObserver((list) => add(list.getEntries()));
  observer.observe({ entryTypes: ["gc"] });
  try {
    const result = await body();
    // Entries not yet handed to the callback.
    add(observer.takeRecords());
    return { result, gcMs };
  } finally {
    observer.disconnect();
  }
}
