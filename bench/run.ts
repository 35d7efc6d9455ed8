/**
 * The benchmark suite: `npm run bench` (full) or `npm run bench:smoke` (one round each, smaller
 * sizes). Starts its own nats-server, runs every row, prints the table and writes every figure
 * with its baseline, ratio, goal and status to bench/results/.
 *
 * Options: --smoke, --only=1,3 (items to run), --out=<file>, --server=<version> (a nats-server
 * of the test matrix from .cache/nats-server; NATS_SERVER_BIN points at any other binary).
 * A missed goal is reported, never an error: the exit code is non-zero only when a row crashes.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { cachedServer, freePort, natsServerBinary, natsServerVersion, startServer } from "../test/helpers/nats-server.js";
import { FULL, SMOKE, type BenchConfig } from "./config.js";
import type { Figure } from "./figure.js";
import { describeMachine } from "./machine.js";
import { capacity } from "./rows/capacity.js";
import { concurrencyScaling } from "./rows/concurrency.js";
import { confirmedAcks } from "./rows/confirmed-acks.js";
import { endToEnd } from "./rows/end-to-end.js";
import { fastOverhead } from "./rows/fast-overhead.js";
import { heartbeatRound } from "./rows/heartbeat-round.js";
import { heartbeatThread } from "./rows/heartbeat-thread.js";
import { idle } from "./rows/idle.js";
import { inFlight } from "./rows/in-flight.js";
import { intakeInFlight } from "./rows/intake-in-flight.js";
import { runEachLoop } from "./rows/run-each.js";
import { scaling } from "./rows/scaling.js";
import { tracingCost } from "./rows/tracing.js";
import type { Bench } from "./context.js";
import { renderTable } from "./table.js";

interface Row {
  readonly items: readonly number[];
  readonly title: string;
  readonly run: (bench: Bench) => Promise<Figure[]>;
}

const ROWS: readonly Row[] = [
  { items: [1], title: "overhead on fast work", run: (b) => fastOverhead(b.config) },
  { items: [2, 6], title: "one heartbeat round against raw publishes", run: heartbeatRound },
  { items: [3], title: "end to end: CommitThenAck.run against a hand-written loop", run: endToEnd },
  { items: [4, 6], title: "capacity: messages held through 3× AckWait, CPU of the beats", run: capacity },
  { items: [5, 6], title: "scaling: timers and memory with concurrent batches", run: (b) => scaling(b.config) },
  { items: [7], title: "concurrency: run with 4 writes at once against 1 and against 4 hand loops", run: concurrencyScaling },
  { items: [8], title: "runEach against a hand-written consume() loop", run: runEachLoop },
  { items: [9], title: "idle: loops with nothing to fetch, process CPU", run: idle },
  { items: [10], title: "heartbeats in flight: 1,000 messages, one handler each", run: inFlight },
  { items: [11], title: "traces: a batch with tracing on against the same with it off", run: tracingCost },
  { items: [12], title: "the heartbeat thread: 1,000 messages in flight beaten from a worker thread", run: heartbeatThread },
  { items: [13], title: "confirmed ACKs in the loops against confirmAck: false", run: confirmedAcks },
  { items: [14], title: "run's intake: 1,000 messages in flight in 10 writes of 100", run: intakeInFlight },
];

function parseArgs(argv: readonly string[]): { config: BenchConfig; only: Set<number> | undefined; out: string; bin: string } {
  let config = FULL;
  let bin: string | undefined;
  let only: Set<number> | undefined;
  let out: string | undefined;
  for (const arg of argv) {
    if (arg === "--smoke") config = SMOKE;
    else if (arg.startsWith("--only=")) only = new Set(arg.slice(7).split(",").map(Number));
    else if (arg.startsWith("--out=")) out = arg.slice(6);
    else if (arg.startsWith("--server=")) {
      const version = arg.slice(9);
      bin = cachedServer(version)?.bin;
      if (!bin) throw new Error(`no nats-server ${version} in .cache/nats-server: run scripts/fetch-nats-servers.sh (or set NATS_SERVER_BIN)`);
    } else throw new Error(`unknown argument ${arg}: use --smoke, --only=1,3, --out=<file> or --server=<version>`);
  }
  const here = dirname(fileURLToPath(import.meta.url));
  out ??= resolve(here, "results", config.mode === "full" ? "latest.json" : "latest-smoke.json");
  return { config, only, out, bin: bin ?? natsServerBinary() };
}

async function main(): Promise<void> {
  const { config, only, out, bin } = parseArgs(process.argv.slice(2));
  // The machine description and every helper read the binary from here.
  process.env["NATS_SERVER_BIN"] = bin;
  if (typeof (globalThis as { gc?: unknown }).gc !== "function") {
    throw new Error("run with node --expose-gc --import tsx bench/run.ts (npm run bench does)");
  }
  const loadAtStart = loadavg();
  const started = performance.now();
  const startedAt = new Date().toISOString();
  console.log(`jetstream-inprogress benchmarks (${config.mode}) — every figure is a median against a baseline measured in the same run`);
  if (config.mode === "smoke") {
    console.log("smoke: one round of every row at small sizes, to prove they run; its figures are not the goals' measure (npm run bench is)");
  }

  console.log(`nats-server ${natsServerVersion(bin)} (${bin})`);
  // Its HTTP monitoring too: rows read per-connection counts from /connz.
  const monitorPort = await freePort();
  const server = await startServer({ bin, args: ["-m", String(monitorPort)] });
  const figures: Figure[] = [];
  let connected: string | undefined;
  try {
    const probe = await server.connect();
    connected = probe.info?.version;
    await probe.close();
    const bench: Bench = { config, server, monitorUrl: `http://127.0.0.1:${monitorPort}` };
    for (const row of ROWS) {
      if (only && !row.items.some((i) => only.has(i))) continue;
      const t0 = performance.now();
      process.stdout.write(`… ${row.title}`);
      const got = await row.run(bench);
      figures.push(...got);
      process.stdout.write(` (${((performance.now() - t0) / 1000).toFixed(1)} s)\n`);
    }
  } finally {
    await server.dispose();
  }

  figures.sort((a, b) => a.item - b.item || a.id.localeCompare(b.id, "en", { numeric: true }));
  const machine = describeMachine(connected, loadAtStart);
  const durationS = Math.round((performance.now() - started) / 100) / 10;
  const misses = figures.filter((f) => f.status === "MISS").map((f) => f.id);

  console.log("");
  for (const line of renderTable(figures)) console.log(line);
  console.log("");
  console.log(
    `${machine.cores} cores (${machine.cpuModel}), Node ${machine.node}, nats-server ${machine.natsServerBinary}` +
      ` (connected: ${machine.natsServerConnected ?? "?"}), ${machine.natsClient}; load ${machine.loadAtStart.join(" ")} → ${machine.loadAtEnd.join(" ")}`,
  );
  console.log(`${config.mode} run: ${durationS} s; ${figures.length} figures, ${misses.length} missed${misses.length ? `: ${misses.join(", ")}` : ""}`);

  mkdirSync(dirname(out), { recursive: true });
  writeFileSync(out, `${JSON.stringify({ mode: config.mode, startedAt, durationS, machine, config, misses, figures }, null, 2)}\n`);
  console.log(`results: ${out.startsWith(process.cwd()) ? out.slice(process.cwd().length + 1) : out}`);
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error("");
    console.error(err instanceof Error ? (err.stack ?? err.message) : String(err));
    process.exit(1);
  },
);
