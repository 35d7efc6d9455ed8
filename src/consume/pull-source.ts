/**
 * Where a loop's messages come from. A pull is never cut short: the server may be delivering
 * into it, and a message it hands to a subscription that is gone reaches no one while its
 * delivery is spent (measured: 208 of 29,700 lost on their only delivery). Every pull ends by
 * itself — full, or at its expiry — and the expiry is what bounds how long a partial batch
 * waits.
 *
 * - `consumeSource`: one long-lived `consume()` whose refills are gated to what the loop can
 *   start, and a "pull" is a window over it. Both loops read a consumer this way: one
 *   subscription and one request per refill (a fetch costs a subscription of its own), a pin of
 *   a `pinned_client` group kept in it, and no pull the client ends while the server delivers
 *   into it (a fetch's heartbeat watch ends one whose heartbeats are late, on a slow link);
 * - `fetchSource`: one fetch per pull, for exactly the messages the loop can start: for a
 *   consumer object without `consume()`, or a client whose `consume()` cannot be gated.
 *
 * Every message goes to the source's `arrive` callback with its receive time (monotonic ms).
 */
import type { Consumer, JsMsg } from "@nats-io/jetstream";
import { watchConsumeNotices } from "../nats/consume-notices.js";
import { gateConsumePulls, type PullGate } from "../nats/pull-gate.js";
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
   * Pulls at most `max` messages; each goes to `arrive` as it arrives. Resolves, with how many
   * it brought, when the pull ended by itself; rejects with the pull's error. `filled`, when the
   * source can tell, is called at once when the last of `max` arrived: the pull is over then,
   * though its promise settles a few turns later.
   */
  pull(max: number, filled?: () => void): Promise<number>;
  /** Messages requested that may still arrive (open pulls, or a subscription's refills). */
  readonly outstanding: number;
  /** The source asks for messages by itself (a gated subscription): a `pull` is only a window over it. */
  readonly refills: boolean;
  /** The loop can start more messages than before (a write settled). */
  roomChanged(now?: boolean): void;
  /** No more pulls; resolves once nothing requested can still arrive. */
  close(): Promise<void>;
  /** What the source saw outside a pull that stops deliveries (a deleted consumer, missed heartbeats). */
  onNotice: ((notice: SourceNotice) => void) | undefined;
  /** Its subscription ended outside a pull: nothing it requested can arrive, the loop may pull again. */
  onEnded: (() => void) | undefined;
}

/** Fetch-based pulls. */
export function fetchSource(consumer: Pick<Consumer, "fetch">, expiresMs: number, pull: PullOptions | undefined, arrive: Arrival): PullSource {
  let outstanding = 0;
  return {
    async pull(max, filled) {
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
          // Every message it asked for came: the server sends nothing more to this request, so
          // the pull is over now, not when the client's iterator ends a few turns later (the
          // next pull can then leave in the same socket write as the batch's ACKs).
          if (left === 0) {
            filled?.();
            break;
          }
        }
      } finally {
        outstanding -= left;
      }
      return max - left;
    },
    get outstanding() {
      return outstanding;
    },
    refills: false,
    roomChanged: () => undefined,
    close: async () => undefined,
    onNotice: undefined,
    onEnded: undefined,
  };
}

/** Client notices that mean the consumer cannot deliver (reported, not fatal). */
const NOTICES = new Set(["heartbeats_missed", "consumer_deleted", "consumer_not_found", "stream_not_found", "exceeded_limits", "no_responders"]);

/**
 * Pulls from one long-lived `consume()` whose refills the gate keeps within `room()` (the
 * messages the loop could still take): one subscription for the loop's life, each refill a
 * single request, each one asking only for what the loop can start. A `pull(max)` is a window:
 * it resolves once `max` messages arrived or `expiresMs` passed (the server's pulls are never
 * cut); messages arriving between windows still go to `arrive` at once. A subscription that
 * ended (an error, a deleted consumer) rejects the next window with its error and is opened
 * again for the one after, so the loop's backoff spaces the attempts.
 *
 * Resolves `undefined` when this client's `consume()` cannot be gated.
 */
