/**
 * A supervised batch whose beats come from the heartbeat thread. The main thread keeps the
 * lease's books (metrics, events, the deadline, the limit) from what the thread wrote into
 * shared memory, whenever it runs; while it is blocked the thread goes on beating.
 */
import type { JsMsg } from "@nats-io/jetstream";
import { HeartbeatThreadError } from "../errors.js";
import { isSettled, replySubject } from "../nats/message-access.js";
import { HeartbeatThread, threadControl } from "./heartbeat-thread.js";
import type { ThreadLease } from "./heartbeat-thread-lease.js";
import type { CheckedThreadConnection } from "./heartbeat-thread-options.js";
import { CONTROL, failedSince, nowEpochMs, type ControlBlock } from "./heartbeat-thread-protocol.js";

/** How long the flush before a final frame may take at most (the thread's connection is slow or down). */
const MAX_QUIET_MS = 2000;
const MIN_QUIET_MS = 1000;

/** What the thread did since the last reading. */
export interface ThreadReading {
  /** Rounds accepted since the last reading (handed to the thread's connection, or confirmed). */
  readonly successes: number;
  /** Rounds that failed since the last reading (connection down, or not confirmed). */
  readonly failures: number;
  /** Rounds sent in all (they count against `maxHeartbeats`). */
  readonly beats: number;
  /** How long ago (ms) the last accepted round left, `undefined` before the first. */
  readonly lastBeatAgoMs: number | undefined;
  /** The thread sent `maxHeartbeats` rounds. */
  readonly limit: boolean;
  /**
   * Of `failures`, the rounds that failed for an outage of the thread's connection (down when
   * due, or lost while their replies were awaited); the others were not answered in time.
   */
  readonly outages: number;
}

/** What {@link ThreadBeats.readRounds} fills in. */
export interface RoundCounts {
  successes: number;
  failures: number;
  outages: number;
}

/** One batch on the heartbeat thread, seen from the main thread. */
export class ThreadBeats {
  readonly #handle: HeartbeatThread;
  readonly #lease: ThreadLease;
  readonly #confirm: boolean;
  readonly #intervalMs: number;
  #seenConfirmed = 0;
  /** `SLOT.FAILED_KINDS` at the last reading. */
  #seenKinds = 0;
  #released = false;
  /** Scratch for {@link ThreadBeats.read}'s counts. */
  readonly #rounds: RoundCounts = { successes: 0, failures: 0, outages: 0 };
  /** Deliveries the work settled itself, released on the thread. */
  readonly #settled: Uint8Array;

  /** Its place in the order the thread's slots were posted (the thread counts those it scheduled). */
  readonly registration: number;
  /** Epoch ms of its first round. */
  readonly firstDueAt: number;

  private constructor(handle: HeartbeatThread, lease: ThreadLease, confirm: boolean, intervalMs: number, firstDueAt: number) {
    this.#handle = handle;
    this.#lease = lease;
    this.registration = Atomics.load(threadControl(handle).ints, CONTROL.POSTED);
    this.firstDueAt = firstDueAt;
    this.#confirm = confirm;
    this.#intervalMs = intervalMs;
    this.#settled = new Uint8Array(lease.size);
  }

  /**
   * Puts `msgs` on the thread, first round `firstDueInMs` from now. Returns the error instead
   * when the thread cannot take them (it failed, or a message has no reply subject): the
   * caller then beats from the main thread.
   */
  static start(
    msgs: readonly JsMsg[],
    connection: CheckedThreadConnection,
    o: { readonly intervalMs: number; readonly maxHeartbeats: number; readonly firstDueInMs: number; readonly requireProgress: boolean; readonly confirmTimeoutMs: number | undefined },
  ): ThreadBeats | HeartbeatThreadError {
    const replies: string[] = [];
    for (const m of msgs) {
      const r = replySubject(m);
      if (r === undefined) return new HeartbeatThreadError("closed", "a message has no reply subject: the heartbeat thread cannot beat it");
      replies.push(r);
    }
    let handle: HeartbeatThread | undefined;
    try {
      handle = HeartbeatThread.acquire(connection);
      const firstDueAt = nowEpochMs() + Math.max(0, o.firstDueInMs);
      const lease = handle.register(replies, {
        intervalMs: o.intervalMs,
        maxHeartbeats: o.maxHeartbeats,
        firstDueAt,
        requireProgress: o.requireProgress,
        ...(o.confirmTimeoutMs !== undefined ? { confirm: { timeoutMs: o.confirmTimeoutMs } } : {}),
      });
      return new ThreadBeats(handle, lease, o.confirmTimeoutMs !== undefined, o.intervalMs, firstDueAt);
    } catch (err) {
      handle?.release();
      return err instanceof HeartbeatThreadError ? err : new HeartbeatThreadError("closed", "the heartbeat thread could not take the batch", { cause: err });
    }
  }

