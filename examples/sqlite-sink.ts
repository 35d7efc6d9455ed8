/**
 * A synchronous sink: better-sqlite3 commits each import in one transaction, blocking the event
 * loop for longer than the consumer's AckWait. With `heartbeat: { thread: true }` the beats come
 * from a worker thread and go on meanwhile, so no import is handed to another worker; without
 * it every long import would be delivered again (and reported `leaseLost`).
 * Run: NATS_URL=nats://127.0.0.1:4222 npx tsx examples/sqlite-sink.ts
 * (ROWS sets the rows per import; SQLITE_FILE a database file instead of memory;
 * SQLITE_NATIVE_BINDING a better-sqlite3 binary built for this Node.js, its nativeBinding option.)
 */
import { AckPolicy, jetstream, jetstreamManager, type JsMsg } from "@nats-io/jetstream";
import { connect, nanos } from "@nats-io/transport-node";
import Database from "better-sqlite3";
import { CommitThenAck, InMemoryMetrics, MetricNames, PermanentSinkError, type BatchResult } from "jetstream-inprogress";

const nc = await connect({ servers: process.env["NATS_URL"] ?? "nats://127.0.0.1:4222", name: "sqlite-importer" });
const jsm = await jetstreamManager(nc);
const js = jetstream(nc);
const stream = `EXAMPLE_SQLITE_${Date.now()}`;
await jsm.streams.add({ name: stream, subjects: [`${stream}.imports`] });
await jsm.consumers.add(stream, { durable_name: "importer", ack_policy: AckPolicy.Explicit, ack_wait: nanos(1_000) });
const ROWS = Number(process.env["ROWS"] ?? 1_500_000);
for (let id = 1; id <= 3; id++) await js.publish(`${stream}.imports`, JSON.stringify({ id, rows: ROWS }));

const nativeBinding = process.env["SQLITE_NATIVE_BINDING"];
const db = new Database(process.env["SQLITE_FILE"] ?? ":memory:", nativeBinding ? { nativeBinding } : {});
db.exec("CREATE TABLE IF NOT EXISTS readings (import_id INTEGER, n INTEGER, value REAL, PRIMARY KEY (import_id, n))");
const insert = db.prepare("INSERT OR REPLACE INTO readings VALUES (?, ?, ?)");
// Idempotent, keyed by import and row: a redelivered import rewrites the same rows.
const importRows = db.transaction((id: number, rows: number) => {
  for (let n = 0; n < rows; n++) insert.run(id, n, n / 2);
});

try {
  const metrics = new InMemoryMetrics();
  const ack = await CommitThenAck.forConsumer(jsm, stream, "importer", {
    inProgress: { enabled: true, intervalMs: 500, maxHeartbeats: 60 },
    // Beats from a worker thread with its own connection (copied from nc): SQLite blocks this one.
    heartbeat: { thread: true },
    connection: nc,
    metrics,
  });
  const commitsMs: number[] = [];
  const results: BatchResult[] = [];
  const shutdown = new AbortController();
  const running = ack.run(
    await js.consumers.get(stream, "importer"),
    (msgs: readonly JsMsg[]) => {
      for (const m of msgs) {
        const { id, rows } = m.json<{ id: number; rows: number }>();
        if (!Number.isInteger(rows) || rows < 0) throw new PermanentSinkError("rows must be a count");
        const started = performance.now();
        importRows(id, rows); // synchronous: nothing else runs on this thread until it commits
        commitsMs.push(performance.now() - started);
      }
    },
    { batchSize: 1, signal: shutdown.signal, onBatch: (r) => void results.push(r) },
  );
  while (results.length < 3) await new Promise((r) => setTimeout(r, 100));
  shutdown.abort();
  await running;

  const info = await jsm.consumers.info(stream, "importer");
  const counters = metrics.snapshot().counters;
  const { c } = db.prepare("SELECT count(*) AS c FROM readings").get() as { c: number };
  console.log(`imports committed: ${results.filter((r) => r.outcome === "acked").length}, rows: ${c}`);
  console.log(`longest commit: ${Math.round(Math.max(...commitsMs))} ms (AckWait 1000 ms)`);
  console.log(`leases lost: ${results.filter((r) => r.leaseLost).length}, event-loop stalls: ${counters[MetricNames.IN_PROGRESS_EVENT_LOOP_STALLS_TOTAL] ?? 0}`);
  // Deliveries beyond one per message: on this unfiltered consumer, consumer_seq - stream_seq.
  console.log(`extra deliveries: ${info.delivered.consumer_seq - info.delivered.stream_seq}, acked up to: ${info.ack_floor.stream_seq}`);
} finally {
  db.close();
  await jsm.streams.delete(stream);
  await nc.close();
}
