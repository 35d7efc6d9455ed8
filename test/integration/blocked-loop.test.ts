/**
 * A write that blocks the event loop (a synchronous sink, a CPU-bound transform) for 3.5 s,
 * with AckWait 2 s and beats every 500 ms, while another process pulls the same durable.
 *
 * With `heartbeat: { thread: true }` the beats come from a worker thread: the other process
 * receives nothing and the batch is acknowledged once. Without it no beat can leave: the other
 * process receives the redelivery, and the library says so (`leaseLost: true`, the lease
 * counted as expired, the stall counted) instead of reporting a healthy batch.
 */
import { jetstream, type JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import type Database from "better-sqlite3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CommitThenAck, DiagnosticsChannels, InMemoryMetrics, MetricNames, type BatchResult, type EventLoopStallEvent } from "../../src/index.js";
import { AckSpy } from "../helpers/ack-spy.js";
import { EventLog } from "../helpers/diagnostics.js";
import { createFixture, eventually, publish } from "../helpers/jetstream.js";
import { startServer, type NatsServer } from "../helpers/nats-server.js";
import { startObserver } from "../helpers/observer.js";
import { openSqlite } from "../helpers/sqlite.js";

let srv: NatsServer;
let nc: NatsConnection;

beforeAll(async () => {
  srv = await startServer();
  nc = await srv.connect();
});

afterAll(async () => {
  await nc.close();
  await srv.dispose();
});

const BLOCK_MS = 3500;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Nothing else runs on this thread meanwhile: no timer, no socket read, no beat from here. */
function busyLoop(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    // spin
  }
}

/** A synchronous SQLite transaction: rows inserted until `ms` passed, committed at once. */
function sqliteCommit(db: Database.Database, ms: number): number {
  const insert = db.prepare("INSERT INTO rows (n, body) VALUES (?, ?)");
  let n = 0;
  const end = performance.now() + ms;
  db.transaction(() => {
    while (performance.now() < end) for (let i = 0; i < 500; i++) insert.run(n++, "payload");
  })();
  return n;
}

interface Outcome {
  readonly results: BatchResult[];
  /** What the other process received: redeliveries of the message being written. */
  readonly rivalDeliveries: number;
  readonly acks: number;
  readonly counters: Readonly<Record<string, number>>;
  readonly stalls: EventLoopStallEvent[];
}

async function blockedWrite(o: { loop: "run" | "runEach"; thread: boolean; block: () => void }): Promise<Outcome> {
  const f = await createFixture(nc, { ackWaitMs: 2000 });
  const [seq] = await publish(f, 1);
  const spy = await AckSpy.start(nc, f.stream);
  const metrics = new InMemoryMetrics();
  using log = new EventLog([DiagnosticsChannels.EVENT_LOOP_STALL]);
  const worker = await srv.connect();
  const ack = await CommitThenAck.forConsumer(f.jsm, f.stream, f.consumer, {
    inProgress: { enabled: true, intervalMs: 500, maxHeartbeats: 100 },
    metrics,
    connection: worker,
    ...(o.thread ? { heartbeat: { thread: true } } : {}),
  });
  let go!: () => void;
  const started = new Promise<void>((resolve) => (go = resolve));
  let writing!: () => void;
  const inWrite = new Promise<void>((resolve) => (writing = resolve));
  const write = async (): Promise<void> => {
    writing();
    await started;
    o.block();
  };
  const results: BatchResult[] = [];
  const stop = new AbortController();
  const consumer = await jetstream(worker).consumers.get(f.stream, f.consumer);
  const running =
    o.loop === "run"
      ? ack.run(consumer, write, { batchSize: 1, signal: stop.signal, onBatch: (r) => void results.push(r) })
      : ack.runEach(consumer, (_m: JsMsg) => write(), { concurrency: 1, signal: stop.signal, onResult: (r) => void results.push(r) });
  // The other process starts pulling once this one holds the message: it could only get a redelivery.
  await inWrite;
  const rival = await startObserver({ url: srv.url, stream: f.stream, consumer: f.consumer, pull: true });
  try {
    go();
    await eventually(() => results.length === 1, "the batch settled", 15_000);
    // Past another AckWait after the block: a redelivery would have happened by now.
    await sleep(2500);
    stop.abort();
    await running;
    return {
      results,
      rivalDeliveries: rival.deliveries.filter((d) => d.seq === seq).length,
      acks: spy.of("+ACK", seq).length,
      counters: metrics.snapshot().counters,
      stalls: log.of(DiagnosticsChannels.EVENT_LOOP_STALL),
    };
  } finally {
    await rival.stop();
    await spy[Symbol.asyncDispose]();
    await worker.close();
    await f.jsm.streams.delete(f.stream);
  }
}

