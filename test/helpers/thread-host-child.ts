/**
 * A service that writes one batch through CommitThenAck with `heartbeat: { thread: true }` and
 * then finishes, for the test that the heartbeat thread never keeps a finished host alive.
 * argv: <server URL>. Prints one JSON line when its work is done.
 */
import { AckPolicy, jetstream, jetstreamManager, type JsMsg } from "@nats-io/jetstream";
import { connect, nanos } from "@nats-io/transport-node";
import { CommitThenAck } from "../../src/index.js";

const [url] = process.argv.slice(2) as [string];
const nc = await connect({ servers: url, name: "thread-host" });
const jsm = await jetstreamManager(nc);
const stream = `THREAD_HOST_${process.pid}`;
await jsm.streams.add({ name: stream, subjects: [`${stream}.in`] });
await jsm.consumers.add(stream, { durable_name: "writer", ack_policy: AckPolicy.Explicit, ack_wait: nanos(5000) });
await jetstream(nc).publish(`${stream}.in`, "row");
const ack = await CommitThenAck.forConsumer(jsm, stream, "writer", {
  inProgress: { enabled: true, intervalMs: 200, maxHeartbeats: 50 },
  heartbeat: { thread: true },
  connection: nc,
});
const batch: JsMsg[] = [];
for await (const m of await (await jetstream(nc).consumers.get(stream, "writer")).fetch({ max_messages: 1, expires: 1000 })) batch.push(m);
// The write outlasts the thread's start (a worker compiling the sources on a busy machine can
// take over a second before its first round), so some of its beats come from the thread.
const result = await ack.process(batch, () => new Promise((r) => setTimeout(r, 3000)));
await jsm.streams.delete(stream);
await nc.close();
console.log(JSON.stringify({ outcome: result.outcome, heartbeats: result.heartbeats, doneAt: Date.now() }));
