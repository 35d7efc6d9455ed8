/**
 * ACKs held across a disconnect. The client drops frames published while it is between
 * connections, without an error, so an ACK sent then is lost and the committed message comes
 * back as a duplicate. A held ACK waits for the reconnect and is sent then — however long that
 * takes while the connection lives (an ACK keyed by stream sequence settles the message even
 * after its deadline), until the connection closes or a shutdown's bound passes. One poll
 * timer serves every held ACK.
 */
import type { JsMsg } from "@nats-io/jetstream";
import { connectionClosed, connectionDown } from "../nats/connection-state.js";
import type { SettleBudget } from "./settle-budget.js";

/** How often a disconnected connection is looked at again. */
const POLL_MS = 20;

/**
 * How a held ACK ended: sent after the reconnect; the connection closed; `ack()` threw; or the
 * settle budget of a shutdown that began meanwhile ran out first.
 */
export type HeldAckOutcome = { readonly kind: "sent" } | { readonly kind: "closed" } | { readonly kind: "threw"; readonly error: unknown } | { readonly kind: "timeout" };

interface Held {
  readonly msg: JsMsg;
  readonly budget: SettleBudget;
  readonly resolve: (outcome: HeldAckOutcome) => void;
}

const SENT: HeldAckOutcome = Object.freeze({ kind: "sent" });
const CLOSED: HeldAckOutcome = Object.freeze({ kind: "closed" });
const TIMEOUT: HeldAckOutcome = Object.freeze({ kind: "timeout" });

const held = new Set<Held>();
let timer: ReturnType<typeof setInterval> | undefined;

/**
 * Sends `+ACK` for `m` once its connection is back, or gives up when `budget` runs out (a
 * shutdown) or the connection closes.
 */
export function ackWhenConnected(m: JsMsg, budget: SettleBudget): Promise<HeldAckOutcome> {
  return new Promise<HeldAckOutcome>((resolve) => {
    held.add({ msg: m, budget, resolve });
    // Not unref'd: the caller is awaiting this while the connection lives.
    timer ??= setInterval(poll, POLL_MS);
  });
}

function poll(): void {
  for (const h of held) {
    let done: HeldAckOutcome | undefined;
    if (connectionClosed(h.msg) === true) done = CLOSED;
    else if (connectionDown(h.msg) === false) {
      try {
        h.msg.ack();
        done = SENT;
      } catch (error) {
        done = { kind: "threw", error };
      }
    } else if (h.budget.remainingMs() <= 0) done = TIMEOUT;
    if (done === undefined) continue;
    held.delete(h);
    h.resolve(done);
  }
  if (held.size === 0 && timer !== undefined) {
    clearInterval(timer);
    timer = undefined;
  }
}
