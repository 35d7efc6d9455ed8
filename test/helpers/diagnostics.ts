/**
 * The documented shape of every diagnostics event, checked against the payload types at
 * compile time (a field added to or removed from a type without updating its shape here does
 * not compile), and a log that subscribes to every channel.
 */
import diagnostics from "node:diagnostics_channel";
import { expect } from "vitest";
import {
  DiagnosticsChannels,
  type BatchSettledEvent,
  type EventLoopStallEvent,
  type HeartbeatFailedEvent,
  type HeartbeatLimitEvent,
  type HeartbeatSentEvent,
  type LeaseExpiredEvent,
  type MessageExhaustedEvent,
} from "../../src/index.js";

type KindOf<V> = V extends number ? "number" : V extends boolean ? "boolean" : V extends string ? "string" : never;

/** Every field of `T` with the JavaScript type of its value. */
export type Shape<T> = { readonly [K in keyof T]-?: KindOf<NonNullable<T[K]>> };

/** Keys of `T` that may be absent. */
type OptionalKeys<T> = { [K in keyof T]-?: object extends Pick<T, K> ? K : never }[keyof T];

interface EventSpec<T> {
  readonly shape: Shape<T>;
  readonly optional: readonly OptionalKeys<T>[];
}

const heartbeatSent: EventSpec<HeartbeatSentEvent> = {
  shape: { batchId: "number", batchSize: "number", beat: "number", durationMs: "number", latenessMs: "number", confirmed: "boolean" },
  optional: [],
};
const heartbeatFailed: EventSpec<HeartbeatFailedEvent> = {
  shape: { batchId: "number", batchSize: "number", beat: "number", failedMessages: "number", errorName: "string", final: "boolean" },
  optional: [],
};
const heartbeatLimit: EventSpec<HeartbeatLimitEvent> = {
  shape: { batchId: "number", batchSize: "number", maxHeartbeats: "number", onLimit: "string" },
  optional: [],
};
const leaseExpired: EventSpec<LeaseExpiredEvent> = {
  shape: { batchId: "number", batchSize: "number", overdueMs: "number", beats: "number" },
  optional: [],
};
const batchSettled: EventSpec<BatchSettledEvent> = {
  shape: {
    batchId: "number",
    batchSize: "number",
    outcome: "string",
    acked: "number",
    nacked: "number",
    termed: "number",
    deadLettered: "number",
    left: "number",
    exhausted: "number",
    abandoned: "number",
    heartbeats: "number",
    writeMs: "number",
    errorName: "string",
  },
  optional: ["errorName"],
};

const messageExhausted: EventSpec<MessageExhaustedEvent> = {
  shape: { batchId: "number", batchSize: "number", deliveryCount: "number", maxDeliver: "number", reason: "string", errorName: "string" },
  optional: [],
};

const eventLoopStall: EventSpec<EventLoopStallEvent> = {
  shape: { durationMs: "number", thresholdMs: "number", batchesInFlight: "number", threadedBatches: "number" },
  optional: [],
};

/** The spec of each channel, keyed by channel name. */
export const EVENT_SPECS = {
  [DiagnosticsChannels.HEARTBEAT_SENT]: heartbeatSent,
  [DiagnosticsChannels.HEARTBEAT_FAILED]: heartbeatFailed,
  [DiagnosticsChannels.HEARTBEAT_LIMIT]: heartbeatLimit,
  [DiagnosticsChannels.LEASE_EXPIRED]: leaseExpired,
  [DiagnosticsChannels.BATCH_SETTLED]: batchSettled,
  [DiagnosticsChannels.MESSAGE_EXHAUSTED]: messageExhausted,
  [DiagnosticsChannels.EVENT_LOOP_STALL]: eventLoopStall,
} as const;

export type ChannelName = (typeof DiagnosticsChannels)[keyof typeof DiagnosticsChannels];

