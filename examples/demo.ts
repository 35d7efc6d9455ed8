/**
 * The first thing to run: what InProgress heartbeats change, in about half a minute.
 *
 * Three workers (each with its own connection) share a durable consumer whose AckWait is 2 s;
 * every write takes 5 s. Six messages arrive, one every half second. First without
 * heartbeats: JetStream takes each slow write for a dead worker, hands the message to the
 * next idle one, and rows are committed twice. Then the same with CommitThenAck's bounded
 * heartbeats: every message is delivered and committed once. Then a guardrail refusing an
 * unsafe policy, and the metrics both runs recorded.
 *
 * Run: npm run demo
 * It starts a throwaway nats-server (installed, NATS_SERVER_BIN, or on a Debian/Ubuntu machine
 * without one the distribution's package fetched into .cache/ without root); set NATS_URL to
 * use a running server with JetStream instead.
 */
import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { AckPolicy, jetstream, jetstreamManager, type JetStreamManager } from "@nats-io/jetstream";
import { connect, nanos, type NatsConnection } from "@nats-io/transport-node";
import {
  CommitThenAck,
  ConsumerPolicyError,
  InMemoryMetrics,
  MetricNames,
  type BatchWrite,
  type MetricName,
} from "jetstream-inprogress";
import { ensureNatsServerBinary, startServer, type NatsServer } from "../test/helpers/nats-server.js";

const MESSAGES = 6;
const WORKERS = 3;
const ACK_WAIT_MS = 2_000;
const WRITE_MS = 5_000;
const PUBLISH_EVERY_MS = 500;
const HEARTBEAT_MS = 1_000;
const UNSAFE_HEARTBEAT_MS = 2_000;
const DURABLE = "workers";
const ROUND_LIMIT_MS = 50_000;

/** What one run measured. */
interface RoundResult {
  readonly stream: string;
  readonly messages: number;
  readonly deliveries: number;
  readonly redeliveries: number;
  readonly commits: number;
  readonly duplicateCommits: number;
  readonly heartbeats: number;
  readonly wallMs: number;
  readonly metrics: InMemoryMetrics;
}

const id = randomUUID().slice(0, 8).toUpperCase();
const streams: string[] = [];
let server: NatsServer | undefined;
let admin: NatsConnection | undefined;

/** Removes what the demo created; safe to call twice. */
async function cleanup(): Promise<void> {
  const nc = admin;
  admin = undefined;
  if (nc && !nc.isClosed()) {
    const jsm = await jetstreamManager(nc).catch(() => undefined);
    for (const s of streams) await jsm?.streams.delete(s).catch(() => undefined);
    await nc.close().catch(() => undefined);
  }
  const srv = server;
  server = undefined;
  await srv?.dispose();
}

process.once("SIGINT", () => {
  console.log("\ninterrupted: cleaning up");
  void cleanup().finally(() => process.exit(130));
});

/** Polls `probe` every 100 ms until it holds; throws naming `what` after `timeoutMs`. */
async function until(probe: () => Promise<boolean> | boolean, what: string, timeoutMs: number): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await probe())) {
    if (performance.now() > deadline) throw new Error(`gave up after ${timeoutMs / 1000} s waiting for ${what}`);
    await sleep(100);
  }
}

