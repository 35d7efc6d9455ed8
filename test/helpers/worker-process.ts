/**
 * A worker in its own process, for tests that kill a worker mid-write. It runs
 * CommitThenAck.run with heartbeats on and a write that never ends, and prints one line per
 * event on stdout: "ready", "writing <seq,...>".
 * Env: NATS_URL, STREAM, CONSUMER, INTERVAL_MS.
 */
import { connect } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { CommitThenAck } from "../../src/index.js";

const env = (k: string): string => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is required`);
  return v;
};

const nc = await connect({ servers: env("NATS_URL") });
const jsm = await jetstreamManager(nc);
const ack = await CommitThenAck.forConsumer(jsm, env("STREAM"), env("CONSUMER"), {
  inProgress: { enabled: true, intervalMs: Number(process.env["INTERVAL_MS"] ?? "500"), maxHeartbeats: 1000 },
  connection: nc,
});
const consumer = await jetstream(nc).consumers.get(env("STREAM"), env("CONSUMER"));
console.log("ready");
await ack.run(consumer, async (msgs) => {
  console.log(`writing ${msgs.map((m) => m.seq).join(",")}`);
  await new Promise(() => undefined);
}, { batchSize: 1 });
