/**
 * A CommonJS worker (require(), no top-level await): CommitThenAck.forConsumer + run over
 * slow batches kept alive by heartbeats, a row the database refuses dead-lettered with the
 * reason this service chose to send, a database outage retried, a graceful stop on SIGTERM.
 * It makes its own stream, consumer and dead-letter stream, and deletes them at the end.
 * Run: NATS_URL=nats://127.0.0.1:4222 node node_modules/jetstream-inprogress/examples/commonjs-worker.cjs
 */
"use strict";
const { AckPolicy, jetstream, jetstreamManager } = require("@nats-io/jetstream");
const { connect, nanos } = require("@nats-io/transport-node");
const { CommitThenAck, DeadLetterHeaders, InMemoryMetrics, MetricNames, PermanentSinkError, TemporarySinkError } = require("jetstream-inprogress");

/** Resolves after `ms`, or rejects with the signal's reason (a shutdown, a lost lease). */
function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => (clearTimeout(timer), reject(signal.reason)), { once: true });
  });
}

/** Stands in for a database table: slow, down for its first write, and with a CHECK on amounts. */
function ordersTable() {
  const rows = new Map();
  let down = true;
  return {
    rows,
    /** Upserts one batch of orders; resolves once they are durable. */
    async upsert(orders, signal) {
      await sleep(2_500, signal); // a slow batch: longer than the consumer's 2 s AckWait
      if (down) {
        down = false;
        throw Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:3306"), { code: "ECONNREFUSED" });
      }
      const refused = orders.filter((o) => !(o.amount > 0));
      for (const o of orders) if (o.amount > 0) rows.set(o.id, o);
      return refused.map((o) => ({ order: o, error: Object.assign(new Error(`CONSTRAINT amount failed for order ${o.id}`), { errno: 4025 }) }));
    },
  };
}

async function main() {
  const nc = await connect({ servers: process.env.NATS_URL || "nats://127.0.0.1:4222" });
  const jsm = await jetstreamManager(nc);
  const js = jetstream(nc);
  const stream = `EXAMPLE_CJS_${Date.now()}`;
  await jsm.streams.add({ name: stream, subjects: [`${stream}.orders`] });
  await jsm.streams.add({ name: `${stream}_DLQ`, subjects: [`${stream}.dlq`] });
  await jsm.consumers.add(stream, { durable_name: "orders-writer", ack_policy: AckPolicy.Explicit, ack_wait: nanos(2_000) });
  for (let id = 1; id <= 6; id++) await js.publish(`${stream}.orders`, JSON.stringify({ id, amount: id === 5 ? -1 : id * 10 }));

  const shutdown = new AbortController();
  const stop = (signal) => {
    console.log(`${signal}: stopping`);
    shutdown.abort();
  };
  process.once("SIGTERM", stop).once("SIGINT", stop);
  try {
    const table = ordersTable();
    const metrics = new InMemoryMetrics();
    const ack = await CommitThenAck.forConsumer(jsm, stream, "orders-writer", {
      inProgress: { enabled: true, intervalMs: 1_000, maxHeartbeats: 30 },
      onTemporaryFailure: { action: "nak", delayMs: 500 },
      // The reason travels only because this service chooses to send it: its own message here.
      deadLetter: { js, subject: `${stream}.dlq`, headers: (msg, err) => (err instanceof PermanentSinkError ? { "Reject-Reason": err.message } : {}) },
      metrics,
      connection: nc,
    });
    let settled = 0;
    console.log("started");
    await ack.run(
      await js.consumers.get(stream, "orders-writer"),
      async (msgs, ctx) => {
        const orders = msgs.map((m) => m.json());
        let refused;
        try {
          refused = await table.upsert(orders, ctx.signal);
        } catch (err) {
          if (ctx.signal.aborted) throw err; // shutdown or lost lease: nothing committed, settled by the library
          throw new TemporarySinkError("database unreachable", { cause: err });
        }
        // Only the refused rows fail; the rest of the batch is acknowledged.
        return {
          failed: refused.map(({ order, error }) => ({
            msg: msgs[orders.indexOf(order)],
            error: new PermanentSinkError(`amount must be positive (errno ${error.errno})`, { cause: error }),
          })),
        };
      },
      {
        batchSize: 3,
        concurrency: 2,
        signal: shutdown.signal,
        onBatch: (r) => {
          settled += r.acked + r.deadLettered;
          if (settled === 6) shutdown.abort(); // everything written or dead-lettered: the demo is over
        },
        onError: (err, ctx) => console.warn(`${ctx.during}: ${err.name}`),
      },
    );
    const info = await jsm.consumers.info(stream, "orders-writer");
    const dead = (await jsm.streams.info(`${stream}_DLQ`)).state.messages > 0 ? await jsm.streams.getMessage(`${stream}_DLQ`, { seq: 1 }) : undefined;
    console.log(`written: ${[...table.rows.keys()].sort((a, b) => a - b).join(", ")}`);
    if (dead) console.log(`dead-lettered: order ${dead.json().id} (${dead.header.get(DeadLetterHeaders.ERROR)}), Reject-Reason: ${dead.header.get("Reject-Reason")}`);
    console.log(`heartbeats accepted: ${metrics.snapshot().counters[MetricNames.IN_PROGRESS_SUCCESSES_TOTAL] || 0}`);
    console.log(`deliveries: ${info.delivered.consumer_seq} for ${info.delivered.stream_seq} orders, ack pending: ${info.num_ack_pending}`);
  } finally {
    await jsm.streams.delete(stream);
    await jsm.streams.delete(`${stream}_DLQ`);
    await nc.close();
    console.log("stopped");
  }
}

main().catch((err) => {
  console.error(err);
  process.exitCode = 1;
});
