/**
 * A write that outlasts AckWait, kept alive with bounded InProgress heartbeats while another
 * worker pulls from the same consumer and gets nothing.
 * Run: NATS_URL=nats://127.0.0.1:4222 npx tsx examples/with-in-progress.ts
 */
import { AckPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect, nanos } from "@nats-io/transport-node";
import { InMemoryMetrics, MetricNames, consumerTimingFromConfig, verifyInProgressPolicy, withInProgress } from "jetstream-inprogress";

const nc = await connect({ servers: process.env["NATS_URL"] ?? "nats://127.0.0.1:4222" });
const jsm = await jetstreamManager(nc);
const js = jetstream(nc);
const stream = `EXAMPLE_WIP_${Date.now()}`;
await jsm.streams.add({ name: stream, subjects: [`${stream}.>`] });
await jsm.consumers.add(stream, { durable_name: "writer", ack_policy: AckPolicy.Explicit, ack_wait: nanos(2_000) });
await js.publish(`${stream}.orders`, JSON.stringify({ id: 1 }));

try {
  // The policy is verified against the consumer's real AckWait, read from the server.
  const info = await jsm.consumers.info(stream, "writer");
  const policy = verifyInProgressPolicy({ enabled: true, intervalMs: 1_000, maxHeartbeats: 10 }, consumerTimingFromConfig(info));

  const consumer = await js.consumers.get(stream, "writer");
  const metrics = new InMemoryMetrics();
  // Collect the batch first: a fetch left open during a long write trips the client's
  // missed-heartbeat check.
  const batch = [];
  for await (const m of await consumer.fetch({ max_messages: 1, expires: 1_000 })) batch.push(m);
  const receivedAt = Date.now();
  // Another worker pulls meanwhile: without heartbeats it would get the message after 2 s.
  const stolen: unknown[] = [];
  const otherWorker = (async () => {
    for await (const m of await consumer.fetch({ max_messages: 1, expires: 6_000 })) stolen.push(m);
  })();
  // A slow but healthy write: 5 s, well past the 2 s AckWait.
  await withInProgress(batch, () => new Promise((resolve) => setTimeout(resolve, 5_000)), policy, { metrics, receivedAt });
  // Only after the write resolved; confirmed, so the consumer info below already shows it
  // (a flushed fire-and-forget ACK can still be queued on the server).
  for (const m of batch) await m.ackAck();
  await otherWorker;
  const after = await jsm.consumers.info(stream, "writer");
  const beats = metrics.snapshot().counters[MetricNames.IN_PROGRESS_SUCCESSES_TOTAL] ?? 0;
  console.log(`heartbeats sent: ${beats}`);
  console.log(`the other worker got: ${stolen.length}`);
  console.log(`deliveries: ${after.delivered.consumer_seq}, redelivered: ${after.num_redelivered}, acked up to: ${after.ack_floor.stream_seq}`);
} finally {
  await jsm.streams.delete(stream);
  await nc.close();
}
