/**
 * The scenarios' sink: an in-memory, idempotent store keyed by stream and sequence that
 * records everything that reached it — every delivery a write saw, every commit attempt with
 * its time, every failure the write reported — so the invariant checker can compare it with
 * the ack frames the server received. Times are `performance.now()` in this process, the same
 * clock as the ack spy's.
 */
import type { JsMsg } from "@nats-io/jetstream";
import { DeadLetterHeaders, type DeadLetterTarget, type MsgHdrsLike } from "../../src/index.js";

/** One delivery of one message: stream, stream sequence and delivery count. */
export interface DeliveryKey {
  readonly stream: string;
  readonly seq: number;
  readonly dc: number;
}

/** The key of a message as delivered. */
export function keyOf(m: JsMsg): DeliveryKey {
  return { stream: m.info.stream, seq: m.seq, dc: m.info.deliveryCount };
}

/** Something the sink saw, with who saw it and when. */
export interface Recorded extends DeliveryKey {
  readonly worker: string;
  /** `performance.now()` when it was recorded. */
  readonly at: number;
}

/** A commit attempt; `stored` is false when the key was already committed (an idempotent repeat). */
export interface CommitAttempt extends Recorded {
  readonly stored: boolean;
}

/**
 * Why a delivery did not commit, recorded by the write (or the scenario) when it happens, so
 * a later redelivery of the same sequence has a cause on file.
 */
export type FailureKind = "temporary" | "permanent" | "lease_expired" | "aborted" | "killed" | "leader_change" | "disconnected";

export interface FailureRecord extends Recorded {
  readonly kind: FailureKind;
  readonly note?: string;
}

export class IdempotentSink {
  readonly deliveries: Recorded[] = [];
  readonly attempts: CommitAttempt[] = [];
  readonly failures: FailureRecord[] = [];
  readonly #stored = new Map<string, CommitAttempt>();

  static key(stream: string, seq: number): string {
    return `${stream}:${seq}`;
  }

  /** A write started on this delivery. */
  deliver(key: DeliveryKey, worker: string): void {
    this.deliveries.push({ ...plain(key), worker, at: performance.now() });
  }

  /** A durable write of this delivery; idempotent: a repeat is recorded but stored once. Returns whether it was new. */
  commit(key: DeliveryKey, worker: string): boolean {
    const k = IdempotentSink.key(key.stream, key.seq);
    const stored = !this.#stored.has(k);
    const attempt: CommitAttempt = { ...plain(key), worker, at: performance.now(), stored };
    this.attempts.push(attempt);
    if (stored) this.#stored.set(k, attempt);
    return stored;
  }

  /** Records why this delivery did not commit. */
  fail(key: DeliveryKey, worker: string, kind: FailureKind, note?: string): void {
    this.failures.push({ ...plain(key), worker, at: performance.now(), kind, ...(note !== undefined ? { note } : {}) });
  }

  /** The stored commit of a sequence, if any. */
  committed(stream: string, seq: number): CommitAttempt | undefined {
    return this.#stored.get(IdempotentSink.key(stream, seq));
  }

  /** Committed sequences of a stream. */
  committedSequences(stream: string): number[] {
    return [...this.#stored.values()].filter((a) => a.stream === stream).map((a) => a.seq).sort((a, b) => a - b);
  }

  get size(): number {
    return this.#stored.size;
  }
}

/** A dead-letter publish the stream confirmed, keyed by the original's stream, sequence and delivery. */
export interface DeadLetterRecord extends DeliveryKey {
  /** `performance.now()` when the stream's publish ack came back. */
  readonly at: number;
}

/**
 * Records the dead-letter publishes JetStream confirmed. `target(js, subject)` wraps a real
 * JetStream client: the library publishes through it, and the record is written after the
 * stream's ack and before the library may acknowledge the original.
 */
export class DeadLetterLedger {
  readonly records: DeadLetterRecord[] = [];

  target(js: DeadLetterTarget["js"], subject: string): DeadLetterTarget {
    return {
      subject,
      js: {
        publish: async (subj, payload, options) => {
          const ack = await js.publish(subj, payload, options);
          const key = keyFromHeaders(options?.headers);
          if (key) this.records.push({ ...key, at: performance.now() });
          return ack;
        },
      },
    };
  }

  /** The first confirmed dead-letter copy of a sequence, if any. */
  find(stream: string, seq: number): DeadLetterRecord | undefined {
    return this.records.find((r) => r.stream === stream && r.seq === seq);
  }

  /** Dead-lettered sequences of a stream (each once). */
  sequences(stream: string): number[] {
    return [...new Set(this.records.filter((r) => r.stream === stream).map((r) => r.seq))].sort((a, b) => a - b);
  }
}

function keyFromHeaders(h: MsgHdrsLike | undefined): DeliveryKey | undefined {
  const stream = h?.get(DeadLetterHeaders.STREAM);
  const seq = Number(h?.get(DeadLetterHeaders.STREAM_SEQUENCE));
  const dc = Number(h?.get(DeadLetterHeaders.DELIVERY_COUNT));
  return stream && Number.isInteger(seq) && Number.isInteger(dc) ? { stream, seq, dc } : undefined;
}

function plain(k: DeliveryKey): DeliveryKey {
  return { stream: k.stream, seq: k.seq, dc: k.dc };
}
