/**
 * ACKs held across a brief disconnect. The client drops frames published while it is between
 * connections, without an error, so an ACK sent then is lost and the committed message comes
 * back as a duplicate. A held ACK waits for the reconnect and is sent then, until its deadline
 * (the lease: later the server has redelivered anyway). One poll timer serves every held ACK.
 */
import type { JsMsg } from "@nats-io/jetstream";
import { connectionClosed, connectionDown } from "../nats/connection-state.js";

/** How often a disconnected connection is looked at again. */
const POLL_MS = 20;

interface Held {
  readonly msg: JsMsg;
  readonly deadline: number;
  readonly resolve: (sent: boolean) => void;
}

const held = new Set<Held>();
let timer: ReturnType<typeof setInterval> | undefined;

/**
 * Sends `+ACK` for `m` once its connection is back, or gives up at `deadline`
 * (`performance.now()` scale) or when the connection closes.
 *
 * @returns whether the ACK was handed to a connected client.
 */
export function ackWhenConnected(m: JsMsg, deadline: number): Promise<boolean> {
  return new Promise<boolean>((resolve) => {
    held.add({ msg: m, deadline, resolve });
    // Not unref'd: the caller is awaiting this, and the wait is bounded by the deadline.
    timer ??= setInterval(poll, POLL_MS);
  });
}

function poll(): void {
  const now = performance.now();
  for (const h of held) {
    let done: boolean | undefined;
    if (connectionClosed(h.msg) === true) done = false;
    else if (connectionDown(h.msg) === false) {
      try {
        h.msg.ack();
        done = true;
      } catch {
        done = false;
      }
    } else if (now >= h.deadline) done = false;
    if (done === undefined) continue;
    held.delete(h);
    h.resolve(done);
  }
  if (held.size === 0 && timer !== undefined) {
    clearInterval(timer);
    timer = undefined;
  }
}
