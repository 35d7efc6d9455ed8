/**
 * JsMsg-shaped messages for the rows that need no server: the fields the library reads
 * (`reply`, `didAck`, `info`) and a `working()` that only counts, like a client whose publish
 * is free. One class, so every message has the same shape, as real ones do.
 */
import type { JsMsg } from "@nats-io/jetstream";

class FakeJsMsg {
  didAck = false;
  beats = 0;
  readonly reply: string;
  readonly seq: number;
  readonly info: { readonly stream: string; readonly consumer: string; readonly deliveryCount: number; readonly streamSequence: number };

  constructor(seq: number) {
    this.seq = seq;
    this.reply = `$JS.ACK.BENCH.C.1.${seq}.${seq}.0.0`;
    this.info = { stream: "BENCH", consumer: "C", deliveryCount: 1, streamSequence: seq };
  }

  working(): void {
    if (!this.didAck) this.beats += 1;
  }

  ack(): void {
    this.didAck = true;
  }
}

let nextSeq = 0;

/** `n` fake messages, typed as what the library accepts. */
export function fakeMsgs(n: number): JsMsg[] {
  const out: JsMsg[] = [];
  for (let i = 0; i < n; i++) out.push(new FakeJsMsg(++nextSeq) as unknown as JsMsg);
  return out;
}