interface PayloadOf {
  [DiagnosticsChannels.HEARTBEAT_SENT]: HeartbeatSentEvent;
  [DiagnosticsChannels.HEARTBEAT_FAILED]: HeartbeatFailedEvent;
  [DiagnosticsChannels.HEARTBEAT_LIMIT]: HeartbeatLimitEvent;
  [DiagnosticsChannels.LEASE_EXPIRED]: LeaseExpiredEvent;
  [DiagnosticsChannels.BATCH_SETTLED]: BatchSettledEvent;
  [DiagnosticsChannels.MESSAGE_EXHAUSTED]: MessageExhaustedEvent;
  [DiagnosticsChannels.EVENT_LOOP_STALL]: EventLoopStallEvent;
}

/** Every field name any event may carry. */
export const ALL_EVENT_FIELDS: ReadonlySet<string> = new Set(Object.values(EVENT_SPECS).flatMap((s) => Object.keys(s.shape)));

/**
 * Asserts the payload has exactly the documented fields (optional ones may be absent), each
 * of the documented type, no nested objects, and that it is frozen.
 */
export function expectShape(channel: ChannelName, payload: unknown): void {
  const spec = EVENT_SPECS[channel] as { shape: Record<string, string>; optional: readonly string[] };
  expect(typeof payload, `${channel} payload`).toBe("object");
  expect(payload).not.toBeNull();
  expect(Object.isFrozen(payload), `${channel} payload frozen`).toBe(true);
  const record = payload as Record<string, unknown>;
  const keys = Object.keys(record).sort();
  const required = Object.keys(spec.shape).filter((k) => !spec.optional.includes(k)).sort();
  for (const k of required) expect(keys, `${channel} has ${k}`).toContain(k);
  for (const k of keys) {
    expect(Object.keys(spec.shape), `${channel} field ${k} is documented`).toContain(k);
    expect(typeof record[k], `${channel}.${k}`).toBe(spec.shape[k]);
    if (typeof record[k] === "number") expect(Number.isFinite(record[k]), `${channel}.${k} finite`).toBe(true);
  }
}

/** One published event. */
export interface LoggedEvent {
  readonly channel: ChannelName;
  readonly payload: unknown;
}

/**
 * Subscribes to every channel, or to those named; `waitFor` resolves when a matching event
 * arrives (no sleeping). Name the channels a test reads when a subscriber changes what the
 * library does: a `heartbeat:sent` subscriber makes the thread's watch look at every batch
 * each interval, to publish their rounds.
 */
export class EventLog implements Disposable {
  readonly events: LoggedEvent[] = [];
  readonly #waiters = new Set<() => void>();
  readonly #handlers = new Map<ChannelName, (message: unknown) => void>();

  constructor(channels: readonly ChannelName[] = Object.values(DiagnosticsChannels)) {
    for (const channel of channels) {
      const fn = (payload: unknown): void => {
        this.events.push({ channel, payload });
        for (const w of [...this.#waiters]) w();
      };
      this.#handlers.set(channel, fn);
      diagnostics.subscribe(channel, fn);
    }
  }

  /** Forgets what was logged. */
  clear(): void {
    this.events.length = 0;
  }

  /** The payloads of one channel, typed, in publication order. */
  of<C extends ChannelName>(channel: C): PayloadOf[C][] {
    return this.events.filter((e) => e.channel === channel).map((e) => e.payload as PayloadOf[C]);
  }

  /** The channel names in publication order. */
  channels(): ChannelName[] {
    return this.events.map((e) => e.channel);
  }

  /** Resolves once `predicate` holds; rejects after `timeoutMs` with what was seen. */
  async waitFor(predicate: (log: EventLog) => boolean, what: string, timeoutMs = 15_000): Promise<void> {
    if (predicate(this)) return;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#waiters.delete(check);
        reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}; saw ${this.channels().join(", ")}`));
      }, timeoutMs);
      const check = (): void => {
        if (!predicate(this)) return;
        clearTimeout(timer);
        this.#waiters.delete(check);
        resolve();
      };
      this.#waiters.add(check);
    });
  }

  /** Unsubscribes from every channel. */
  dispose(): void {
    for (const [channel, fn] of this.#handlers) diagnostics.unsubscribe(channel, fn);
    this.#handlers.clear();
  }

  [Symbol.dispose](): void {
    this.dispose();
  }
}
