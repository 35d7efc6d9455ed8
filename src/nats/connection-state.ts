/**
 * The one place that reads a connection's state behind a `JsMsg` (closed, between
 * connections, the server version it met). Every read is structural and guarded, so a
 * different client version degrades to "unknown".
 */
import type { JsMsg } from "@nats-io/jetstream";

/** What this module reads of the client layer behind a message (`msg.publisher`); every field may be missing. */
interface PublisherLike {
  isClosed?: () => unknown;
  connected?: unknown;
  info?: { version?: unknown };
}

/** The client layer that delivered `m` (`m.msg.publisher`), unchecked; may throw on an exotic object. */
function publisherOf(m: unknown): PublisherLike | undefined {
  return (m as { msg?: { publisher?: PublisherLike } } | undefined)?.msg?.publisher;
}

/**
 * Whether the connection that delivered `m` is closed. `JsMsg.working()` writes into the
 * protocol buffer directly and does not throw on a closed connection, so the library asks.
 */
export function connectionClosed(m: JsMsg): boolean | undefined {
  try {
    const publisher = publisherOf(m);
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
    const publisher = publisherOf(m);
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
    const viaMsg = publisherOf(source)?.info;
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

/**
 * What reports the closing of a batch's connection, as {@link batchConnectionClosed} reads it:
 * `connection` when it has `isClosed`, else the client that delivered the first message;
 * `undefined` when neither can be read.
 */
export function closerOf(connection: { isClosed?: () => unknown } | undefined, msgs: readonly JsMsg[]): { isClosed(): unknown } | undefined {
  try {
    if (connection && typeof connection.isClosed === "function") return connection as { isClosed(): unknown };
    const publisher = publisherOf(msgs[0]);
    return typeof publisher?.isClosed === "function" ? (publisher as { isClosed(): unknown }) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The client layer that delivered `m` (its protocol handler: the connection's options, server
 * info and state), for deriving the heartbeat thread's connection; `undefined` when unreadable.
 */
export function deliveringConnection(m: JsMsg | undefined): object | undefined {
  try {
    const p: unknown = publisherOf(m);
    return typeof p === "object" && p !== null ? p : undefined;
  } catch {
    return undefined;
  }
}

/** Something that can send a request (the part of a connection a confirmed ACK retry needs). */
export interface Requester {
  request(subject: string, payload?: string | Uint8Array, options?: { timeout?: number }): Promise<unknown>;
}

/**
 * Requests through the connection that delivered `m` (for ACK retries and a consumer-info read
 * when the host gave no connection). A message reaches only its connection's protocol layer,
 * not the `NatsConnection`, so this sends the request the way the client's own `ackAck()` does:
 * a token on the connection's shared reply inbox, a publish with that reply, one timer. A test
 * fake with its own `request(subject, …)` is used as it is. `undefined` when neither is there.
 */
export function requesterOf(m: JsMsg): Requester | undefined {
  try {
    const publisher = publisherOf(m) as ProtocolLike | { request?: unknown } | undefined;
    if (publisher === undefined || publisher === null) return undefined;
    if (isProtocol(publisher)) return { request: (subject, payload, options) => requestThrough(publisher, subject, payload, options?.timeout ?? 5000) };
    return typeof publisher.request === "function" ? (publisher as Requester) : undefined;
  } catch {
    return undefined;
  }
}

/** The client's protocol layer, as far as a request needs it. */
interface ProtocolLike {
  request(r: MuxRequest): unknown;
  publish(subject: string, payload: Uint8Array | string, options: { reply: string }): void;
  muxSubscriptions: { baseInbox?: string; cancel(r: MuxRequest): void };
}

/** What the protocol layer's reply inbox hands a reply to. */
interface MuxRequest {
  readonly token: string;
  readonly requestSubject: string;
  received: number;
  resolver(err: unknown, msg: unknown): void;
  cancel(err?: unknown): void;
}

function isProtocol(p: unknown): p is ProtocolLike {
  const x = p as Partial<ProtocolLike> | null;
  return x !== null && typeof x === "object" && typeof x.request === "function" && typeof x.publish === "function" && typeof x.muxSubscriptions === "object" && x.muxSubscriptions !== null;
}

let tokens = 0;

function requestThrough(proto: ProtocolLike, subject: string, payload: string | Uint8Array | undefined, timeoutMs: number): Promise<unknown> {
  return new Promise((resolve, reject) => {
    let done = false;
    const finish = (err: unknown, msg: unknown): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      proto.muxSubscriptions.cancel(r);
      if (err !== null && err !== undefined) reject(err);
      else resolve(msg);
    };
    const r: MuxRequest = {
      token: `jsip${(++tokens).toString(36)}`,
      requestSubject: subject,
      received: 0,
      resolver: finish,
      cancel: (err) => finish(err ?? new Error("request cancelled"), undefined),
    };
    const timer = setTimeout(() => finish(Object.assign(new Error(`request timed out after ${timeoutMs} ms`), { name: "TimeoutError" }), undefined), timeoutMs);
    timer.unref?.();
    try {
      // Registers the token and, on first use, the connection's reply inbox.
      proto.request(r);
      const inbox = proto.muxSubscriptions.baseInbox;
      if (typeof inbox !== "string") throw new Error("the connection has no reply inbox");
      proto.publish(subject, payload ?? new Uint8Array(), { reply: `${inbox}${r.token}` });
    } catch (err) {
      finish(err, undefined);
    }
  });
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