/** Runs three workers over six messages, with or without heartbeats, and measures what happened. */
async function runRound(url: string, jsm: JetStreamManager, heartbeats: boolean): Promise<RoundResult> {
  const tag = heartbeats ? "WITH" : "WITHOUT";
  const stream = `DEMO_${id}_${tag}`;
  const subject = `demo.${id.toLowerCase()}.${tag.toLowerCase()}`;
  await jsm.streams.add({ name: stream, subjects: [subject] });
  streams.push(stream);
  await jsm.consumers.add(stream, { durable_name: DURABLE, ack_policy: AckPolicy.Explicit, ack_wait: nanos(ACK_WAIT_MS) });

  const metrics = new InMemoryMetrics();
  const commits = new Map<number, number>();
  const writing = new Map<number, Set<number>>();
  let t0 = performance.now();
  const log = (line: string): void => console.log(`  ${`+${((performance.now() - t0) / 1000).toFixed(1)} s`.padStart(8)}  ${line}`);

  const shutdown = new AbortController();
  const workers = await Promise.all(
    Array.from({ length: WORKERS }, async (_, i) => {
      const w = i + 1;
      const nc = await connect({ servers: url, name: `demo-worker-${w}` });
      const ack = await CommitThenAck.forConsumer(await jetstreamManager(nc), stream, DURABLE, {
        ...(heartbeats ? { inProgress: { enabled: true, intervalMs: HEARTBEAT_MS, maxHeartbeats: 10 } } : {}),
        connection: nc,
        metrics,
        // Wait for the server to confirm each ACK before fetching again, so a worker's own
        // expired message cannot come back to it in the moment between its ACK and its next fetch.
        confirmAck: { timeoutMs: 2_000 },
      });
      // The "database write": 5 s, then the row is committed. CommitThenAck acks afterwards.
      const write: BatchWrite = async (msgs, ctx) => {
        for (const m of msgs) {
          const others = [...(writing.get(m.seq) ?? [])].map((o) => `worker ${o}`);
          const again = m.info.deliveryCount > 1 ? ` again (delivery ${m.info.deliveryCount})` : "";
          const busy = others.length > 0 ? `, while ${others.join(" and ")} is still writing it` : "";
          log(`worker ${w} got #${m.seq}${again}${busy}`);
          writing.set(m.seq, new Set([...(writing.get(m.seq) ?? []), w]));
        }
        try {
          await sleep(WRITE_MS, undefined, { signal: ctx.signal });
          for (const m of msgs) {
            const n = (commits.get(m.seq) ?? 0) + 1;
            commits.set(m.seq, n);
            log(`worker ${w} committed #${m.seq}${n > 1 ? "  <- duplicate commit" : ""}`);
          }
        } finally {
          for (const m of msgs) writing.get(m.seq)?.delete(w);
        }
      };
      const consumer = await jetstream(nc).consumers.get(stream, DURABLE);
      return { nc, running: ack.run(consumer, write, { batchSize: 1, signal: shutdown.signal }) };
    }),
  );

  try {
    await until(async () => (await jsm.consumers.info(stream, DURABLE)).num_waiting >= WORKERS, "the workers to pull", 10_000);
    const js = jetstream(admin!);
    t0 = performance.now();
    for (let n = 1; n <= MESSAGES; n++) {
      await js.publish(subject, JSON.stringify({ order: n }));
      if (n < MESSAGES) await sleep(PUBLISH_EVERY_MS);
    }
    // Done when every message is committed and acknowledged and no worker is still writing.
    await until(
      async () => {
        if (commits.size < MESSAGES || [...writing.values()].some((s) => s.size > 0)) return false;
        const info = await jsm.consumers.info(stream, DURABLE);
        return info.num_pending === 0 && info.num_ack_pending === 0;
      },
      "every message to be committed and acknowledged",
      ROUND_LIMIT_MS,
    );
  } finally {
    shutdown.abort();
    await Promise.allSettled(workers.map((w) => w.running));
    await Promise.allSettled(workers.map((w) => w.nc.close()));
  }
  const wallMs = performance.now() - t0;

  const info = await jsm.consumers.info(stream, DURABLE);
  const deliveries = info.delivered.consumer_seq;
  const total = [...commits.values()].reduce((a, b) => a + b, 0);
  return {
    stream,
    messages: MESSAGES,
    deliveries,
    redeliveries: deliveries - MESSAGES,
    commits: total,
    duplicateCommits: total - commits.size,
    heartbeats: metrics.snapshot().counters[MetricNames.IN_PROGRESS_SUCCESSES_TOTAL] ?? 0,
    wallMs,
    metrics,
  };
}

/** Prints rows as an aligned table: a label column, then right-aligned value columns. */
function printTable(header: readonly string[], rows: readonly (readonly string[])[]): void {
  const all = [header, ...rows];
  const widths = header.map((_, c) => Math.max(...all.map((r) => (r[c] ?? "").length)));
  for (const r of all) {
    console.log(`  ${r.map((cell, c) => (c === 0 ? cell.padEnd(widths[c]!) : cell.padStart(widths[c]! + 4))).join("")}`);
  }
}

