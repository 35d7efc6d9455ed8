/** Small JetStream fixtures for the real-server tests. */
import { setTimeout as sleep } from "node:timers/promises";
import {
  AckPolicy,
  jetstream,
  jetstreamManager,
  type ConsumerConfig,
  type ConsumerInfo,
  type JetStreamClient,
  type JetStreamManager,
  type JsMsg,
} from "@nats-io/jetstream";
import { nanos, type NatsConnection } from "@nats-io/transport-node";

let counter = 0;

/** A unique, valid stream/consumer name for one test. */
export function uniqueName(prefix = "T"): string {
  counter += 1;
  return `${prefix}_${process.pid}_${Date.now().toString(36)}_${counter}`.toUpperCase();
}

export interface Fixture {
  readonly nc: NatsConnection;
  readonly js: JetStreamClient;
  readonly jsm: JetStreamManager;
  readonly stream: string;
  readonly consumer: string;
  readonly subject: string;
}

export interface FixtureOptions {
  /** AckWait in milliseconds (default 30 s). */
  readonly ackWaitMs?: number;
  /** BackOff steps in milliseconds. */
  readonly backOffMs?: readonly number[];
  readonly maxDeliver?: number;
  readonly maxAckPending?: number;
  readonly replicas?: number;
  /** Extra consumer config. */
  readonly consumer?: Partial<ConsumerConfig>;
}

/** Creates a stream with one subject and a durable pull consumer with explicit acks. */
export async function createFixture(nc: NatsConnection, options: FixtureOptions = {}): Promise<Fixture> {
  const jsm = await jetstreamManager(nc);
  const stream = uniqueName("S");
  const consumer = uniqueName("C");
  const subject = `${stream.toLowerCase()}.events`;
  await jsm.streams.add({ name: stream, subjects: [subject], num_replicas: options.replicas ?? 1 });
  const config: Partial<ConsumerConfig> = {
    durable_name: consumer,
    ack_policy: AckPolicy.Explicit,
    ack_wait: nanos(options.ackWaitMs ?? 30_000),
    ...(options.maxDeliver !== undefined ? { max_deliver: options.maxDeliver } : {}),
    ...(options.maxAckPending !== undefined ? { max_ack_pending: options.maxAckPending } : {}),
    ...(options.backOffMs ? { backoff: options.backOffMs.map((ms) => nanos(ms)) } : {}),
    ...(options.replicas !== undefined ? { num_replicas: options.replicas } : {}),
    ...options.consumer,
  };
  await jsm.consumers.add(stream, config);
  return { nc, js: jetstream(nc), jsm, stream, consumer, subject };
}

/** Publishes `n` messages (`msg-1` …) and returns their stream sequences. */
export async function publish(f: Fixture, n: number, body = (i: number) => `msg-${i}`): Promise<number[]> {
  const seqs: number[] = [];
  for (let i = 1; i <= n; i++) {
    const ack = await f.js.publish(f.subject, body(i));
    seqs.push(ack.seq);
  }
  return seqs;
}

/** Fetches up to `max` messages from the fixture's consumer. */
export async function fetchBatch(f: Fixture, max: number, expiresMs = 2000): Promise<JsMsg[]> {
  const consumer = await f.js.consumers.get(f.stream, f.consumer);
  const iter = await consumer.fetch({ max_messages: max, expires: expiresMs });
  const out: JsMsg[] = [];
  for await (const m of iter) out.push(m);
  return out;
}

/** Reads consumer info. */
export async function consumerInfo(f: Fixture): Promise<ConsumerInfo> {
  return await f.jsm.consumers.info(f.stream, f.consumer);
}

/** Polls `probe` until it returns a truthy value; throws with `what` after `timeoutMs`. */
export async function eventually<T>(probe: () => Promise<T> | T, what: string, timeoutMs = 15_000, everyMs = 50): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const v = await probe();
      if (v) return v as NonNullable<T>;
      last = v;
    } catch (err) {
      last = err;
    }
    await sleep(everyMs);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${String(last)})`);
}
