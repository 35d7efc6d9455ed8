/**
 * Watch a consumer's health: lag, messages in flight, the ack floor and redeliveries.
 * Creates its own stream and consumer, publishes a few messages, works on some of them,
 * prints three samples, then cleans up.
 * Run: NATS_URL=nats://127.0.0.1:4222 npx tsx examples/consumer-health.ts
 */
import { randomUUID } from "node:crypto";
import { AckPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect, nanos } from "@nats-io/transport-node";
import { InMemoryMetrics, watchConsumer, type ConsumerHealthSample } from "jetstream-inprogress";

const nc = await connect({ servers: process.env["NATS_URL"] ?? "nats://127.0.0.1:4222" });
const jsm = await jetstreamManager(nc);
const js = jetstream(nc);
const id = randomUUID().slice(0, 8).toUpperCase();
const stream = `HEALTH_DEMO_${id}`;
const consumer = `workers_${id}`;
const subject = `health-demo.${id}.jobs`;

try {
  await jsm.streams.add({ name: stream, subjects: [subject] });
  await jsm.consumers.add(stream, { durable_name: consumer, ack_policy: AckPolicy.Explicit, ack_wait: nanos(30_000) });
  for (let i = 1; i <= 5; i++) await js.publish(subject, `job-${i}`);

  // Resolves with the first sample that shows what we wait for (or gives up after 10 s).
  const waiting = new Set<(s: ConsumerHealthSample) => void>();
  const sampleWhere = (accept: (s: ConsumerHealthSample) => boolean): Promise<ConsumerHealthSample> =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        waiting.delete(check);
        reject(new Error("no matching sample within 10 s"));
      }, 10_000);
      const check = (s: ConsumerHealthSample): void => {
        if (!accept(s)) return;
        clearTimeout(timer);
        waiting.delete(check);
        resolve(s);
      };
      waiting.add(check);
    });

  const metrics = new InMemoryMetrics();
  // `using` stops the watch when this block ends, on every path (or call watch.stop()).
  using _watch = watchConsumer(jsm, stream, consumer, {
    intervalMs: 250,
    // The longest a healthy worker may hold a message (its longest heartbeated write plus one
    // AckWait): a floor flat for longer is a stall. Or pass the workers' verified policy as
    // `inProgress` and the watch derives it.
    maxLeaseMs: 60_000,
    metrics,
    onSample: (s) => [...waiting].forEach((check) => check(s)),
    onError: (err) => console.error("consumer info failed:", err),
  });

  const print = (n: number, s: ConsumerHealthSample): void =>
    console.log(
      `sample ${n}: pending=${s.pending} ackPending=${s.ackPending} redelivered=${s.redelivered}` +
        ` delivered=${s.delivered} ackFloor=${s.ackFloor} stalled=${s.stalled} backlogGrowing=${s.backlogGrowing}`,
    );

  // 1. Five messages wait; nobody has fetched yet.
  print(1, await sampleWhere((s) => s.pending === 5));

  // 2. A worker takes three, finishes two and is still busy with the third.
  const c = await js.consumers.get(stream, consumer);
  const batch = [];
  for await (const m of await c.fetch({ max_messages: 3, expires: 2000 })) batch.push(m);
  await batch[0]?.ackAck();
  await batch[1]?.ackAck();
  print(2, await sampleWhere((s) => s.ackPending === 1 && s.ackFloor === 2));

  // 3. The third is done: the ack floor moves, nothing is in flight.
  await batch[2]?.ackAck();
  print(3, await sampleWhere((s) => s.ackPending === 0 && s.ackFloor === 3));

  console.log(`metrics: ${JSON.stringify(metrics.snapshot().gauges)}`);
} finally {
  await jsm.streams.delete(stream).catch(() => undefined);
  await nc.close();
  console.log("cleaned up");
}
