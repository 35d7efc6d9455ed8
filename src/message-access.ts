/**
 * The one place that reads what a `JsMsg` does not expose in its public type (its reply
 * subject, whether a final ack was already sent, whether its connection is closed). Every
 * read is structural and guarded, so a different client version degrades to "unknown".
 */
import type { JsMsg } from "@nats-io/jetstream";

/** The ack reply subject (`$JS.ACK.…`), when the message has one. */
export function replySubject(m: JsMsg): string | undefined {
  try {
    const reply = (m as unknown as { reply?: unknown }).reply;
    return typeof reply === "string" && reply.length > 0 ? reply : undefined;
  } catch {
    return undefined;
  }
}

/** True once the client sent a final ack frame (ack, nak, term) for this message. */
export function isSettled(m: JsMsg): boolean {
  try {
    return (m as unknown as { didAck?: unknown }).didAck === true;
  } catch {
    return false;
  }
}

/** The delivery count from the ack subject (1 for a first delivery), when it can be read. */
export function deliveryCount(m: JsMsg): number | undefined {
  try {
    const n = m.info?.deliveryCount;
    return typeof n === "number" && Number.isInteger(n) && n >= 1 ? n : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Whether the connection that delivered `m` is closed. `JsMsg.working()` writes into the
 * protocol buffer directly and does not throw on a closed connection, so the library asks.
 */
export function connectionClosed(m: JsMsg): boolean | undefined {
  try {
    const publisher = (m as unknown as { msg?: { publisher?: { isClosed?: () => unknown } } }).msg?.publisher;
    const closed = typeof publisher?.isClosed === "function" ? publisher.isClosed() : undefined;
    return typeof closed === "boolean" ? closed : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Whether the connection that delivered `m` is open but between connections (disconnected,
 * reconnecting). The client does not buffer what is published then: every reconnect attempt
 * starts from an empty outbound buffer, so a frame sent now is dropped without an error.
 * `undefined` when it cannot be read.
 */
export function connectionDown(m: JsMsg): boolean | undefined {
  try {
    const publisher = (m as unknown as { msg?: { publisher?: { connected?: unknown; isClosed?: () => unknown } } }).msg?.publisher;
    const connected = publisher?.connected;
    if (typeof connected !== "boolean") return undefined;
    if (connected) return false;
    const closed = typeof publisher?.isClosed === "function" ? publisher.isClosed() : undefined;
    return closed === true ? false : true;
  } catch {
    return undefined;
  }
}

/** Stream, consumer and stream sequence from the delivery info, when readable. */
export function deliveryInfo(m: JsMsg): { stream: string; consumer: string; streamSequence: number; deliveryCount: number } | undefined {
  try {
    const info = m.info;
    if (!info || typeof info.stream !== "string") return undefined;
    return { stream: info.stream, consumer: info.consumer, streamSequence: info.streamSequence, deliveryCount: info.deliveryCount };
  } catch {
    return undefined;
  }
}

/**
 * The server version known to a connection (`nc.info.version`) or to the connection that
 * delivered a message; `undefined` when neither says.
 */
export function serverVersionOf(source: unknown): string | undefined {
  try {
    const direct = (source as { info?: { version?: unknown } } | undefined)?.info;
    if (typeof direct?.version === "string") return direct.version;
    const viaMsg = (source as { msg?: { publisher?: { info?: { version?: unknown } } } } | undefined)?.msg?.publisher?.info;
    return typeof viaMsg?.version === "string" ? viaMsg.version : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Whether a batch's connection is closed: the host's connection when it gave one (trusted
 * either way), else the connection that delivered the first message.
 */
export function batchConnectionClosed(msgs: readonly JsMsg[], connection: { isClosed?: () => unknown } | undefined): boolean {
  try {
    if (connection && typeof connection.isClosed === "function") return connection.isClosed() === true;
  } catch {
    // fall through to the message's own connection
  }
  const first = msgs[0];
  return first !== undefined && connectionClosed(first) === true;
}
