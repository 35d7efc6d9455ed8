/**
 * Bounding a `consume()` subscription's prefetch. The client refills a consume pull on its own
 * as messages arrive, whatever the reader can start, so a loop that reads it would hold more
 * than it can write (and those messages wait unbeaten until redelivered). The client sends its
 * refills through the iterator's `pull(options)`; the gate wraps that one method so each refill
 * asks for at most what the loop can start, and none goes out while it can start nothing or
 * once the loop closes; when the loop can start more it asks again. Nothing is ever cut short:
 * pulls already sent end by themselves.
 *
 * This reads the client's iterator internals (`pull`, `pullOptions`, `pending`, `opts`), as only
 * `consume-notices.ts` also does (`notify`). A client whose iterator has another shape is not
 * gated (`undefined`).
 */
import { nextTurn } from "./next-turn.js";

/** Control of a gated consume iterator's pulls. */
export interface PullGate {
  /** Messages the pulls already sent may still bring. */
  readonly outstanding: number;
  /** The loop can start more: ask for it (within what it can start); `now`: in this tick, not the next turn. */
  resume(now?: boolean): void;
  /** No more pulls (those sent still end by themselves). */
  close(): void;
}

interface ConsumeIterator {
  pull(options: { batch?: number }): void;
  pullOptions(): { batch?: number };
  pending: { msgs: number };
  /** The subscription's options: `pullOptions()` asks for `max_messages` less what is pending. */
  opts: { max_messages: number };
  /** The client's idle-heartbeat watch of its pulls (a timer), when it keeps one. */
  monitor?: { cancel(): void; restart(): void } | null;
}

function isGateable(iter: unknown): iter is ConsumeIterator {
  const it = iter as Partial<ConsumeIterator> | null;
  return (
    it !== null &&
    typeof it === "object" &&
    typeof it.pull === "function" &&
    typeof it.pullOptions === "function" &&
    typeof it.pending?.msgs === "number" &&
    typeof it.opts?.max_messages === "number"
  );
}

/**
 * Gates `iter`'s refill pulls by `room()`: the messages the loop could still take, not counting
 * those requested (outstanding). Read the subscription in callback mode, so a message is handed
 * over before the client asks for its refill. `capacity`: the most a refill may ask for (the
 * subscription may have opened asking for less, its first pull ungated).
 */
export function gateConsumePulls(iter: unknown, room: () => number, capacity?: number): PullGate | undefined {
  if (!isGateable(iter)) return undefined;
  if (capacity !== undefined) iter.opts.max_messages = capacity;
  const original = iter.pull;
  let closed = false;
  let resuming = false;
  const outstanding = (): number => Math.max(0, iter.pending.msgs);
  // While no pull is out, the server sends no heartbeat: the client's watch would find them
  // missing every few seconds and read consumer info to "reset" — a request and a parse each
  // time, for as long as the loop is full. It rests until the next pull goes out.
  let resting = false;
  const rest = (): void => {
    if (resting || outstanding() > 0) return;
    try {
      iter.monitor?.cancel();
      resting = true;
    } catch {
      // A client without the watch: nothing to rest.
    }
  };
  const wake = (): void => {
    if (!resting) return;
    resting = false;
    try {
      iter.monitor?.restart();
    } catch {
      // as above
    }
  };
  // An own property shadows the prototype's method: the client's `this.pull(...)` comes here.
  iter.pull = function gatedPull(this: ConsumeIterator, options: { batch?: number }): void {
    if (closed) return;
    const allowed = room() - outstanding();
    const asked = options.batch ?? 0;
    if (allowed <= 0 || asked <= 0) {
      rest();
      return;
    }
    wake();
    original.call(this, { ...options, batch: Math.min(asked, allowed) });
  };
  return {
    get outstanding() {
      return outstanding();
    },
    resume(now) {
      if (now === true) {
        if (!closed) iter.pull(iter.pullOptions());
        return;
      }
      // The loop can start more: ask for it now, whether or not the client tried to refill
      // (it only tries as messages arrive, past its threshold). Slots that free in one turn
      // of the event loop (handlers whose timers fired together) share one request.
      if (closed || resuming) return;
      resuming = true;
      // The turn the loop's final frames wait for too: the request leaves in their socket write.
      void nextTurn().then(() => {
        resuming = false;
        if (!closed) iter.pull(iter.pullOptions());
      });
    },
    close() {
      closed = true;
    },
  };
}
