/**
 * The messages a loop committed whose ACK is still on its way: a confirmed ACK not yet answered
 * (asked again through a leader election or a reconnect), or an ACK held while the client is
 * between connections. A new leader, or AckWait passing meanwhile, can deliver such a message
 * again; the loop then acks that delivery instead of writing the message a second time. Keyed
 * by stream sequence: a loop reads one consumer of one stream, and an ACK settles a message
 * whatever delivery it names.
 *
 * ACKs the server confirmed (in time or late) are kept too, for redeliveries only: a consumer leader
 * answers an ACK before its followers have it, so when its server dies just after, the next
 * leader still holds the message as pending and redelivers it.
 */
import type { JsMsg } from "@nats-io/jetstream";
import { deliveryCount, streamSequence } from "../nats/message-access.js";

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
  /**
   * Batches whose ACKs the server confirmed, oldest first, each until when it is kept: a
   * queue of the batches' own arrays (nothing built per message), read only for redeliveries.
   */
  readonly #confirmed: Array<{ readonly seqs: readonly number[]; readonly min: number; readonly max: number; readonly until: number }> = [];
  #confirmedHead = 0;
  #confirmedCount = 0;

  /**
   * ACKs of `msgs` leave now; returns what to pass to `end` once each is answered or given up.
   * `sequences`: their stream sequences, when the caller read them already (kept as they are:
   * nobody changes a batch's array).
   */
  begin(msgs: readonly JsMsg[], sequences?: readonly number[]): readonly number[] {
    if (sequences !== undefined && sequences.length === msgs.length) {
      if (sequences.length > 0) this.#batches.add(sequences);
      return sequences;
    }
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
   * leader takes over, which can take seconds). `confirmed`: the server answered every one of
   * them, in time or late; such a batch is kept for redeliveries as well, since a leader that
   * answered late can die before its followers have the ACK just as one that answered at once.
   */
  end(seqs: readonly number[], graceMs = 0, confirmed = graceMs <= 0): void {
    this.#batches.delete(seqs);
    const now = performance.now();
    if (confirmed) this.#keepConfirmed(seqs, now);
    if (graceMs <= 0) {
      if (this.#late.size > 0) this.#prune(now);
      return;
    }
    this.#prune(now);
    for (const seq of seqs) {
      // Re-inserted at the end: the map is pruned from its start, oldest first.
      this.#late.delete(seq);
      this.#late.set(seq, now + graceMs);
    }
  }

  /** Whether `m` is a message whose ACK is on its way (another delivery of a committed message). */
  has(m: JsMsg): boolean {
    if (this.#batches.size > 0 || this.#late.size > 0) {
      const seq = streamSequence(m);
      if (seq === undefined) return false;
      for (const batch of this.#batches) if (batch.includes(seq)) return true;
      const until = this.#late.get(seq);
      if (until !== undefined && until > performance.now()) return true;
    }
    // Confirmed ACKs matter only for a redelivery: a first delivery was never acked.
    if (this.#confirmedCount === 0) return false;
    const count = deliveryCount(m);
    if (count === undefined || count < 2) return false;
    const seq = streamSequence(m);
    if (seq === undefined) return false;
    const now = performance.now();
    for (let i = this.#confirmed.length - 1; i >= this.#confirmedHead; i--) {
      const kept = this.#confirmed[i]!;
      if (kept.until <= now) break;
      // The bounds first: a full queue is thousands of batches, most of them far from `seq`.
      if (seq >= kept.min && seq <= kept.max && kept.seqs.includes(seq)) return true;
    }
    return false;
  }

  /** Sequences counted as on their way (one per batch that holds it). */
  get size(): number {
    let n = this.#late.size;
    for (const batch of this.#batches) n += batch.length;
    return n;
  }

  /** Keeps a confirmed batch; drops the oldest past their time or beyond the cap. */
  #keepConfirmed(seqs: readonly number[], now: number): void {
    if (seqs.length > 0) {
      let min = seqs[0]!;
      let max = min;
      for (let i = 1; i < seqs.length; i++) {
        const s = seqs[i]!;
        if (s < min) min = s;
        else if (s > max) max = s;
      }
      this.#confirmed.push({ seqs, min, max, until: now + CONFIRMED_KEPT_MS });
      this.#confirmedCount += seqs.length;
    }
    const q = this.#confirmed;
    while (this.#confirmedHead < q.length) {
      const oldest = q[this.#confirmedHead]!;
      if (oldest.until > now && this.#confirmedCount <= CONFIRMED_KEPT_MAX) break;
      this.#confirmedCount -= oldest.seqs.length;
      this.#confirmedHead += 1;
    }
    // Compacted now and then, not per batch.
    if (this.#confirmedHead > 1024 && this.#confirmedHead * 2 > q.length) {
      q.splice(0, this.#confirmedHead);
      this.#confirmedHead = 0;
    }
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
/**
 * How long an ACK the server confirmed is kept for redeliveries: a new leader redelivers
 * once it is elected and the message's AckWait has passed, as with an unconfirmed one.
 */
export const CONFIRMED_KEPT_MS = 60_000;
/** At most this many confirmed sequences are kept (about half a megabyte): the oldest go first. */
export const CONFIRMED_KEPT_MAX = 65_536;
