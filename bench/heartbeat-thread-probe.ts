/**
 * A probe, not a bench row yet: what the heartbeat thread costs. For 1,000 deliveries beaten
 * every 100 ms over 5 s it reads the main thread's CPU (Linux: /proc/thread-self), the worker's
 * (the threads that appeared when it started), the whole process's (process.cpuUsage) and the
 * main event loop's utilisation, against the same 1,000 `+WPI` per round published from the
 * main thread; and the resident memory the thread adds. Linux only.
 *
 *   node --expose-gc --import tsx bench/heartbeat-thread-probe.ts           (the sources: the worker runs through tsx)
 *   node --expose-gc --import tsx bench/heartbeat-thread-probe.ts --built   (a bundle built as tsup builds the package)
 */
import { mkdirSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { Worker } from "node:worker_threads";
import { build } from "tsup";
import type { ThreadLease } from "../src/lease/heartbeat-thread-lease.js";
import { nowEpochMs } from "../src/lease/heartbeat-thread-protocol.js";
import { HeartbeatThread as SourceThread } from "../src/lease/heartbeat-thread.js";
import { startServer } from "../test/helpers/nats-server.js";

async function builtThread(): Promise<typeof SourceThread> {
  const outDir = join(import.meta.dirname, "..", "test", ".tmp", "probe-build");
  mkdirSync(outDir, { recursive: true });
  await build({
    entry: { index: "src/lease/heartbeat-thread.ts", "heartbeat-thread": "src/lease/heartbeat-thread-entry.ts" },
    outDir,
    format: ["esm"],
    shims: true,
    dts: false,
    target: "node20",
    platform: "node",
    splitting: false,
    silent: true,
    config: false,
  });
  return ((await import(join(outDir, "index.js"))) as { HeartbeatThread: typeof SourceThread }).HeartbeatThread;
}

const HeartbeatThread = process.argv.includes("--built") ? await builtThread() : SourceThread;

const WINDOW_MS = 5000;
const DELIVERIES = 1000;
const INTERVAL_MS = 100;
const TICK_MS = 1000 / 100; // USER_HZ on Linux

const ticks = (stat: string): number => {
  // Fields after the command name: utime is the 14th, stime the 15th field overall.
  const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(rest[11]) + Number(rest[12]);
};
const threadMs = (tid: string): number => {
  try {
    return ticks(readFileSync(`/proc/self/task/${tid}/stat`, "utf8")) * TICK_MS;
  } catch {
    return 0;
  }
};
const mainMs = (): number => ticks(readFileSync("/proc/thread-self/stat", "utf8")) * TICK_MS;
const tasks = (): string[] => readdirSync("/proc/self/task");
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const mb = (bytes: number): string => `${(bytes / 1024 / 1024).toFixed(1)} MB`;

interface Sample {
  readonly label: string;
  readonly mainCpuMs: number;
  readonly workerCpuMs: number;
  readonly processCpuMs: number;
  readonly mainElu: number;
}

async function measure(label: string, workerTids: readonly string[]): Promise<Sample> {
  const m0 = mainMs();
  const w0 = workerTids.reduce((s, t) => s + threadMs(t), 0);
  const p0 = process.cpuUsage();
  const e0 = performance.eventLoopUtilization();
  await sleep(WINDOW_MS);
  const p = process.cpuUsage(p0);
  return {
    label,
    mainCpuMs: mainMs() - m0,
    workerCpuMs: workerTids.reduce((s, t) => s + threadMs(t), 0) - w0,
    processCpuMs: (p.user + p.system) / 1000,
    mainElu: performance.eventLoopUtilization(e0).utilization,
  };
}

const srv = await startServer();
const subjects = Array.from({ length: DELIVERIES }, (_, i) => `$JS.ACK.PROBE.PROBE_CONSUMER.1.${i + 1}.${i + 1}.1761000000000000000.${DELIVERIES - i}`);
const samples: Sample[] = [];
try {
  samples.push(await measure("nothing running", []));

  // Main thread: the same +WPI publishes on a connection of its own, one round every 100 ms.
  const raw = await srv.connect({ name: "probe-main" });
  const timer = setInterval(() => {
    for (const s of subjects) raw.publish(s, "+WPI");
  }, INTERVAL_MS);
  samples.push(await measure(`main thread: ${DELIVERIES} +WPI per round`, []));
  clearInterval(timer);
  await raw.close();

  // For comparison: an idle worker that polls shared memory on a 10 ms timer instead of waiting.
  const pollBefore = new Set(tasks());
  const poller = new Worker(`const i = new Int32Array(new SharedArrayBuffer(4)); setInterval(() => Atomics.load(i, 0), 10);`, { eval: true });
  await sleep(500);
  samples.push(await measure("a worker polling every 10 ms (comparison)", tasks().filter((t) => !pollBefore.has(t))));
  await poller.terminate();

  global.gc?.();
  await sleep(500);
  const before = new Set(tasks());
  const rss0 = process.memoryUsage().rss;
  const thread = HeartbeatThread.acquire({ servers: srv.url, name: "probe" }, { idleCloseMs: 0 });
  await thread.ready();
  await sleep(500);
  const rssReady = process.memoryUsage().rss;
  const workerTids = tasks().filter((t) => !before.has(t));
  samples.push(await measure("thread idle (no lease)", workerTids));

  const regStart = performance.now();
  const one = thread.register(subjects, { intervalMs: INTERVAL_MS, maxHeartbeats: 10_000, firstDueAt: nowEpochMs() });
  const regOneMs = performance.now() - regStart;
  samples.push(await measure(`thread: 1 batch of ${DELIVERIES}`, workerTids));
  const rssBeating = process.memoryUsage().rss;
  one.stop();

  const manyStart = performance.now();
  const leases: ThreadLease[] = subjects.map((s, i) => thread.register([s], { intervalMs: INTERVAL_MS, maxHeartbeats: 10_000, firstDueAt: nowEpochMs() + (i % INTERVAL_MS) }));
  const regManyMs = performance.now() - manyStart;
  samples.push(await measure(`thread: ${DELIVERIES} batches of 1`, workerTids));
  const stopStart = performance.now();
  for (const l of leases) l.stop();
  const stopManyMs = performance.now() - stopStart;

  const beats = leases.reduce((s, l) => s + l.beats, 0) + one.beats;
  thread.release();
  await thread.exited;

  for (const s of samples) {
    console.log(
      `${s.label.padEnd(42)} main ${s.mainCpuMs.toFixed(0).padStart(5)} ms  worker ${s.workerCpuMs.toFixed(0).padStart(5)} ms  ` +
        `process ${s.processCpuMs.toFixed(0).padStart(5)} ms  main ELU ${(s.mainElu * 100).toFixed(2)}%  (CPU over ${WINDOW_MS / 1000} s)`,
    );
  }
  console.log(`register: 1 batch of ${DELIVERIES} ${regOneMs.toFixed(2)} ms; ${DELIVERIES} batches of 1 ${regManyMs.toFixed(1)} ms; stopping them ${stopManyMs.toFixed(1)} ms`);
  console.log(`memory: thread started and connected +${mb(rssReady - rss0)} RSS; beating ${DELIVERIES} deliveries +${mb(rssBeating - rss0)}`);
  console.log(`beats sent: ${beats} rounds; worker threads: ${workerTids.length}`);
} finally {
  await srv.dispose();
}
