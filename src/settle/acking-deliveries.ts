/**
 * The messages a loop committed whose ACK is still on its way: a confirmed ACK not yet answered
 * (asked again through a leader election or a reconnect), or an ACK held while the client is
 * between connections. A new leader, or AckWait passing meanwhile, can deliver such a message
 * again; the loop then acks that delivery instead of writing the message a second time. Keyed
 * by stream sequence (a loop reads one consumer of one stream, and an ACK settles a message
 * whatever delivery it names) and told apart by the stored message's timestamp: a stream
 * deleted and made again under the same name under a running loop reuses the sequences, and a
 * new message there must be written, never acked as the old one.
 *
 * ACKs the server confirmed (in time or late) are kept too, for deliveries made again: a consumer
 * leader answers an ACK before its followers have it, so when its server dies just after, the
 * next leader still holds the message as pending and redelivers it — or, having lost the
 * deliveries too, delivers it again as a first delivery.
 */
import type { JsMsg } from "@nats-io/jetstream";
import { deliveryCount, storedStamp, streamSequence } from "../nats/message-access.js";

/**
 * A batch's stored messages as a loop read them at arrival, in the batch's order: stream
 * sequences, and timestamps (NaN: unreadable) that tell a reused sequence apart.
 */
export interface StoredIds {
  readonly sequences: readonly number[];
  readonly stamps: readonly number[];
}

export class AckingDeliveries {
  /**
   * Each batch of ACKs on their way, by the array of stream sequences `begin` returned (what
   * `end` is given). Its sequences stay a plain array: a batch's hash set cost more to build
   * than all its lookups (a loop has a few batches on their way at most).
   */
  readonly #batches = new Map<readonly number[], InFlight>();
  /**
   * The same entries, found by how they are looked up: one message's ACK (a host's confirmAck
   * settles message by message, an ACK held over a disconnect) by its sequence — a loop can
   * have a thousand of them on their way, too many to scan on every arrival — and batches of
   * more, or a second entry for a sequence already there, in a set that is scanned.
   */
  readonly #single = new Map<number, InFlight>();
  readonly #scanned = new Set<InFlight>();
  /**
   * Stream sequence → until when (monotonic ms) a late ACK still counts as on its way, and the
   * stored message's timestamp: one that was held over a disconnect or asked again can be
   * overtaken by a delivery the server made before it arrived (a pull sent at the reconnect, a
   * new leader's first redeliveries).
   */
  readonly #late = new Map<number, { readonly until: number; readonly stamp: number }>();
  /**
   * Batches whose ACKs the server confirmed, oldest first, each until when it is kept: a
   * queue of the batches' own arrays and their timestamps, read only for redeliveries.
   */
  readonly #confirmed: Kept[] = [];
  #confirmedHead = 0;
  #confirmedCount = 0;
  /** The highest sequence among the kept confirmed ACKs (recomputed when the batch holding it goes). */
  #confirmedMax = Number.NEGATIVE_INFINITY;
  /** The newest stored timestamp among them, likewise. */
  #confirmedNewest = Number.NEGATIVE_INFINITY;
  /** How many times the kept confirmed ACKs were searched (read by tests: a first delivery should seldom cost one). */
  #confirmedScans = 0;

  /**
   * ACKs of `msgs` leave now; returns what to pass to `end` once each is answered or given up.
   * `ids`: their stream sequences and timestamps, when the caller read them already (kept as
   * they are: nobody changes a batch's arrays).
   */
  begin(msgs: readonly JsMsg[], ids?: StoredIds): readonly number[] {
    if (ids !== undefined && ids.sequences.length === msgs.length && ids.stamps.length === msgs.length) {
      if (msgs.length > 0) this.#add(inFlight(ids.sequences, msgs, ids.stamps));
      return ids.sequences;
    }
    const seqs: number[] = [];
    // The messages in the sequences' order (an unreadable sequence is left out of both).
    const read: JsMsg[] = [];
    for (let i = 0; i < msgs.length; i++) {
      const seq = streamSequence(msgs[i]!);
      if (seq === undefined) continue;
      seqs.push(seq);
      read.push(msgs[i]!);
    }
    if (seqs.length > 0) this.#add(inFlight(seqs, read, undefined));
    return seqs;
  }

