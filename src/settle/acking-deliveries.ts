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
  /** Stream sequence → ACKs of it on their way. */
  readonly #acking = new Map<number, number>();
  /**
   * Stream sequence → until when (monotonic ms) a late ACK still counts as on its way: one that
   * was held over a disconnect or asked again can be overtaken by a delivery the server made
   * before it arrived (a pull sent at the reconnect, a new leader's first redeliveries).
   */
  readonly #late = new Map<number, number>();

  /** ACKs of `msgs` leave now; returns what to pass to `end` once each is answered or given up. */
  begin(msgs: readonly JsMsg[]): number[] {
    const seqs: number[] = [];
    for (const m of msgs) {
      const seq = streamSequence(m);
      if (seq === undefined) continue;
      seqs.push(seq);
      this.#acking.set(seq, (this.#acking.get(seq) ?? 0) + 1);
    }
    return seqs;
  }

  /**
   * The ACKs of `seqs` were answered or given up. `graceMs`: how long they still count as on
   * their way — after an ACK that was held or asked again ({@link LATE_GRACE_MS}), or one the
   * server never confirmed ({@link UNCONFIRMED_GRACE_MS}: its message comes back once a new
   * leader takes over, which can take seconds).
   */
  end(seqs: readonly number[], graceMs = 0): void {
    const now = performance.now();
    this.#prune(now);
    for (const seq of seqs) {
      const n = (this.#acking.get(seq) ?? 0) - 1;
      if (n > 0) this.#acking.set(seq, n);
      else this.#acking.delete(seq);
      if (graceMs > 0) {
        // Re-inserted at the end: the map is pruned from its start, oldest first.
        this.#late.delete(seq);
        this.#late.set(seq, now + graceMs);
      }
    }
  }

  /** Whether `m` is a message whose ACK is on its way (another delivery of a committed message). */
  has(m: JsMsg): boolean {
    if (this.#acking.size === 0 && this.#late.size === 0) return false;
    const seq = streamSequence(m);
    if (seq === undefined) return false;
    if (this.#acking.has(seq)) return true;
    const until = this.#late.get(seq);
    return until !== undefined && until > performance.now();
  }

  get size(): number {
    return this.#acking.size + this.#late.size;
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
