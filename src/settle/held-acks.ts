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

/** How a wait for the reconnect ended: connected (nothing sent), closed, or the budget ran out. */
export type ReconnectOutcome = { readonly kind: "connected" } | { readonly kind: "closed" } | { readonly kind: "timeout" };

interface Held {
  readonly msg: JsMsg;
  readonly budget: SettleBudget;
  /** Whether the poll sends the `+ACK` itself (else the caller sends what it wants once connected). */
  readonly send: boolean;
  readonly resolve: (outcome: HeldAckOutcome | ReconnectOutcome) => void;
}

const SENT: HeldAckOutcome = Object.freeze({ kind: "sent" });
const CLOSED: HeldAckOutcome = Object.freeze({ kind: "closed" });
const TIMEOUT: HeldAckOutcome = Object.freeze({ kind: "timeout" });
const CONNECTED: ReconnectOutcome = Object.freeze({ kind: "connected" });

const held = new Set<Held>();
let timer: ReturnType<typeof setInterval> | undefined;

/**
 * Sends `+ACK` for `m` once its connection is back, or gives up when `budget` runs out (a
 * shutdown) or the connection closes.
 */
export function ackWhenConnected(m: JsMsg, budget: SettleBudget): Promise<HeldAckOutcome> {
  return hold(m, budget, true) as Promise<HeldAckOutcome>;
}

/**
 * Resolves once the connection that delivered `m` is back (nothing sent: a loop then sends its
 * confirmed ACKs, which ride out the election a reconnect often comes with), or it closed, or
 * `budget` ran out.
 */
export function whenConnected(m: JsMsg, budget: SettleBudget): Promise<ReconnectOutcome> {
  return hold(m, budget, false) as Promise<ReconnectOutcome>;
}

/** Queues `msg` for the poll; the outcome's kinds follow `send` (see the two callers). */
function hold(msg: JsMsg, budget: SettleBudget, send: boolean): Promise<HeldAckOutcome | ReconnectOutcome> {
  return new Promise((resolve) => {
    held.add({ msg, budget, send, resolve });
    // Not unref'd: the caller is awaiting this while the connection lives.
    timer ??= setInterval(poll, POLL_MS);
  });
}

function poll(): void {
  for (const h of held) {
    let done: HeldAckOutcome | ReconnectOutcome | undefined;
    if (connectionClosed(h.msg) === true) done = CLOSED;
    else if (connectionDown(h.msg) === false) {
      if (!h.send) done = CONNECTED;
      else {
        try {
          h.msg.ack();
          done = SENT;
        } catch (error) {
          done = { kind: "threw", error };
        }
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
