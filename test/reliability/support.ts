/** Shared pieces of the reliability scenarios. */
import type { Consumer, ConsumerInfo } from "@nats-io/jetstream";
import type { ConnectionOptions, NatsConnection } from "@nats-io/transport-node";
import { setTimeout as sleep } from "node:timers/promises";

export { sleep };

/** Client options of a production worker: reconnect forever, quickly. */
export const RECONNECT: Partial<ConnectionOptions> = {
  reconnect: true,
  maxReconnectAttempts: -1,
  reconnectTimeWait: 100,
};

/**
 * Collects the host process's unhandled rejections while a scenario runs. Call `stop()` in a
 * `finally`; `seen` then goes into the invariant check.
 */
export function watchUnhandledRejections(): { readonly seen: unknown[]; stop(): void } {
  const seen: unknown[] = [];
  const listener = (reason: unknown): void => {
    seen.push(reason);
  };
  process.on("unhandledRejection", listener);
  return { seen, stop: () => void process.off("unhandledRejection", listener) };
}

/**
 * Consumer info by a raw API request with a short timeout, so a read during a leader election
 * fails fast instead of hanging for the client's default 5 s. Rejects on an API error.
 */
export async function readConsumerInfo(nc: NatsConnection, stream: string, consumer: string, timeoutMs = 1000): Promise<ConsumerInfo> {
  const reply = await nc.request(`$JS.API.CONSUMER.INFO.${stream}.${consumer}`, "", { timeout: timeoutMs });
  const body = reply.json<ConsumerInfo & { error?: { description?: string; code?: number } }>();
  if (body.error) throw new Error(`consumer info: ${body.error.description ?? "error"} (${body.error.code ?? "?"})`);
  return body;
}

/** Retries `readConsumerInfo` until `accept` holds or `timeoutMs` passes; returns the accepted info. */
export async function consumerInfoWhen(
  nc: NatsConnection,
  stream: string,
  consumer: string,
  accept: (info: ConsumerInfo) => boolean,
  what: string,
  timeoutMs = 30_000,
): Promise<ConsumerInfo> {
  const deadline = performance.now() + timeoutMs;
  let last: unknown;
  while (performance.now() < deadline) {
    try {
      const info = await readConsumerInfo(nc, stream, consumer);
      if (accept(info)) return info;
      last = `leader=${info.cluster?.leader ?? "-"} pending=${info.num_pending} ack_pending=${info.num_ack_pending} floor=${info.ack_floor.stream_seq}`;
    } catch (err) {
      last = err;
    }
    await sleep(100);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${String(last)})`);
}

/**
 * Awaits one step of a scenario; a failure names the step, so a client's bare "TIMEOUT" in a
 * run's log says which call met it.
 */
export async function step<T>(what: string, work: Promise<T>): Promise<T> {
  try {
    return await work;
  } catch (err) {
    const e = err as { name?: unknown; code?: unknown; message?: unknown } | undefined;
    const label = [e?.name, e?.code].filter((x) => typeof x === "string" && x !== "").join(" ");
    throw new Error(`${what}: ${label}${label ? ": " : ""}${String(e?.message ?? err)}`, { cause: err });
  }
}

/** A deferred the scenario resolves by hand. */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (v: T) => void } {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

/** A small deterministic random source (mulberry32), so a failing run can be repeated. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Counts of one status type seen on a connection (disconnect, reconnect, ...), with their times. */
export function watchStatus(nc: NatsConnection): { readonly events: Array<{ type: string; at: number }>; count(type: string): number } {
  const events: Array<{ type: string; at: number }> = [];
  void (async () => {
    for await (const s of nc.status()) events.push({ type: s.type, at: performance.now() });
  })().catch(() => undefined);
  return { events, count: (type) => events.filter((e) => e.type === type).length };
}

/**
 * A consumer the loops can only fetch from (no `consume()`), for a probe that must see a
 * redelivery as soon as the server sends it: a loop's subscription whose pull was lost with a
 * consumer leader or a server waits for its heartbeat watch and a consumer-info read before it
 * asks again, where the next fetch asks at once.
 */
export function fetchOnly(consumer: Consumer): Pick<Consumer, "fetch" | "info"> {
  return { fetch: consumer.fetch.bind(consumer), info: consumer.info.bind(consumer) };
}