describe("a write that blocks the event loop past AckWait", () => {
  for (const loop of ["run", "runEach"] as const) {
    it(`${loop}, heartbeat thread: the other worker receives nothing; acked once, the lease kept`, async () => {
      const out = await blockedWrite({ loop, thread: true, block: () => busyLoop(BLOCK_MS) });
      expect(out.rivalDeliveries).toBe(0);
      expect(out.results.map((r) => [r.outcome, r.leaseLost])).toEqual([["acked", false]]);
      expect(out.acks).toBe(1);
      expect(out.counters[MetricNames.IN_PROGRESS_LEASE_EXPIRED_TOTAL] ?? 0).toBe(0);
      // The thread's rounds during the block are on the batch's books once the loop runs again.
      expect(out.results[0]!.heartbeats).toBeGreaterThanOrEqual(6);
      expect(out.counters[MetricNames.IN_PROGRESS_SUCCESSES_TOTAL] ?? 0).toBeGreaterThanOrEqual(6);
      // The stall is still reported, with the batch counted as beaten by the thread.
      expect(out.counters[MetricNames.IN_PROGRESS_EVENT_LOOP_STALLS_TOTAL] ?? 0).toBeGreaterThanOrEqual(1);
      const stall = out.stalls.find((s) => s.durationMs >= 2500);
      expect(stall, JSON.stringify(out.stalls)).toBeDefined();
      expect(stall!.threadedBatches).toBe(1);
    });

    it(`${loop}, no thread: the other worker receives the redelivery, and the loss is reported`, async () => {
      const out = await blockedWrite({ loop, thread: false, block: () => busyLoop(BLOCK_MS) });
      expect(out.rivalDeliveries).toBeGreaterThanOrEqual(1);
      // Committed, so acknowledged — but not reported healthy.
      expect(out.results.map((r) => [r.outcome, r.leaseLost])).toEqual([["acked", true]]);
      expect(out.results[0]!.messages[0]!.leaseLost).toBe(true);
      expect(out.counters[MetricNames.IN_PROGRESS_LEASE_EXPIRED_TOTAL]).toBe(1);
      expect(out.counters[MetricNames.IN_PROGRESS_EVENT_LOOP_STALLS_TOTAL] ?? 0).toBeGreaterThanOrEqual(1);
      const stall = out.stalls.find((s) => s.durationMs >= 2500);
      expect(stall, JSON.stringify(out.stalls)).toBeDefined();
      expect(stall!).toMatchObject({ batchesInFlight: 1, threadedBatches: 0, thresholdMs: 500 });
    });
  }

  it("a better-sqlite3 transaction (synchronous) of 3.5 s: with the thread kept, without it reported lost", async () => {
    const db = openSqlite();
    try {
      db.exec("CREATE TABLE rows (n INTEGER, body TEXT)");
      let rows = 0;
      const kept = await blockedWrite({ loop: "run", thread: true, block: () => void (rows += sqliteCommit(db, BLOCK_MS)) });
      expect(rows).toBeGreaterThan(100_000);
      expect(kept.rivalDeliveries).toBe(0);
      expect(kept.results.map((r) => [r.outcome, r.leaseLost])).toEqual([["acked", false]]);
      expect(kept.acks).toBe(1);

      const lost = await blockedWrite({ loop: "run", thread: false, block: () => void (rows += sqliteCommit(db, BLOCK_MS)) });
      expect(lost.rivalDeliveries).toBeGreaterThanOrEqual(1);
      expect(lost.results.map((r) => [r.outcome, r.leaseLost])).toEqual([["acked", true]]);
      expect(lost.counters[MetricNames.IN_PROGRESS_LEASE_EXPIRED_TOTAL]).toBe(1);
      expect((db.prepare("SELECT count(*) AS c FROM rows").get() as { c: number }).c).toBe(rows);
    } finally {
      db.close();
    }
  });
});
