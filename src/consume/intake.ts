/**
 * The intake of a batch loop: the messages that arrived and wait for their batch, kept alive
 * from their arrival (beats, when heartbeats are on), and the count of every message the loop
 * holds, so a pull never asks for more than the loop can start. The decisions are pure
 * (`intake-plan.ts`); this keeps the state.
 */
import type { JsMsg } from "@nats-io/jetstream";
import type { HoldingBeats } from "../lease/holding-beats.js";
import { deliveryCount, storedStamp, streamSequence } from "../nats/message-access.js";
import { keptPositions } from "./intake-plan.js";

/** A batch taken from the intake: its messages and when each one's lease was last refreshed (epoch ms). */
export interface TakenBatch {
  readonly msgs: JsMsg[];
  readonly refreshedAt: number[];
  /** The messages' stream sequences, read once at arrival; `undefined` when one was unreadable. */
  readonly sequences: number[] | undefined;
  /** With `sequences`: the stored messages' timestamps (NaN: unreadable), which tell a reused sequence apart. */
  readonly stamps: number[] | undefined;
}

/** A waiting message: when it arrived (monotonic ms), its stream sequence (0: unreadable) and stored timestamp (NaN: unreadable). */
interface Waiting {
  readonly m: JsMsg;
  readonly at: number;
  readonly seq: number;
  readonly stamp: number;
}

/** Messages waiting for their batch, and the count of messages held. */
export class Intake {
  readonly #holding: HoldingBeats | undefined;
  #queue: Waiting[] = [];
  #writing = 0;
  #disposed = false;

  /** @param holding - beats for waiting messages (heartbeats on), or none. */
  constructor(holding: HoldingBeats | undefined) {
    this.#holding = holding;
  }

  /** Messages held: waiting for their batch, or in a write that has not settled. */
  get held(): number {
    return this.#queue.length + this.#writing;
  }

  /** Messages waiting for their batch. */
  get waiting(): number {
    return this.#queue.length;
  }

  /**
   * A message arrived (monotonic receive time): it waits, kept alive, for its batch. Its stream
   * sequence and stored timestamp are read now, once (one scan of its subject): the batch and
   * its ACKs use them again.
   */
  readonly arrive = (m: JsMsg, at: number): void => {
    // The loop is over: nothing would write it, and beats would keep it for ever. Left, it is
    // redelivered after AckWait.
    if (this.#disposed) return;
    this.#queue.push({ m, at, seq: streamSequence(m) ?? 0, stamp: storedStamp(m) ?? Number.NaN });
    this.#holding?.hold(m, at);
  };

  /**
   * Takes up to `max` waiting messages as a batch, in arrival order, one delivery per stream
   * sequence (the latest); a dropped older delivery of the same message needs no frame (its
   * frames would reach the same message). Their beats stop: the write's supervision takes over.
   */
  take(max: number): TakenBatch {
    const taken = this.#queue.length <= max ? this.#queue : this.#queue.slice(0, max);
    this.#queue = taken === this.#queue ? [] : this.#queue.slice(max);
    const wallOffset = Date.now() - performance.now();
    const refreshedAt = (e: Waiting): number => wallOffset + (this.#holding?.release(e.m) ?? e.at);
    // The common case, each message once in stream order (a backlog read in turn): all kept,
    // with no table of sequences built. Anything else (a sequence unreadable, repeated or out of
    // order) goes through the table.
    let ascending = true;
    let previous = 0;
    for (let i = 0; i < taken.length && ascending; i++) {
      const seq = taken[i]!.seq;
      ascending = seq > previous;
      previous = seq;
    }
    if (ascending) {
      const msgs = taken.map((e) => e.m);
      const times = taken.map(refreshedAt);
      this.#writing += msgs.length;
      return { msgs, refreshedAt: times, sequences: taken.map((e) => e.seq), stamps: taken.map((e) => e.stamp) };
    }
    const keep = keptPositions(taken.map((e) => ({ streamSequence: e.seq > 0 ? e.seq : undefined, deliveryCount: deliveryCount(e.m) })));
    const msgs: JsMsg[] = [];
    const times: number[] = [];
    const sequences: number[] = [];
    const stamps: number[] = [];
    let readable = true;
    let k = 0;
    for (let i = 0; i < taken.length; i++) {
      const e = taken[i]!;
      const time = refreshedAt(e);
      if (keep[k] !== i) continue;
      k += 1;
      msgs.push(e.m);
      times.push(time);
      sequences.push(e.seq);
      stamps.push(e.stamp);
      readable &&= e.seq > 0;
    }
    this.#writing += msgs.length;
    return { msgs, refreshedAt: times, sequences: readable ? sequences : undefined, stamps: readable ? stamps : undefined };
  }

  /** A batch of `n` messages settled: they are no longer held. */
  settled(n: number): void {
    this.#writing -= n;
  }

  /** Stops every beat (the loop is over); later arrivals are left alone. */
  dispose(): void {
    this.#disposed = true;
    this.#holding?.dispose();
  }
}

