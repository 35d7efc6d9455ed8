/**
 * A worker in its own process for the kill scenario. It runs `CommitThenAck.run` with
 * heartbeats, and its write is a request to the parent over the IPC channel: the parent is
 * the sink (it records the commit on its own clock) and answers when the write is durable —
 * or never, and kills this process instead.
 *
 * Messages to the parent: { type: "ready" }, { type: "write", id, keys: [{ stream, seq, dc }] }.
 * From the parent: { type: "done", id }.
 * Env: NATS_URL, STREAM, CONSUMER, INTERVAL_MS, BATCH_SIZE.
 */
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { CommitThenAck } from "../../src/index.js";

const env = (k: string): string => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is required`);
  return v;
};
const send = (m: unknown): void => {
  process.send?.(m);
};

const pending = new Map<number, () => void>();
process.on("message", (m: { type?: string; id?: number }) => {
  if (m?.type === "done" && typeof m.id === "number") {
    pending.get(m.id)?.();
    pending.delete(m.id);
  }
});
// The parent going away ends the worker.
process.on("disconnect", () => process.exit(0));

const nc = await connect({ servers: env("NATS_URL"), reconnect: true, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
const ack = await CommitThenAck.forConsumer(await jetstreamManager(nc), env("STREAM"), env("CONSUMER"), {
  inProgress: { enabled: true, intervalMs: Number(env("INTERVAL_MS")), maxHeartbeats: 1000 },
  connection: nc,
});
const consumer = await jetstream(nc).consumers.get(env("STREAM"), env("CONSUMER"));
let nextId = 0;
send({ type: "ready" });
await ack.run(
  consumer,
  async (msgs) => {
    const id = ++nextId;
    const done = new Promise<void>((resolve) => pending.set(id, resolve));
    send({ type: "write", id, keys: msgs.map((m) => ({ stream: m.info.stream, seq: m.seq, dc: m.info.deliveryCount })) });
    await done;
  },
  { batchSize: Number(env("BATCH_SIZE")) },
);
