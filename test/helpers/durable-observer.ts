/**
 * Another process watching a durable consumer while the test's own process may be blocked: it
 * records every ack frame on `$JS.ACK.<stream>.>` and, with PULL=1, pulls the same durable
 * without acking (a second worker that would get any redelivery). One JSON line per event on
 * stdout, each with Date.now(): {"type":"ready"}, {"type":"frame",...}, {"type":"delivery",...}.
 * It stops when its stdin closes. Env: NATS_URL, STREAM, CONSUMER, PULL.
 */
import { jetstream } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";

const env = (k: string): string => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is required`);
  return v;
};
const out = (line: Record<string, unknown>): void => void process.stdout.write(`${JSON.stringify(line)}\n`);

const nc = await connect({ servers: env("NATS_URL") });
let running = true;
process.stdin.on("end", () => {
  running = false;
});
process.stdin.resume();

nc.subscribe(`$JS.ACK.${env("STREAM")}.>`, {
  callback: (err, m) => {
    if (!err) out({ type: "frame", at: Date.now(), subject: m.subject, payload: m.string() });
  },
});
await nc.flush();

const pulling = process.env["PULL"] === "1";
const consumer = pulling ? await jetstream(nc).consumers.get(env("STREAM"), env("CONSUMER")) : undefined;
out({ type: "ready" });
while (running && consumer) {
  try {
    const batch = await consumer.fetch({ max_messages: 1, expires: 1000 });
    for await (const m of batch) out({ type: "delivery", at: Date.now(), seq: m.seq, deliveryCount: m.info.deliveryCount });
  } catch (err) {
    out({ type: "error", at: Date.now(), error: String(err) });
  }
}
while (running) await new Promise((r) => setTimeout(r, 100));
await nc.close();
