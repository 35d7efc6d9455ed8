/**
 * CommitThenAck around a sink: ACK after the write is durable, try a temporarily failed write
 * again in place (NAK it only past what the lease bridges), dead-letter poison messages, and
 * stop gracefully.
 * Run: NATS_URL=nats://127.0.0.1:4222 npx tsx examples/commit-then-ack.ts
 */
import { AckPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect, nanos } from "@nats-io/transport-node";
import { CommitThenAck, PermanentSinkError, TemporarySinkError, type BatchWrite } from "jetstream-inprogress";

const nc = await connect({ servers: process.env["NATS_URL"] ?? "nats://127.0.0.1:4222" });
const jsm = await jetstreamManager(nc);
const js = jetstream(nc);
const stream = `EXAMPLE_CTA_${Date.now()}`;
await jsm.streams.add({ name: stream, subjects: [`${stream}.in`] });
await jsm.streams.add({ name: `${stream}_DLQ`, subjects: [`${stream}.dlq`] });
await jsm.consumers.add(stream, { durable_name: "writer", ack_policy: AckPolicy.Explicit, ack_wait: nanos(5_000) });
for (const body of ["ok-1", "busy", "poison", "ok-2"]) await js.publish(`${stream}.in`, body);

// A toy sink: "busy" fails once (temporary: tried again in place, so written in its turn),
// "poison" can never be written (permanent).
const sink = new Map<number, string>();
let busyOnce = true;
const write: BatchWrite = async (msgs) => {
  for (const m of msgs) {
    const body = m.string();
    if (body === "poison") throw new PermanentSinkError("unparseable record");
    if (body === "busy" && busyOnce) {
      busyOnce = false;
      throw new TemporarySinkError("sink busy");
    }
    sink.set(m.seq, body); // idempotent: keyed by stream sequence
  }
};

try {
  const ack = await CommitThenAck.forConsumer(jsm, stream, "writer", {
    inProgress: { enabled: true, intervalMs: 2_000, maxHeartbeats: 10 },
    onTemporaryFailure: { action: "nak", delayMs: 500 },
    deadLetter: { js, subject: `${stream}.dlq` },
    connection: nc,
  });
  const shutdown = new AbortController();
  const consumer = await js.consumers.get(stream, "writer");
  const outcomes: string[] = [];
  const running = ack.run(consumer, write, { batchSize: 1, signal: shutdown.signal });
  // One message per batch, so a failure only affects itself; stop once everything settled.
  const deadline = Date.now() + 20_000;
  while ((sink.size < 3 || (await jsm.streams.info(`${stream}_DLQ`)).state.messages < 1) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 100));
  }
  shutdown.abort();
  await running;
  outcomes.push(`written: ${[...sink.values()].join(", ")}`);
  outcomes.push(`dead-lettered: ${(await jsm.streams.info(`${stream}_DLQ`)).state.messages}`);
  const info = await jsm.consumers.info(stream, "writer");
  outcomes.push(`ack pending: ${info.num_ack_pending}, acked up to: ${info.ack_floor.stream_seq}`);
  console.log(outcomes.join("\n"));
} finally {
  await jsm.streams.delete(stream);
  await jsm.streams.delete(`${stream}_DLQ`);
  await nc.close();
}
