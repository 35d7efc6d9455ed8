/**
 * One supervised batch as the main thread sees it on the heartbeat thread: counters read from
 * shared memory, and the calls that stop beats before a final frame. Every call is synchronous
 * and works while nothing else runs on the main thread, except the flush, which waits for the
 * server's answer.
 */
import { HeartbeatThreadError } from "../errors.js";
import {
  addProgress,
  lastBeatAt,
  readCount,
  releaseDelivery,
  setUntil,
  SLOT,
  slotState,
  stopSlot,
  type Slot,
  type SlotState,
} from "./heartbeat-thread-protocol.js";

/** What a lease needs from its thread (kept to an interface: the thread imports this file). */
export interface ThreadLink {
  /** Resolves once the server answered a PING sent after every earlier `+WPI` of the thread. */
  flush(timeoutMs: number): Promise<void>;
  /** Wakes the worker (progress arrived for a slot that waits for it). */
  wake(): void;
  /** The lease needs no more beats: the thread may close once nothing else uses it. */
  done(): void;
}

/** The default bound of {@link ThreadLease.stopAndFlush}. */
export const DEFAULT_FLUSH_TIMEOUT_MS = 5000;

/**
 * The heartbeat thread's lease on one batch: the thread sends `+WPI` to each of its deliveries
 * every `intervalMs` from `firstDueAt`, at most `maxHeartbeats` rounds, until it is stopped.
 *
 * Before a final frame: `release(i)` or `stop()` before an ACK or a Term (a `+WPI` that reaches
 * the server after those is ignored); `await stopAndFlush()` before a NAK with a delay (a `+WPI`
 * after it would wipe the delay).
 *
 * @example
 * ```ts
 * const lease = thread.register(replies, { intervalMs: 5000, maxHeartbeats: 12 });
 * lease.release(0);
 * msgs[0].ack(); // this one is done; the others are still beaten
 * await lease.stopAndFlush();
 * msgs[1].nak(30_000);
 * ```
 */
export class ThreadLease {
  /** Deliveries in the batch. */
  readonly size: number;
  readonly #slot: Slot;
  readonly #link: ThreadLink;
  #done = false;

  /** @internal Made by `HeartbeatThread.register`. */
  constructor(slot: Slot, link: ThreadLink) {
    this.#slot = slot;
    this.#link = link;
    this.size = slot.count;
  }

  /** Rounds the thread sent so far (each counts against `maxHeartbeats`). */
  get beats(): number {
    return readCount(this.#slot, SLOT.BEATS);
  }

  /**
   * Epoch milliseconds (`performance.timeOrigin + performance.now()`) of the last round the thread
   * handed to its connection while it was up (confirmed beats: the last round answered in full);
   * `undefined` before the first. The server's deadline for the batch counts from about then.
   */
  get lastBeatAt(): number | undefined {
    return lastBeatAt(this.#slot);
  }

  /** Rounds that were due but could not be sent (connection down), or were not confirmed. */
  get failures(): number {
    return readCount(this.#slot, SLOT.FAILURES);
  }

  /** {@link failures} by kind, outages and the others in one word (`SLOT.FAILED_KINDS`, `OTHER_FAILURE`). */
  get failedKinds(): number {
    return readCount(this.#slot, SLOT.FAILED_KINDS);
  }

  /** Confirmed beats: rounds whose every request got the server's reply. */
  get confirmed(): number {
    return readCount(this.#slot, SLOT.CONFIRMED);
  }

  /** `active`, `stopped` (by this side) or `limit` (the thread sent `maxHeartbeats` rounds). */
  get state(): SlotState {
    return slotState(this.#slot);
  }

  /** One sign of progress, for `requireProgress`: the next due beat may go (at once if it waits). */
  progress(): void {
    if (addProgress(this.#slot)) this.#link.wake();
  }

  /**
   * Delivery `index` (its place in the reply subjects) gets no more beats: it was acked or
   * termed. Returns once the thread publishes nothing more for it.
   */
  release(index: number): void {
    if (!Number.isInteger(index) || index < 0 || index >= this.size) {
      throw new RangeError(`index must be an integer in 0 ..= ${this.size - 1} (a delivery of this batch), got ${String(index)}`);
    }
    releaseDelivery(this.#slot, index);
  }

  /** No beat at or after `epochMs` (the lease's bound; may move either way). */
  beatUntil(epochMs: number): void {
    if (typeof epochMs !== "number" || Number.isNaN(epochMs)) throw new TypeError(`epochMs must be epoch milliseconds, got ${String(epochMs)}`);
    setUntil(this.#slot, epochMs);
  }

  /**
   * No more beats for this batch, without waiting for the network: when it returns, the thread
   * publishes nothing more for it (a round being published finishes first: microseconds). Use
   * before an ACK or a Term. Idempotent.
   */
  stop(): void {
    this.#stop();
  }

  /**
   * No more beats, and every `+WPI` the thread already published reached the server (the
   * thread's connection got a PONG after them). Use before a NAK with a delay. A batch that was
   * never beaten needs no round trip.
   *
   * @throws HeartbeatThreadError `not_flushed` when the server did not answer within
   *   `timeoutMs` (the thread's connection is down), `closed` when the thread is gone.
   */
  async stopAndFlush(timeoutMs: number = DEFAULT_FLUSH_TIMEOUT_MS): Promise<void> {
    const quiet = this.#stop();
    if (!quiet) throw new HeartbeatThreadError("not_flushed", "the heartbeat thread did not finish its round in time");
    if (readCount(this.#slot, SLOT.BEATS) === 0) return;
    await this.#link.flush(timeoutMs);
  }

  #stop(): boolean {
    const quiet = stopSlot(this.#slot);
    if (!this.#done) {
      this.#done = true;
      this.#link.done();
    }
    return quiet;
  }
}
