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

  end(seqs: readonly number[]): void {
    for (const seq of seqs) {
      const n = (this.#acking.get(seq) ?? 0) - 1;
      if (n > 0) this.#acking.set(seq, n);
      else this.#acking.delete(seq);
    }
  }

  /** Whether `m` is a message whose ACK is on its way (another delivery of a committed message). */
  has(m: JsMsg): boolean {
    if (this.#acking.size === 0) return false;
    const seq = streamSequence(m);
    return seq !== undefined && this.#acking.has(seq);
  }

  get size(): number {
    return this.#acking.size;
  }
}
