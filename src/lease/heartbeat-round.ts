/**
 * One heartbeat round: `+WPI` for every message of a batch, either handed to the client
 * (`JsMsg.working()`, fire-and-forget) or sent as requests the server answers.
 */
import type { JsMsg } from "@nats-io/jetstream";
import { ConnectionClosedError, DisconnectedError } from "../errors.js";
import type { NatsConnectionLike } from "../nats/client-types.js";
import { batchConnectionClosed, connectionDown } from "../nats/connection-state.js";
import { isSettled, replySubject } from "../nats/message-access.js";

/**
 * What one round achieved. `refreshed` holds the indexes of messages whose beat was accepted;
 * `released` those the work settled itself (acked, naked or termed), which no longer have a
 * deadline to keep.
 */
export interface RoundResult {
  readonly refreshed: readonly number[] | "all";
  readonly released?: readonly number[];
  readonly failed: number;
  readonly firstError: unknown;
  /** The connection is closed: no later round can succeed. */
  readonly closed: boolean;
}

/** A connection able to answer whether it is closed (structural, so tests can pass a fake). */
export type ClosableConnection = Pick<NatsConnectionLike, "isClosed">;

/** A connection able to send confirmed heartbeats. */
export type RequestConnection = Pick<NatsConnectionLike, "request"> & Partial<ClosableConnection>;

const WPI = "+WPI";

const ALL_REFRESHED: RoundResult = Object.freeze({ refreshed: "all", failed: 0, firstError: undefined, closed: false });

/**
 * Sends `+WPI` through `JsMsg.working()` for every message not yet settled. A message whose
 * connection is disconnected gets no frame and counts as failed: the lease is not extended by
 * a beat the client would drop.
 */
export function sendRound(msgs: readonly JsMsg[], connection: ClosableConnection | undefined): RoundResult {
  if (batchConnectionClosed(msgs, connection)) return closedRound(msgs);
  let failedIndexes: number[] | undefined;
  let released: number[] | undefined;
  let firstError: unknown;
  for (let i = 0; i < msgs.length; i++) {
    const m = msgs[i]!;
    // After a final ack the client turns working() into a no-op; nothing to keep alive.
    if (isSettled(m)) {
      (released ??= []).push(i);
      continue;
    }
    // Read per message: a host may assemble a batch from more than one connection.
    if (connectionDown(m) === true) {
      (failedIndexes ??= []).push(i);
      firstError ??= new DisconnectedError();
      continue;
    }
    try {
      m.working();
    } catch (err) {
      (failedIndexes ??= []).push(i);
      firstError ??= err;
    }
  }
  if (failedIndexes === undefined) {
    return released === undefined ? ALL_REFRESHED : { refreshed: "all", released, failed: 0, firstError: undefined, closed: false };
  }
  // The rare path: refresh only the messages whose frame was handed over.
  const failedSet = new Set(failedIndexes);
  const refreshed: number[] = [];
  for (let i = 0; i < msgs.length; i++) if (!failedSet.has(i)) refreshed.push(i);
  return { refreshed, ...(released !== undefined ? { released } : {}), failed: failedIndexes.length, firstError, closed: batchConnectionClosed(msgs, connection) };
}

/** No frame can leave: every message the work has not settled itself fails (settled ones are released). */
function closedRound(msgs: readonly JsMsg[]): RoundResult {
  let released: number[] | undefined;
  for (let i = 0; i < msgs.length; i++) if (isSettled(msgs[i]!)) (released ??= []).push(i);
  const failed = msgs.length - (released?.length ?? 0);
  return { refreshed: [], ...(released !== undefined ? { released } : {}), failed, firstError: failed > 0 ? new ConnectionClosedError() : undefined, closed: true };
}

/**
 * Sends `+WPI` as a request on each message's reply subject and waits for the server's
 * answers. Every frame is published before this returns its promise, so nothing is sent
 * after the caller stops.
 */
export function sendConfirmedRound(msgs: readonly JsMsg[], connection: RequestConnection, timeoutMs: number): Promise<RoundResult> {
  if (batchConnectionClosed(msgs, connection)) return Promise.resolve(closedRound(msgs));
  const pending: Promise<number>[] = [];
  let released: number[] | undefined;
  let failed = 0;
  let firstError: unknown;
  msgs.forEach((m, i) => {
    if (isSettled(m)) {
      (released ??= []).push(i);
      return;
    }
    const reply = replySubject(m);
    if (reply === undefined) {
      failed += 1;
      firstError ??= new TypeError("message has no reply subject: it cannot be heartbeated");
      return;
    }
    try {
      pending.push(connection.request(reply, WPI, { timeout: timeoutMs }).then(() => i));
    } catch (err) {
      failed += 1;
      firstError ??= err;
    }
  });
  return Promise.allSettled(pending).then((results) => {
    const refreshed: number[] = [];
    for (const r of results) {
      if (r.status === "fulfilled") refreshed.push(r.value);
      else {
        failed += 1;
        firstError ??= r.reason;
      }
    }
    return { refreshed, ...(released !== undefined ? { released } : {}), failed, firstError, closed: failed > 0 && batchConnectionClosed(msgs, connection) };
  });
}
