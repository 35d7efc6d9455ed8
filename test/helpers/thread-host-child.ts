/**
 * A service that runs CommitThenAck's loop with `heartbeat: { thread: true }` for one batch and
 * then finishes, for the test that the heartbeat thread never keeps a finished host alive.
 * argv: <server URL>. Prints one JSON line when its work is done.
 */
import { AckPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect, nanos } from "@nats-io/transport-node";
import { CommitThenAck, type BatchResult } from "../../src/index.js";

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
// run holds the thread until it is connected (up to 5 s) before its first batch, so every beat
// of the write can come from the thread, however long the worker takes to compile its sources.
const stop = new AbortController();
let result: BatchResult | undefined;
await ack.run(await jetstream(nc).consumers.get(stream, "writer"), () => new Promise((r) => setTimeout(r, 1500)), {
  batchSize: 1,
  signal: stop.signal,
  onBatch: (r) => {
    result = r;
    stop.abort();
  },
});
await jsm.streams.delete(stream);
await nc.close();
console.log(JSON.stringify({ outcome: result?.outcome, heartbeats: result?.heartbeats, doneAt: Date.now() }));
