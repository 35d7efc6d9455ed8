/**
 * The one place that reads a connection's state behind a `JsMsg` (closed, between
 * connections, the server version it met). Every read is structural and guarded, so a
 * different client version degrades to "unknown".
 */
import type { JsMsg } from "@nats-io/jetstream";

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

/** Something that can send a request (the part of a connection a confirmed ACK retry needs). */
export interface Requester {
  request(subject: string, payload?: string | Uint8Array, options?: { timeout?: number }): Promise<unknown>;
}

/** The connection that delivered `m`, when it can send requests (for ACK retries). */
export function requesterOf(m: JsMsg): Requester | undefined {
  try {
    const publisher = (m as unknown as { msg?: { publisher?: { request?: unknown } } }).msg?.publisher;
    return publisher !== undefined && typeof publisher.request === "function" ? (publisher as Requester) : undefined;
  } catch {
    return undefined;
  }
}

/** A connection that can be flushed (the server answered a PING: it processed every earlier frame). */
export interface Flushable {
  flush(): Promise<void>;
  isClosed(): boolean;
}

/** The connection behind a consumer from `js.consumers.get()` (its API client's), when it can be read. */
export function connectionOfConsumer(consumer: unknown): Flushable | undefined {
  try {
    const nc = (consumer as { api?: { nc?: Partial<Flushable> } } | null)?.api?.nc;
    return nc !== undefined && typeof nc.flush === "function" && typeof nc.isClosed === "function" ? (nc as Flushable) : undefined;
  } catch {
    return undefined;
  }
}