async function main(): Promise<void> {
  const started = performance.now();
  let url = process.env["NATS_URL"];
  let where: string;
  if (url) {
    where = `NATS_URL ${url}`;
  } else {
    try {
      ensureNatsServerBinary();
    } catch (err) {
      console.error(`demo: ${(err as Error).message}; or set NATS_URL to a running nats-server with JetStream`);
      process.exit(1);
    }
    server = await startServer();
    url = server.url;
    where = `a throwaway server on ${url}`;
  }
  admin = await connect({ servers: url, name: "demo-admin" });
  const jsm = await jetstreamManager(admin);

  console.log(`jetstream-inprogress demo: nats-server ${admin.info?.version ?? "?"}, ${where}`);
  console.log(
    `${WORKERS} workers share a durable consumer with a ${ACK_WAIT_MS / 1000} s AckWait; every write takes ${WRITE_MS / 1000} s; ` +
      `${MESSAGES} messages arrive, one every ${PUBLISH_EVERY_MS / 1000} s.`,
  );

  console.log("\n1) without heartbeats: after 2 s JetStream assumes the worker died and redelivers");
  const without = await runRound(url, jsm, false);
  console.log(`\n2) with heartbeats: CommitThenAck sends +WPI every ${HEARTBEAT_MS} ms while a write runs, and acks after the commit`);
  const withBeats = await runRound(url, jsm, true);

  console.log("\nresult");
  const secs = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;
  printTable(
    ["", "without heartbeats", "with heartbeats"],
    [
      ["messages", String(without.messages), String(withBeats.messages)],
      ["deliveries", String(without.deliveries), String(withBeats.deliveries)],
      ["redeliveries", String(without.redeliveries), String(withBeats.redeliveries)],
      ["duplicate commits", String(without.duplicateCommits), String(withBeats.duplicateCommits)],
      ["heartbeats sent", String(without.heartbeats), String(withBeats.heartbeats)],
      ["wall time", secs(without.wallMs), secs(withBeats.wallMs)],
    ],
  );

  console.log(`\nguardrail: heartbeats every ${UNSAFE_HEARTBEAT_MS} ms against the same consumer (AckWait ${ACK_WAIT_MS} ms)`);
  try {
    await CommitThenAck.forConsumer(jsm, withBeats.stream, DURABLE, { inProgress: { enabled: true, intervalMs: UNSAFE_HEARTBEAT_MS } });
    throw new Error("the unsafe policy was accepted");
  } catch (err) {
    if (!(err instanceof ConsumerPolicyError)) throw err;
    console.log(`  refused before the first fetch: ${err.name} (${err.reason})`);
    for (const v of err.violations) console.log(`  ${v.code}: ${v.message}`);
  }

  console.log("\nmetrics (InMemoryMetrics snapshots)");
  const counter = (r: RoundResult, name: MetricName): string => String(r.metrics.snapshot().counters[name] ?? 0);
  const writes = (r: RoundResult): string => {
    const obs = r.metrics.snapshot().observations[MetricNames.BATCH_WRITE_SECONDS] ?? [];
    const mean = obs.length > 0 ? obs.reduce((a, b) => a + b, 0) / obs.length : 0;
    return `${obs.length} x ${mean.toFixed(2)} s`;
  };
  printTable(
    ["", "without heartbeats", "with heartbeats"],
    [
      ...[
        MetricNames.MESSAGES_ACKED_TOTAL,
        MetricNames.IN_PROGRESS_ATTEMPTS_TOTAL,
        MetricNames.IN_PROGRESS_SUCCESSES_TOTAL,
        MetricNames.IN_PROGRESS_FAILURES_TOTAL,
        MetricNames.IN_PROGRESS_LEASE_EXPIRED_TOTAL,
      ].map((name) => [name, counter(without, name), counter(withBeats, name)]),
      [MetricNames.BATCH_WRITE_SECONDS, writes(without), writes(withBeats)],
    ],
  );
  console.log(
    `\n${without.messages} messages, acked ${counter(without, MetricNames.MESSAGES_ACKED_TOTAL)} times without heartbeats: ` +
      "late ACKs of duplicates are harmless to JetStream, but the sink wrote those rows twice.",
  );
  console.log(`done in ${secs(performance.now() - started)}`);
}

try {
  await main();
} catch (err) {
  console.error(`demo failed: ${err instanceof Error ? err.message : String(err)}`);
  process.exitCode = 1;
} finally {
  await cleanup();
}
