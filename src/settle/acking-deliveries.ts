/**
 * The messages a loop committed whose ACK is still on its way: a confirmed ACK not yet answered
 * (asked again through a leader election or a reconnect), or an ACK held while the client is
 * between connections. A new leader, or AckWait passing meanwhile, can deliver such a message
 * again; the loop then acks that delivery instead of writing the message a second time. Keyed
 * by stream sequence: a loop reads one consumer of one stream, and an ACK settles a message
 * whatever delivery it names.
 */
import type { JsMsg } from "@nats-io/jetstream";
import { streamSequence } from "../nats/message-access.js";

export class AckingDeliveries {
  /**
   * The stream sequences of each batch of ACKs on their way (a loop has a few at most): plain
   * arrays, scanned — a batch's hash set cost more to build than all its lookups.
   */
  readonly #batches = new Set<readonly number[]>();
  /**
   * Stream sequence → until when (monotonic ms) a late ACK still counts as on its way: one that
   * was held over a disconnect or asked again can be overtaken by a delivery the server made
   * before it arrived (a pull sent at the reconnect, a new leader's first redeliveries).
   */
  readonly #late = new Map<number, number>();

  /** ACKs of `msgs` leave now; returns what to pass to `end` once each is answered or given up. */
  begin(msgs: readonly JsMsg[]): readonly number[] {
    const seqs: number[] = [];
    for (let i = 0; i < msgs.length; i++) {
      const seq = streamSequence(msgs[i]!);
      if (seq !== undefined) seqs.push(seq);
    }
    if (seqs.length > 0) this.#batches.add(seqs);
    return seqs;
  }

  /**
   * The ACKs of `seqs` were answered or given up. `graceMs`: how long they still count as on
   * their way — after an ACK that was held or asked again ({@link LATE_GRACE_MS}), or one the
   * server never confirmed ({@link UNCONFIRMED_GRACE_MS}: its message comes back once a new
   * leader takes over, which can take seconds).
   */
  end(seqs: readonly number[], graceMs = 0): void {
    this.#batches.delete(seqs);
    if (graceMs <= 0 && this.#late.size === 0) return;
    const now = performance.now();
    this.#prune(now);
    if (graceMs <= 0) return;
    for (const seq of seqs) {
      // Re-inserted at the end: the map is pruned from its start, oldest first.
      this.#late.delete(seq);
      this.#late.set(seq, now + graceMs);
    }
  }

  /** Whether `m` is a message whose ACK is on its way (another delivery of a committed message). */
  has(m: JsMsg): boolean {
    if (this.#batches.size === 0 && this.#late.size === 0) return false;
    const seq = streamSequence(m);
    if (seq === undefined) return false;
    for (const batch of this.#batches) if (batch.includes(seq)) return true;
    const until = this.#late.get(seq);
    return until !== undefined && until > performance.now();
  }

  /** Sequences counted as on their way (one per batch that holds it). */
  get size(): number {
    let n = this.#late.size;
    for (const batch of this.#batches) n += batch.length;
    return n;
  }

  /** Drops what expired from the start (entries after a longer grace wait at most that long). */
  #prune(now: number): void {
    for (const [seq, until] of this.#late) {
      if (until > now) break;
      this.#late.delete(seq);
    }
  }
}

/** How long an ACK that was held or asked again counts as on its way after it left. */
export const LATE_GRACE_MS = 5_000;
/** How long an ACK the server never confirmed counts as on its way (as long as an election is bridged). */
export const UNCONFIRMED_GRACE_MS = 60_000;
