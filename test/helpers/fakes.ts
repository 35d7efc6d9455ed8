/** Fakes for pure-logic unit tests. Claims about JetStream are proven in test/integration. */
import type { JsMsg } from "@nats-io/jetstream";
import type { Clock } from "../../src/lease/scheduler.js";
import type { ConfirmingConnection } from "../../src/nats/ack-inbox.js";

export interface FakeMsg extends JsMsg {
  readonly calls: { working: number; ack: number; nak: Array<number | undefined>; term: Array<string | undefined> };
  /** Times (Date.now()) of every working() call. */
  readonly beats: number[];
  didAck: boolean;
  reply: string;
  failWorking: unknown;
}

let seq = 0;

/**
 * A message that records what the library does to it. Its connection answers a consumer-info
 * request with `maxDeliver` (default -1, the server's default: unlimited), as a server would,
 * or refuses it (`"unreadable"`); every other request gets no responder.
 */
export function fakeMsg(options: { deliveryCount?: number; stream?: string; consumer?: string; seq?: number; maxDeliver?: number | "unreadable"; stampNanos?: bigint } = {}): FakeMsg {
  seq += 1;
  const streamSequence = options.seq ?? seq;
  const deliveryCount = options.deliveryCount ?? 1;
  const stream = options.stream ?? "S";
  const consumer = options.consumer ?? "C";
  // The stored message's timestamp: one stored message, one timestamp, whatever its delivery.
  const stampNanos = options.stampNanos ?? 0n;
  const m = {
    calls: { working: 0, ack: 0, nak: [] as Array<number | undefined>, term: [] as Array<string | undefined> },
    beats: [] as number[],
    didAck: false,
    failWorking: undefined as unknown,
    reply: `$JS.ACK.${stream}.${consumer}.${deliveryCount}.${streamSequence}.${streamSequence}.${stampNanos}.0`,
    info: { stream, consumer, deliveryCount, streamSequence, deliverySequence: streamSequence, redelivered: deliveryCount > 1, pending: 0, timestampNanos: Number(stampNanos), domain: "", account_hash: "" },
    seq: streamSequence,
    redelivered: deliveryCount > 1,
    headers: undefined,
    data: new Uint8Array(),
    subject: "s",
    sid: 1,
    msg: { publisher: { request: fakeRequest(options.maxDeliver ?? -1) } },
    time: new Date(0),
    timestamp: new Date(0).toISOString(),
    timestampNanos: stampNanos,
    working() {
      if (m.failWorking) throw m.failWorking;
      if (m.didAck) return;
      m.calls.working += 1;
      m.beats.push(Date.now());
    },
    ack() {
      if (m.didAck) return;
      m.didAck = true;
      m.calls.ack += 1;
    },
    nak(ms?: number) {
      if (m.didAck) return;
      m.didAck = true;
      m.calls.nak.push(ms);
    },
    term(reason?: string) {
      if (m.didAck) return;
      m.didAck = true;
      m.calls.term.push(reason);
    },
    async ackAck() {
      m.ack();
      return true;
    },
    next() {},
    json<T>() {
      return JSON.parse("null") as T;
    },
    string() {
      return "";
    },
  };
  return m as unknown as FakeMsg;
}

/** A connection's request(): consumer info with `maxDeliver`, or no responder. */
function fakeRequest(maxDeliver: number | "unreadable"): (subject: string) => Promise<{ data: Uint8Array }> {
  return async (subject) => {
    if (maxDeliver === "unreadable" || !subject.includes(".CONSUMER.INFO.")) throw Object.assign(new Error("no responders"), { name: "NoRespondersError" });
    return { data: new TextEncoder().encode(JSON.stringify({ config: { max_deliver: maxDeliver } })) };
  };
}

/** A clock the test moves by hand; timers fire only in `advance`. */
export class ManualClock implements Clock {
  #now = 1000;
  #timers = new Map<number, { at: number; fn: () => void }>();
  #id = 0;

  now(): number {
    return this.#now;
  }

  setTimer(fn: () => void, ms: number): unknown {
    const id = ++this.#id;
    this.#timers.set(id, { at: this.#now + ms, fn });
    return id;
  }

  clearTimer(handle: unknown): void {
    this.#timers.delete(handle as number);
  }

  get pendingTimers(): number {
    return this.#timers.size;
  }

  /** Moves time forward, firing due timers in order (like a free event loop). */
  advance(ms: number): void {
    const target = this.#now + ms;
    for (;;) {
      let next: [number, { at: number; fn: () => void }] | undefined;
      for (const e of this.#timers) if (e[1].at <= target && (!next || e[1].at < next[1].at)) next = e;
      if (!next) break;
      this.#timers.delete(next[0]);
      this.#now = Math.max(this.#now, next[1].at);
      next[1].fn();
    }
    this.#now = target;
  }

  /** Moves time forward and fires nothing: a synchronous work blocking the loop, seen from inside it. */
  jump(ms: number): void {
    this.#now += ms;
  }

  /** Jumps forward without firing anything (a blocked event loop), then fires what is due once. */
  block(ms: number): void {
    this.#now += ms;
    const due = [...this.#timers].filter(([, t]) => t.at <= this.#now);
    for (const [id, t] of due) {
      this.#timers.delete(id);
      t.fn();
    }
  }
}

/** A promise the test resolves or rejects by hand. */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (v: T) => void; reject: (e: unknown) => void } {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** One frame a {@link fakeConfirmingConnection} was handed. */
export interface FakeFrame {
  readonly subject: string;
  readonly reply: string | undefined;
  /** `performance.now()` when it was handed over. */
  readonly at: number;
}

/**
 * A connection for confirmed ACKs that records every frame and answers a frame asking for a
 * reply by `answer`: a status code (503: nobody holds the consumer), 0 (confirmed), or
 * `undefined` (no answer).
 */
export function fakeConfirmingConnection(answer: (subject: string, reply: string) => number | undefined): ConfirmingConnection & { readonly frames: FakeFrame[] } {
  const frames: FakeFrame[] = [];
  let deliver: ((err: unknown, msg: { subject: string; headers?: { code?: number } }) => void) | undefined;
  return {
    frames,
    subscribe(_subject, options) {
      deliver = options.callback;
      return { unsubscribe() {} };
    },
    publish(subject, _payload, options) {
      const reply = options?.reply;
      frames.push({ subject, reply, at: performance.now() });
      if (reply === undefined) return;
      const code = answer(subject, reply);
      if (code === undefined) return;
      if (deliver === undefined) throw new Error("a frame asked for a reply before the inbox subscribed");
      const to = deliver;
      queueMicrotask(() => to(null, code === 0 ? { subject: reply } : { subject: reply, headers: { code } }));
    },
    isClosed: () => false,
  };
}
