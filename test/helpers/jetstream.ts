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
  /** A stream with more than one replica: its calls wait longer, and are asked again. */
  readonly replicated?: boolean;
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

/**
 * A replicated fixture's API calls wait longer than the client's 5 s: on a loaded 3-node
 * cluster with a node just restarted and catching up, placing an R3 stream or consumer can take
 * longer than that.
 */
const REPLICATED_API_TIMEOUT_MS = 20_000;

/**
 * A request nobody answered: no answer in time (3.x `TimeoutError`, 2.x code `TIMEOUT`), or no
 * responders (a stream just placed on a cluster whose subject interest has not reached the
 * node the client is on yet: 3.x reports a publish as `JetStreamNotEnabled`, 2.x code `503`).
 * Looks through `cause`.
 */
export function isUnanswered(err: unknown): boolean {
  for (let e = err as { name?: unknown; code?: unknown; message?: unknown; cause?: unknown } | undefined, depth = 0; e && depth < 5; e = e.cause as typeof e, depth++) {
    if (e.name === "TimeoutError" || e.code === "TIMEOUT") return true;
    if (e.name === "NoRespondersError" || e.name === "NoResponders" || e.name === "JetStreamNotEnabled" || e.code === "503") return true;
    if (typeof e.message === "string" && /no responders/i.test(e.message)) return true;
  }
  return false;
}

/**
 * Runs `attempt` again while nobody answers it (a request that met no leader, or no interest
 * yet), for up to `withinMs`, 100 ms apart; only for idempotent calls (a create with the same
 * config, a publish with a message id).
 */
export async function againWhileUnanswered<T>(attempt: () => Promise<T>, withinMs: number): Promise<T> {
  const deadline = performance.now() + withinMs;
  for (;;) {
    try {
      return await attempt();
    } catch (err) {
      if (!isUnanswered(err) || performance.now() >= deadline) throw err;
      await sleep(100);
    }
  }
}

/** Creates a stream with one subject and a durable pull consumer with explicit acks. */
export async function createFixture(nc: NatsConnection, options: FixtureOptions = {}): Promise<Fixture> {
  const replicated = (options.replicas ?? 1) > 1;
  const api = replicated ? { timeout: REPLICATED_API_TIMEOUT_MS } : {};
  const jsm = await jetstreamManager(nc, api);
  const stream = uniqueName("S");
  const consumer = uniqueName("C");
  const subject = `${stream.toLowerCase()}.events`;
  // Creates with the same config are idempotent: asked again when one met no leader.
  const within = replicated ? 2 * REPLICATED_API_TIMEOUT_MS : 0;
  await againWhileUnanswered(() => jsm.streams.add({ name: stream, subjects: [subject], num_replicas: options.replicas ?? 1 }), within);
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
  await againWhileUnanswered(() => jsm.consumers.add(stream, config), within);
  return { nc, js: jetstream(nc, api), jsm, stream, consumer, subject, replicated };
}

let published = 0;

/**
 * Publishes `n` messages (`msg-1` …) and returns their stream sequences. On a replicated
 * fixture, a publish nobody answered (a stream leader election, interest not there yet) is
 * sent again under its message id, so the stream keeps one copy.
 */
export async function publish(f: Fixture, n: number, body = (i: number) => `msg-${i}`): Promise<number[]> {
  const seqs: number[] = [];
  for (let i = 1; i <= n; i++) {
    const data = body(i);
    let ack;
    if (f.replicated) {
      const msgID = `${f.stream}-${process.pid}-${++published}`;
      ack = await againWhileUnanswered(() => f.js.publish(f.subject, data, { msgID }), 2 * REPLICATED_API_TIMEOUT_MS);
    } else ack = await f.js.publish(f.subject, data);
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