  #add(batch: InFlight): void {
    // The same arrays begun twice: the later entry stands, as one map entry would.
    if (this.#batches.has(batch.seqs)) this.#drop(batch.seqs);
    this.#batches.set(batch.seqs, batch);
    const seq = batch.seqs[0]!;
    if (batch.seqs.length === 1 && !this.#single.has(seq)) this.#single.set(seq, batch);
    else this.#scanned.add(batch);
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
    const batch = this.#drop(seqs);
    const now = performance.now();
    if (!confirmed && graceMs <= 0) {
      if (this.#late.size > 0) this.#prune(now);
      return;
    }
    const stamps = batch?.stamps ?? stampsOf(seqs, batch?.msgs);
    if (confirmed) this.#keepConfirmed(seqs, stamps, now, batch);
    if (graceMs <= 0) {
      if (this.#late.size > 0) this.#prune(now);
      return;
    }
    this.#prune(now);
    for (let i = 0; i < seqs.length; i++) {
      const seq = seqs[i]!;
      // Re-inserted at the end: the map is pruned from its start, oldest first.
      this.#late.delete(seq);
      this.#late.set(seq, { until: now + graceMs, stamp: stamps[i]! });
    }
  }

  /**
   * The confirmed ACKs of `seqs` were answered: `confirmed` by the server, or not (given up);
   * `late`: held over a reconnect, or answered after the first attempt's wait, so a redelivery
   * sent before the answer may still be on its way.
   */
  answered(seqs: readonly number[], confirmed: boolean, late: boolean): void {
    this.end(seqs, !confirmed ? UNCONFIRMED_GRACE_MS : late ? LATE_GRACE_MS : 0, confirmed);
  }

  /** Takes the entry begun with `seqs` out of the in-flight maps; returns it. */
  #drop(seqs: readonly number[]): InFlight | undefined {
    const batch = this.#batches.get(seqs);
    if (batch === undefined) return undefined;
    this.#batches.delete(seqs);
    if (this.#single.get(seqs[0]!) === batch) this.#single.delete(seqs[0]!);
    else this.#scanned.delete(batch);
    return batch;
  }

  /** Whether `m` is a message whose ACK is on its way (another delivery of a committed message). */
  has(m: JsMsg): boolean {
    if (this.#batches.size > 0 || this.#late.size > 0) {
      const seq = streamSequence(m);
      if (seq === undefined) return false;
      const single = this.#single.size > 0 ? this.#single.get(seq) : undefined;
      if (single !== undefined && sameStored(stampAt(single, 0), m)) return true;
      for (const b of this.#scanned) {
        // The bounds first: a new arrival is almost always past every batch still in flight.
        if (seq < b.min || seq > b.max) continue;
        const i = b.seqs.indexOf(seq);
        if (i >= 0 && sameStored(stampAt(b, i), m)) return true;
      }
      const late = this.#late.get(seq);
      if (late !== undefined && late.until > performance.now() && sameStored(late.stamp, m)) return true;
    }
    if (this.#confirmedCount === 0) return false;
    const count = deliveryCount(m);
    if (count === undefined) return false;
    const seq = streamSequence(m);
    if (seq === undefined) return false;
    // A first delivery comes after every message the consumer delivered before, so it is past
    // every kept ACK — unless a new consumer leader lost the deliveries its killed predecessor
    // made and delivers them again as first deliveries (seen on 2.9.10, 16 s after their ACKs
    // were confirmed): such a one is looked up like a redelivery. One stored after every kept
    // message (a stream made again reuses low sequences) cannot be one of them.
    if (count < 2) {
      if (!(seq <= this.#confirmedMax)) return false;
      const stamp = storedStamp(m);
      if (stamp === undefined || stamp > this.#confirmedNewest) return false;
    }
    this.#confirmedScans += 1;
    const now = performance.now();
    for (let i = this.#confirmed.length - 1; i >= this.#confirmedHead; i--) {
      const kept = this.#confirmed[i]!;
      if (kept.until <= now) break;
      // The bounds first: a full queue is thousands of batches, most of them far from `seq`.
      if (seq < kept.min || seq > kept.max) continue;
      const at = kept.seqs.indexOf(seq);
      if (at >= 0 && sameStored(kept.stamps[at], m)) return true;
    }
    return false;
  }

  /** How many times a delivery was searched for among the kept confirmed ACKs. */
  get confirmedScans(): number {
    return this.#confirmedScans;
  }

  /** Sequences counted as on their way (one per batch that holds it). */
  get size(): number {
    let n = this.#late.size;
    for (const batch of this.#batches.values()) n += batch.seqs.length;
    return n;
  }

  /** Keeps a confirmed batch; drops the oldest past their time or beyond the cap. */
  #keepConfirmed(seqs: readonly number[], stamps: ArrayLike<number>, now: number, bounds: Bounds | undefined): void {
    if (seqs.length > 0) {
      const min = bounds?.min ?? lowest(seqs);
      const max = bounds?.max ?? highest(seqs);
      const newest = highest(stamps);
      this.#confirmed.push({ seqs, stamps, min, max, newest, until: now + CONFIRMED_KEPT_MS });
      this.#confirmedCount += seqs.length;
      if (max > this.#confirmedMax) this.#confirmedMax = max;
      if (newest > this.#confirmedNewest) this.#confirmedNewest = newest;
    }
    const q = this.#confirmed;
    let stale = false;
    while (this.#confirmedHead < q.length) {
      const oldest = q[this.#confirmedHead]!;
      if (oldest.until > now && this.#confirmedCount <= CONFIRMED_KEPT_MAX) break;
      this.#confirmedCount -= oldest.seqs.length;
      this.#confirmedHead += 1;
      // Usually a newer batch holds both bounds; the oldest holds them after a stream was made again.
      if (oldest.max >= this.#confirmedMax || (oldest.newest >= this.#confirmedNewest && oldest.newest !== Number.NEGATIVE_INFINITY)) stale = true;
    }
    if (stale) this.#rebound();
    // Compacted now and then, not per batch.
    if (this.#confirmedHead > 1024 && this.#confirmedHead * 2 > q.length) {
      q.splice(0, this.#confirmedHead);
      this.#confirmedHead = 0;
    }
  }

  /** The bounds of the kept confirmed ACKs, over what is left of the queue. */
  #rebound(): void {
    let max = Number.NEGATIVE_INFINITY;
    let newest = Number.NEGATIVE_INFINITY;
    const q = this.#confirmed;
    for (let i = this.#confirmedHead; i < q.length; i++) {
      if (q[i]!.max > max) max = q[i]!.max;
      if (q[i]!.newest > newest) newest = q[i]!.newest;
    }
    this.#confirmedMax = max;
    this.#confirmedNewest = newest;
  }

  /** Drops what expired from the start (entries after a longer grace wait at most that long). */
  #prune(now: number): void {
    for (const [seq, { until }] of this.#late) {
      if (until > now) break;
      this.#late.delete(seq);
    }
  }
}

/** The lowest and highest stream sequence of a batch. */
interface Bounds {
  readonly min: number;
  readonly max: number;
}

/** A batch whose ACKs the server confirmed, kept until `until`; `newest`: its newest stored timestamp (-Infinity: none readable). */
interface Kept extends Bounds {
  readonly seqs: readonly number[];
  readonly stamps: ArrayLike<number>;
  readonly newest: number;
  readonly until: number;
}

/** A batch whose ACKs are on their way. */
interface InFlight extends Bounds {
  readonly seqs: readonly number[];
  readonly msgs: readonly JsMsg[];
  readonly stamps: ArrayLike<number> | undefined;
}

/** The lowest of `seqs` (NaN when empty). */
function lowest(seqs: readonly number[]): number {
  let min = seqs[0] ?? Number.NaN;
  for (let i = 1; i < seqs.length; i++) if (seqs[i]! < min) min = seqs[i]!;
  return min;
}

/** The highest of `values`, NaN left out (-Infinity when none is a number). */
function highest(values: ArrayLike<number>): number {
  let max = Number.NEGATIVE_INFINITY;
  for (let i = 0; i < values.length; i++) if (values[i]! > max) max = values[i]!;
  return max;
}

/** The stored timestamp of a batch's `i`-th message (read now when the caller read none at arrival). */
function stampAt(b: InFlight, i: number): number | undefined {
  return b.stamps !== undefined ? b.stamps[i] : storedStamp(b.msgs[i]!);
}

/** One object per batch: its bounds are read without an object of their own. */
function inFlight(seqs: readonly number[], msgs: readonly JsMsg[], stamps: ArrayLike<number> | undefined): InFlight {
  return { seqs, msgs, stamps, min: lowest(seqs), max: highest(seqs) };
}

/**
 * The timestamps of `msgs` (read now: a caller that read none at arrival). A sequence whose
 * message is not known (a caller that did not begin it) gets NaN: it matches no delivery.
 */
function stampsOf(seqs: readonly number[], msgs: readonly JsMsg[] | undefined): Float64Array {
  const stamps = new Float64Array(seqs.length);
  for (let i = 0; i < seqs.length; i++) stamps[i] = (msgs !== undefined ? storedStamp(msgs[i]!) : undefined) ?? Number.NaN;
  return stamps;
}

/**
 * Whether `m` is the stored message whose timestamp is `stamp` (its sequence matched): read only
 * on a match, which is rare. An unknown timestamp (NaN, `undefined`) matches nothing.
 */
function sameStored(stamp: number | undefined, m: JsMsg): boolean {
  return stamp !== undefined && stamp === storedStamp(m);
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
/** At most this many confirmed sequences are kept, with their timestamps (about a megabyte): the oldest go first. */
export const CONFIRMED_KEPT_MAX = 65_536;