  /** The thread's shared memory: the same block for every batch on one thread (the watch's key). */
  get control(): ControlBlock {
    return threadControl(this.#handle);
  }

  /** Rounds the thread sent so far, read now (the books are not brought up to date). */
  get beatsNow(): number {
    return this.#lease.beats;
  }

  /** How long ago (ms) the last accepted round left, read now; `undefined` before the first. */
  lastBeatAgoMs(): number | undefined {
    const last = this.#lease.lastBeatAt;
    return last === undefined ? undefined : Math.max(0, nowEpochMs() - last);
  }

  /** Whether the thread's connection is up now. */
  get connected(): boolean {
    return this.#handle.state === "connected";
  }

  /** Whether the thread is gone for good (its connection failed or closed): it beats no more. */
  get closed(): boolean {
    return this.#handle.state === "closed";
  }

  /** What the thread did since the last call. */
  read(): ThreadReading {
    const beats = this.readRounds(this.#rounds);
    const last = this.#lease.lastBeatAt;
    return {
      successes: this.#rounds.successes,
      failures: this.#rounds.failures,
      beats,
      lastBeatAgoMs: last === undefined ? undefined : Math.max(0, nowEpochMs() - last),
      limit: this.#lease.state === "limit",
      outages: this.#rounds.outages,
    };
  }

  /**
   * The counting half of {@link ThreadBeats.read}: the rounds accepted (confirmed, when the batch
   * confirms) and failed since the last reading, and how many of those failed for an outage,
   * into `into`, with nothing else read or allocated (the watch calls it per batch per look);
   * returns the rounds sent in all.
   */
  readRounds(into: RoundCounts): number {
    const lease = this.#lease;
    const beats = lease.beats;
    // One word holds the failed rounds of both kinds, so each one read comes with its kind.
    const kinds = lease.failedKinds;
    const confirmed = this.#confirm ? lease.confirmed : beats;
    into.successes = Math.max(0, confirmed - this.#seenConfirmed);
    failedSince(this.#seenKinds, kinds, into);
    this.#seenConfirmed = confirmed;
    this.#seenKinds = kinds;
    return beats;
  }

  /** One sign of progress, for `requireProgress`. */
  progress(): void {
    this.#lease.progress();
  }

  /**
   * Releases on the thread every delivery of `msgs` the work settled since the last call (the
   * thread cannot see a settle), and in `books`; true when there was one.
   */
  releaseSettled(msgs: readonly JsMsg[], books: { release(i: number): void }): boolean {
    const settled = this.#settled;
    let any = false;
    for (let i = 0; i < msgs.length; i++) {
      if (settled[i] === 0 && isSettled(msgs[i]!)) {
        settled[i] = 1;
        this.#lease.release(i);
        books.release(i);
        any = true;
      }
    }
    return any;
  }

  /** Delivery `i` was settled by the work: no more beats for it. */
  release(i: number): void {
    this.#lease.release(i);
  }

  /** No more beats; when it returns, the thread publishes nothing more for the batch. */
  stop(): void {
    this.#lease.stop();
  }

  /**
   * Stops the beats and waits until every `+WPI` the thread sent reached the server, so a final
   * frame the host sends next (a NAK with a delay) cannot be overtaken by one; then gives the
   * thread back. Bounded; never throws: resolves the error when the server did not answer in
   * time (a `+WPI` may still be on its way), else `undefined`. A connection that is down has
   * dropped what it held.
   */
  async quiet(): Promise<unknown> {
    if (this.#released) return undefined;
    this.#released = true;
    try {
      // At least a second, whatever the interval: a +WPI still on a slow link when the wait
      // gives up reaches the server after the NAK that follows and cuts its delay to AckWait.
      if (this.#lease.beats > 0 && this.connected) await this.#lease.stopAndFlush(Math.min(MAX_QUIET_MS, Math.max(MIN_QUIET_MS, this.#intervalMs)));
      else this.#lease.stop();
      return undefined;
    } catch (err) {
      // Not answered in time: the thread's connection is slow or gone; nothing more leaves.
      return err ?? new HeartbeatThreadError("not_flushed", "the heartbeat thread's beats were not confirmed");
    } finally {
      this.#handle.release();
    }
  }
}
