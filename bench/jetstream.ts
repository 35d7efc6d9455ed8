/**
 * JetStream fixtures for the rows that need a real server: a memory stream filled in bulk,
 * durable pull consumers with explicit acks, fetching a known number of messages, and the
 * consumer counters that prove there was no redelivery.
 */
import { setTimeout as sleep } from "node:timers/promises";
import {
  AckPolicy,
  DeliverPolicy,
  StorageType,
  jetstream,
  jetstreamManager,
  type Consumer,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
} from "@nats-io/jetstream";
import { nanos, type NatsConnection } from "@nats-io/transport-node";
import { uniqueName } from "../test/helpers/jetstream.js";

export interface BenchStream {
  readonly nc: NatsConnection;
  readonly js: JetStreamClient;
  readonly jsm: JetStreamManager;
  readonly stream: string;
  readonly subject: string;
}

const PAYLOAD = new TextEncoder().encode(JSON.stringify({ order: 123456, sku: "bench-item", qty: 1, note: "x".repeat(16) }));

/**
 * A memory stream holding `messages` messages. Memory storage keeps the disk (and other
 * processes' disk traffic) out of the figures; nothing the library does touches storage.
 */
export async function createStream(nc: NatsConnection, prefix: string, messages: number): Promise<BenchStream> {
  const jsm = await jetstreamManager(nc);
  const stream = uniqueName(prefix);
  const subject = `${stream.toLowerCase()}.in`;
  await jsm.streams.add({ name: stream, subjects: [subject], storage: StorageType.Memory });
  // Plain publishes are captured by the stream; check the count instead of awaiting 100k acks.
  for (let i = 0; i < messages; i++) {
    nc.publish(subject, PAYLOAD);
    if (i % 10_000 === 9_999) await nc.flush();
  }
  await nc.flush();
  const deadline = Date.now() + 30_000;
  for (;;) {
    const stored = (await jsm.streams.info(stream)).state.messages;
    if (stored === messages) break;
    if (Date.now() > deadline) throw new Error(`stream ${stream} holds ${stored} of ${messages} messages`);
    await sleep(50);
  }
  return { nc, js: jetstream(nc), jsm, stream, subject };
}

export interface ConsumerSpec {
  readonly ackWaitMs: number;
  readonly maxAckPending: number;
}

/** A durable pull consumer with explicit acks from the start of the stream; returns it bound. */
export async function addConsumer(s: BenchStream, spec: ConsumerSpec): Promise<{ name: string; consumer: Consumer }> {
  const name = uniqueName("C");
  await s.jsm.consumers.add(s.stream, {
    durable_name: name,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    ack_wait: nanos(spec.ackWaitMs),
    max_ack_pending: spec.maxAckPending,
  });
  return { name, consumer: await s.js.consumers.get(s.stream, name) };
}

/** Fetches exactly `n` messages in batches of `batch`, calling `onBatch` as each batch arrives. */
export async function fetchExactly(consumer: Consumer, n: number, batch: number, onBatch?: (msgs: JsMsg[]) => void): Promise<JsMsg[]> {
  const all: JsMsg[] = [];
  let emptyFetches = 0;
  while (all.length < n) {
    const msgs: JsMsg[] = [];
    const iter = await consumer.fetch({ max_messages: Math.min(batch, n - all.length), expires: 2000 });
    for await (const m of iter) msgs.push(m);
    if (msgs.length === 0 && ++emptyFetches > 3) throw new Error(`fetched ${all.length} of ${n} messages, then nothing`);
    onBatch?.(msgs);
    all.push(...msgs);
  }
  return all;
}

export interface ConsumerCounts {
  /** Deliveries so far (every redelivery counts again). */
  readonly delivered: number;
  /** Messages redelivered at least once (the server's `num_redelivered`). */
  readonly redelivered: number;
  readonly ackPending: number;
  /** Messages not yet delivered. */
  readonly pending: number;
  readonly ackFloor: number;
}

export async function consumerCounts(s: BenchStream, name: string): Promise<ConsumerCounts> {
  const info = await s.jsm.consumers.info(s.stream, name);
  return {
    delivered: info.delivered.consumer_seq,
    redelivered: info.num_redelivered,
    ackPending: info.num_ack_pending,
    pending: info.num_pending,
    ackFloor: info.ack_floor.stream_seq,
  };
}

/** Waits until every message of the consumer is acknowledged (the ack floor reached `n`). */
export async function waitAllAcked(s: BenchStream, name: string, n: number): Promise<ConsumerCounts> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const c = await consumerCounts(s, name);
    if (c.ackPending === 0 && c.ackFloor >= n) return c;
    if (Date.now() > deadline) throw new Error(`consumer ${name}: ${c.ackPending} still pending, ack floor ${c.ackFloor} of ${n}`);
    await sleep(50);
  }
}

/**
 * Runs one arm of a loop row on a fresh consumer of `s` (AckWait `ackWaitMs`), then checks that
 * every one of the `n` messages was acknowledged once, with no redelivery; a failed check goes
 * to `problems`.
 */
export async function armOnFreshConsumer(
  s: BenchStream,
  n: number,
  ackWaitMs: number,
  problems: string[],
  body: (consumer: Consumer) => Promise<number>,
): Promise<number> {
  const { name, consumer } = await addConsumer(s, { ackWaitMs, maxAckPending: 10_000 });
  const rate = await body(consumer);
  try {
    const counts = await waitAllAcked(s, name, n);
    if (counts.delivered !== n || counts.redelivered !== 0) problems.push(`an arm ended with ${JSON.stringify(counts)}`);
  } catch (err) {
    problems.push(err instanceof Error ? err.message : String(err));
  }
  await s.jsm.consumers.delete(s.stream, name);
  return rate;
}