export async function consumeSource(
  consumer: Pick<Consumer, "consume">,
  expiresMs: number,
  capacity: number,
  pull: PullOptions | undefined,
  room: () => number,
  arrive: Arrival,
): Promise<PullSource | undefined> {
  // Open windows, oldest first: an arrival counts towards the oldest.
  const windows: Array<{ left: number; got: number; done: () => void }> = [];
  const onMessage = (m: JsMsg): void => {
    arrive(m, performance.now());
    const w = windows[0];
    if (w === undefined) return;
    w.got += 1;
    if (--w.left <= 0) w.done();
  };
  const onEnd = (): void => {
    for (const w of [...windows]) w.done();
    source.onEnded?.();
  };
  const open = async (): Promise<Subscription | undefined> => {
    const opened = await subscribe(consumer, expiresMs, capacity, pull, room, onMessage, onEnd);
    if (opened !== undefined) opened.onNotice = (n) => source.onNotice?.(n);
    return opened;
  };
  let closing = false;
  let sub: Subscription | undefined;
  /**
   * The subscription ended: report why. One that ended with an error of its own (a deleted
   * consumer, missed heartbeats) is opened again by the next window, after the loop's backoff:
   * its first pull, which the client sends as it opens, then asks only for what the loop can
   * start at that moment (writes still running hold the rest). One that ended without (the
   * connection drains or closed) is opened again now: the client's refusal is the reason the
   * loop reports, once.
   */
  const failed = async (current: Subscription): Promise<never> => {
    if (sub === current) {
      sub = undefined;
      if (current.failure === undefined && !closing) {
        const next = await open();
        // close() ran while it opened: this one is closed here, or it would outlive the loop.
        if (closing) await next?.close(expiresMs);
        else sub = next;
      }
    }
    throw current.failure ?? new Error("the consumer's subscription ended");
  };
  const source: PullSource = {
    onNotice: undefined,
    onEnded: undefined,
    get outstanding() {
      // An ended subscription's refills will never be answered.
      return sub === undefined || sub.ended ? 0 : sub.gate.outstanding;
    },
    refills: true,
    roomChanged: (now) => sub?.gate.resume(now),
    async pull(max) {
      let current = sub;
      if (current === undefined) {
        if (closing) return 0;
        const next = await open();
        if (next === undefined) throw new TypeError("this NATS client's consume() can no longer be bounded to the loop's capacity");
        // close() ran while it opened: this one is closed here (what its first pull brings is
        // still handed over), or it would outlive the loop.
        if (closing) {
          await next.close(expiresMs);
          return 0;
        }
        current = sub = next;
      }
      if (current.ended) return failed(current);
      const got = await new Promise<number>((resolve) => {
        const timer = setTimeout(done, expiresMs);
        timer.unref?.();
        const w = { left: max, got: 0, done };
        function done(): void {
          clearTimeout(timer);
          const i = windows.indexOf(w);
          if (i >= 0) windows.splice(i, 1);
          resolve(w.got);
        }
        windows.push(w);
      });
      if (current.ended && !closing) return failed(current);
      return got;
    },
    async close() {
      closing = true;
      await sub?.close(expiresMs);
    },
  };
  sub = await open();
  return sub === undefined ? undefined : source;
}

/** One gated `consume()` subscription, its messages handed over as they arrive. */
interface Subscription {
  readonly gate: PullGate;
  ended: boolean;
  failure: unknown;
  onNotice: ((n: SourceNotice) => void) | undefined;
  close(expiresMs: number): Promise<void>;
}

async function subscribe(
  consumer: Pick<Consumer, "consume">,
  expiresMs: number,
  capacity: number,
  pull: PullOptions | undefined,
  room: () => number,
  onMessage: (m: JsMsg) => void,
  onEnd: () => void,
): Promise<Subscription | undefined> {
  let sub: Subscription | undefined;
  // The client sends its first pull as the subscription opens, before the gate is in place: it
  // asks for what the loop can start now (a subscription opened again while writes still run
  // must not bring messages that would wait unbeaten), and its refills for up to the capacity.
  const free = room();
  // At least one (the client reads 0 as its default of 100); the capacity if the room is unreadable.
  const first = Number.isFinite(free) ? Math.min(capacity, Math.max(1, Math.floor(free))) : capacity;
  const iter = await consumer.consume({
    max_messages: first,
    // The client's default for the capacity (three quarters), not for the first pull.
    threshold_messages: Math.round(capacity * 0.75) || 1,
    expires: expiresMs,
    // A deleted consumer ends the subscription with an error instead of retrying silently.
    abort_on_missing_resource: true,
    // Delivered as it arrives, in the subscription's own callback: no iterator in between.
    callback: (m: JsMsg) => onMessage(m),
    ...(pull as object),
  } as Parameters<Consumer["consume"]>[0]);
  const gate = gateConsumePulls(iter, room, capacity);
  if (gate === undefined) {
    void iter.close();
    return undefined;
  }
  const ended = (iter as unknown as { closed(): Promise<unknown> }).closed().then(
    (err) => {
      if (sub === undefined) return;
      if (err instanceof Error) sub.failure = err;
      sub.ended = true;
      onEnd();
    },
    (err: unknown) => {
      if (sub === undefined) return;
      sub.failure = err;
      sub.ended = true;
      onEnd();
    },
  );
  sub = {
    gate,
    ended: false,
    failure: undefined,
    onNotice: undefined,
    async close(ms) {
      gate.close();
      // Refills already sent end by themselves (full, or at their expiry); only then may the
      // subscription go without dropping a message on its way.
      const deadline = performance.now() + ms + 1000;
      while (!sub!.ended && gate.outstanding > 0 && performance.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      void iter.close();
      await ended;
    },
  };
  const current = sub;
  watchConsumeNotices(iter, (n) => {
    if (!NOTICES.has(n.type)) return;
    // The client expects heartbeats even while the gate deliberately holds no pull open (the
    // loop can start nothing): a miss is only news when a pull was outstanding.
    if (n.type === "heartbeats_missed" && gate.outstanding === 0) return;
    current.onNotice?.({ type: n.type, description: n.description?.slice(0, 200) });
  });
  return sub;
}
