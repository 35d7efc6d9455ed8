/**
 * Where a loop's messages come from. A pull is never cut short: the server may be delivering
 * into it, and a message it hands to a subscription that is gone reaches no one while its
 * delivery is spent (measured: 208 of 29,700 lost on their only delivery). Every pull ends by
 * itself — full, or at its expiry — and the expiry is what bounds how long a partial batch
 * waits.
 *
 * - `fetchSource`: one fetch per pull, for exactly the messages the loop can start;
 * - `pinnedSource`: one long-lived `consume()` for `pinned_client` priority groups, whose pin
 *   lives in that subscription (a new fetch carries none and waits out the priority timeout);
 *   its refills are gated to what the loop can start, and a "pull" is a window over it.
 *
 * Every message goes to the source's `arrive` callback with its receive time (monotonic ms).
 */
import type { Consumer, JsMsg } from "@nats-io/jetstream";
import { gateConsumePulls } from "../nats/pull-gate.js";
import type { PullOptions } from "./run-options.js";

/** Something a subscription reported that stops deliveries: the client's notice type and the server's words. */
export interface SourceNotice {
  readonly type: string;
  readonly description: string | undefined;
}

/** Receives every message as it arrives (monotonic receive time). */
export type Arrival = (m: JsMsg, receivedAt: number) => void;

/** A source of messages for a loop. */
export interface PullSource {
  /**
   * Pulls at most `max` messages; each goes to `arrive` as it arrives. Resolves when the pull
   * ended by itself; rejects with the pull's error.
   */
  pull(max: number): Promise<void>;
  /** Messages requested outside `pull` that may still arrive (a pinned subscription's refills). */
  readonly outstanding: number;
  /** The loop can start more messages than before (a write settled). */
  roomChanged(): void;
  /** No more pulls; resolves once nothing requested can still arrive. */
  close(): Promise<void>;
  /** What the source saw outside a pull that stops deliveries (a deleted consumer, missed heartbeats). */
  onNotice: ((notice: SourceNotice) => void) | undefined;
}

/** Fetch-based pulls. */
export function fetchSource(consumer: Pick<Consumer, "fetch">, expiresMs: number, pull: PullOptions | undefined, arrive: Arrival): PullSource {
  let outstanding = 0;
  return {
    async pull(max) {
      // Counted before the request goes out: what this pull may bring is already spoken for.
      outstanding += max;
      let left = max;
      try {
        const iter = await consumer.fetch({ max_messages: max, expires: expiresMs, ...(pull as object) } as Parameters<Consumer["fetch"]>[0]);
        for await (const m of iter) {
          if (left > 0) {
            left -= 1;
            outstanding -= 1;
          }
          arrive(m, performance.now());
        }
      } finally {
        outstanding -= left;
      }
    },
    get outstanding() {
      return outstanding;
    },
    roomChanged: () => undefined,
    close: async () => undefined,
    onNotice: undefined,
  };
}

/** Client notices that mean the consumer cannot deliver (reported, not fatal). */
const NOTICES = new Set(["heartbeats_missed", "consumer_deleted", "consumer_not_found", "stream_not_found", "exceeded_limits", "no_responders"]);

/**
 * Pulls from one long-lived `consume()` whose refills the gate keeps within `room()` (the
 * messages the loop could still take). A `pull(max)` is a window: it resolves once `max`
 * messages arrived or `expiresMs` passed; messages arriving between windows still go to
 * `arrive` at once, so they are held and beaten like the others.
 */
export async function pinnedSource(
  consumer: Pick<Consumer, "consume">,
  expiresMs: number,
  capacity: number,
  pull: PullOptions | undefined,
  room: () => number,
  arrive: Arrival,
): Promise<PullSource> {
  const iter = await consumer.consume({
    max_messages: capacity,
    expires: expiresMs,
    // A deleted consumer ends the subscription with an error instead of retrying silently.
    abort_on_missing_resource: true,
    ...(pull as object),
  } as Parameters<Consumer["consume"]>[0]);
  let read = 0;
  // Received by the subscription but not read yet: the loop does not hold them, but they are here.
  const unread = (): number => Math.max(0, (gate?.received ?? 0) - read);
  const gate = gateConsumePulls(iter, () => room() - unread());
  if (gate === undefined) {
    void iter.close();
    throw new TypeError("this NATS client's consume() cannot be bounded to the loop's capacity: use @nats-io/jetstream 3.1 or later for pinned consumers");
  }
  let window: { left: number; done: () => void } | undefined;
  let failure: unknown;
  let ended = false;
  const source: PullSource = {
    onNotice: undefined,
    get outstanding() {
      return gate.outstanding;
    },
    roomChanged: () => gate.resume(),
    async pull(max) {
      if (ended) throw failure ?? new Error("the pinned consumer's subscription ended");
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, expiresMs);
        timer.unref?.();
        function done(): void {
          clearTimeout(timer);
          if (window?.done === done) window = undefined;
          resolve();
        }
        window = { left: max, done };
      });
      if (ended && failure !== undefined) throw failure;
    },
    async close() {
      gate.close();
      // Refills already sent end by themselves (full, or at their expiry); only then may the
      // subscription go without dropping a message on its way.
      const deadline = performance.now() + expiresMs + 1000;
      while (!ended && gate.outstanding > 0 && performance.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      void iter.close();
      await reading;
    },
  };
  void watchNotices(iter, (n) => {
    // The client expects heartbeats even while the gate deliberately holds no pull open (the
    // loop can start nothing): a miss is only news when a pull was outstanding.
    if (n.type === "heartbeats_missed" && gate.outstanding === 0) return;
    source.onNotice?.(n);
  });
  const reading = (async () => {
    try {
      for await (const m of iter) {
        read += 1;
        arrive(m, performance.now());
        if (window !== undefined && --window.left <= 0) window.done();
      }
    } catch (err) {
      failure = err;
    } finally {
      ended = true;
      window?.done();
    }
  })();
  return source;
}

async function watchNotices(iter: { status(): unknown }, report: (notice: SourceNotice) => void): Promise<void> {
  try {
    // A promise in older clients, the iterator itself in newer ones.
    const status = (await iter.status()) as AsyncIterable<{ type?: unknown; description?: unknown }>;
    for await (const s of status) {
      if (typeof s?.type !== "string" || !NOTICES.has(s.type)) continue;
      report({ type: s.type, description: typeof s.description === "string" ? s.description.slice(0, 200) : undefined });
    }
  } catch {
    // The status stream ends with the iterator.
  }
}
