/**
 * Dead-lettering a poison message: publish a copy through JetStream and wait for the stream
 * to confirm it. The caller acknowledges the original only after that.
 */
import type { JsMsg } from "@nats-io/jetstream";
import { DeadLetterError, errorName } from "../errors.js";
import type { JsMsgLike, MsgHdrsLike } from "../nats/client-types.js";
import { deliveryInfo } from "../nats/message-access.js";

/**
 * Headers set on a dead-lettered copy. The payload is unchanged; the original headers are kept,
 * except the `Nats-` ones the server interprets (message id, expectations, TTL). The host may
 * add its own with {@link DeadLetterTarget.headers}; these names are the library's.
 *
 * @example
 * ```ts
 * const seq = dlqMsg.headers?.get(DeadLetterHeaders.STREAM_SEQUENCE);
 * ```
 */
export const DeadLetterHeaders = {
  /** The stream the message came from. */
  STREAM: "Dead-Letter-Stream",
  /** The durable consumer that gave up on it. */
  CONSUMER: "Dead-Letter-Consumer",
  /** Its sequence in the source stream. */
  STREAM_SEQUENCE: "Dead-Letter-Stream-Sequence",
  /** The original's delivery count when it was dead-lettered. */
  DELIVERY_COUNT: "Dead-Letter-Delivery-Count",
  /** The original subject, so it can be replayed. */
  SUBJECT: "Dead-Letter-Subject",
  /** The class name of the error (never its message: add the reason yourself with `deadLetter.headers`). */
  ERROR: "Dead-Letter-Error",
} as const;

/**
 * Where poison messages go: a JetStream client (its `publish` waits for the stream's ack) and a
 * subject captured by a stream; optionally, headers of the host's own for each copy.
 *
 * @example
 * ```ts
 * const ack = new CommitThenAck({
 *   deadLetter: {
 *     js: jetstream(nc),
 *     subject: "dlq.orders",
 *     // The reason is yours to send: your own error's message here, never a driver's raw text.
 *     headers: (msg, err) => (err instanceof PermanentSinkError ? { "Reject-Reason": err.message } : {}),
 *   },
 * });
 * ```
 */
export interface DeadLetterTarget {
  /** A JetStream client (`jetstream(nc)`, or `nc.jetstream()` with `nats` 2.x); only `publish` is used. */
  readonly js: {
    /** Publishes and resolves with the stream's ack (`JetStreamClient.publish`). */
    publish(
      subject: string,
      payload?: Uint8Array | string,
      options?: { headers?: MsgHdrsLike; msgID?: string; timeout?: number },
    ): Promise<unknown>;
  };
  /** The dead-letter subject, a literal subject that a stream other than the source captures. */
  readonly subject: string;
  /** Publish timeout in milliseconds, integer 1 ..= 60,000; default the client's (5 s). */
  readonly timeoutMs?: number;
  /**
   * Headers of your own for each copy, for example why it was refused. Called before each
   * publish with the original message and the error that sent it here (your
   * `PermanentSinkError`, or the last error on its final delivery); return a record of names to
   * values, any iterable of `[name, value]` pairs (a `Headers`, a `Map`, a NATS `MsgHdrs`), or
   * nothing. Default: none. `msg` is typed as the library reads it ({@link JsMsgLike}); a
   * function that declares it as your client's `JsMsg` fits as well.
   *
   * Nothing of the error is copied by default, since an error's message can hold payload
   * fragments or credentials: whether the reason travels with the copy is your choice.
   *
   * Checked at each publish: values are strings without CR or LF; names are printable ASCII
   * without `:`; names starting with `Nats-` (the server's) or `Dead-Letter-` (the library's)
   * are refused; at most 256 entries and 16 KiB of names and values in all. A name the original also carries
   * replaces its value. When the function throws or returns anything else, none of its headers
   * are used and the copy is published with the library's headers all the same (the message is
   * never held back for it); the message's result then carries a {@link DeadLetterError} with
   * reason `headers_refused` as `settleError` (its `cause` says what was wrong), which the loops
   * report to `onError` (`during: "settle"`) and `settle_failures_total` counts.
   */
  headers?(
    msg: JsMsgLike,
    error: unknown,
  ): Readonly<Record<string, string | readonly string[]>> | Iterable<readonly [string, string | readonly string[]]> | undefined;
}

/** The most bytes of names and values the host's headers may add to one copy, and the most entries. */
const MAX_HOST_HEADER_BYTES = 16_384;
const MAX_HOST_HEADERS = 256;
/** Names the host may not set: the server's and the library's own. */
const RESERVED_HEADER = /^(nats-|dead-letter-)/i;
/** A header name: printable ASCII without `:` (what the client accepts). */
const HEADER_NAME = /^[!-9;-~]+$/;

/** The JetStream client's own publish timeout, assumed when the target sets none and a cap applies. */
const DEFAULT_PUBLISH_TIMEOUT_MS = 5000;

/** A confirmed copy: the stream that stored it and its sequence there. */
export interface DeadLetterReceipt {
  readonly stream: string;
  readonly seq: number;
  /** Why the host's headers were left out of the copy, when they were. */
  readonly headersError?: DeadLetterError;
}

/**
 * Publishes `m` to the dead-letter subject and resolves with the stream's acknowledgement.
 * The message id is unique per stream, consumer and sequence, so a retried publish is
 * deduplicated and two consumers of one stream keep two copies.
 *
 * `maxWaitMs` caps the publish timeout (the settle budget left during a shutdown). The host's
 * headers that could not be used are reported in the receipt (`headersError`), not thrown.
 *
 * @throws {@link DeadLetterError} when the publish failed, returned no acknowledgement with a
 *   `stream` and a `seq`, or was stored by the message's own stream.
 */
export async function publishDeadLetter(m: JsMsg, target: DeadLetterTarget, error: unknown, maxWaitMs = Number.POSITIVE_INFINITY): Promise<DeadLetterReceipt> {
  // During a shutdown the publish may wait only what the settle budget has left.
  const timeout = Number.isFinite(maxWaitMs) ? Math.max(1, Math.min(target.timeoutMs ?? DEFAULT_PUBLISH_TIMEOUT_MS, maxWaitMs)) : target.timeoutMs;
  // Loaded on first use, so the root entry does not need a NATS client to load.
  const { headers } = await import("@nats-io/transport-node");
  const info = deliveryInfo(m);
  const host = hostHeaders(target, m, error);
  const chosen = new Set(host.entries.map(([name]) => name.toLowerCase()));
  const h = headers();
  const original = m.headers;
  if (original) {
    for (const [key, values] of original) {
      if (/^nats-/i.test(key) || chosen.has(key.toLowerCase())) continue;
      for (const v of values) h.append(key, v);
    }
  }
  for (const [name, value] of host.entries) h.append(name, value);
  if (info) {
    h.set(DeadLetterHeaders.STREAM, info.stream);
    h.set(DeadLetterHeaders.CONSUMER, info.consumer);
    h.set(DeadLetterHeaders.STREAM_SEQUENCE, String(info.streamSequence));
    h.set(DeadLetterHeaders.DELIVERY_COUNT, String(info.deliveryCount));
  }
  h.set(DeadLetterHeaders.SUBJECT, m.subject);
  h.set(DeadLetterHeaders.ERROR, errorName(error));
  let ack: unknown;
  try {
    ack = await target.js.publish(target.subject, m.data, {
      headers: h,
      ...(info ? { msgID: `${info.stream}:${info.consumer}:${info.streamSequence}` } : {}),
      ...(timeout !== undefined ? { timeout } : {}),
    });
  } catch (err) {
    throw new DeadLetterError("publish_failed", err);
  }
  const receipt = readReceipt(ack);
  if (receipt === undefined) throw new DeadLetterError("not_confirmed");
  if (info !== undefined && receipt.stream === info.stream) throw new DeadLetterError("source_stream");
  return host.problem === undefined ? receipt : { ...receipt, headersError: new DeadLetterError("headers_refused", undefined, { cause: host.problem }) };
}

/**
 * The host's headers for one copy, all checked: every entry, or none and the problem. A hook
 * that throws or returns junk never keeps the copy from being published.
 */
function hostHeaders(target: DeadLetterTarget, m: JsMsg, error: unknown): { entries: Array<[string, string]>; problem?: TypeError } {
  const hook = target.headers;
  if (hook === undefined) return { entries: [] };
  const fail = (why: string, cause?: unknown) => ({ entries: [], problem: new TypeError(`options.deadLetter.headers ${why}`, cause === undefined ? undefined : { cause }) });
  let returned: unknown;
  try {
    returned = hook(m, error);
  } catch (err) {
    return fail(`threw (${errorName(err)}): the copy was published without the host's headers`, err);
  }
  if (returned === undefined || returned === null) return { entries: [] };
  if (typeof (returned as { then?: unknown }).then === "function") {
    (returned as Promise<unknown>).then(undefined, () => undefined);
    return fail("returned a promise: return the headers themselves (it is called before each publish, synchronously)");
  }
  if (typeof returned !== "object") return fail(`returned ${typeof returned}: return a record of names to values, or [name, value] pairs`);
  const entries: Array<[string, string]> = [];
  let bytes = 0;
  let count = 0;
  try {
    const pairs: Iterable<unknown> = Symbol.iterator in returned ? (returned as Iterable<unknown>) : Object.entries(returned);
    for (const pair of pairs) {
      if (++count > MAX_HOST_HEADERS) return fail(`returned more than ${MAX_HOST_HEADERS} headers: send a reason, not a dump`);
      if (!Array.isArray(pair) || pair.length !== 2) return fail("returned an entry that is not a [name, value] pair");
      const [name, raw] = pair as [unknown, unknown];
      if (typeof name !== "string" || !HEADER_NAME.test(name)) return fail(`returned the header name ${JSON.stringify(String(name).slice(0, 64))}: use printable ASCII without spaces or ":"`);
      if (RESERVED_HEADER.test(name)) return fail(`returned "${name.slice(0, 64)}": Nats-* headers are the server's and Dead-Letter-* headers the library's; use another name`);
      for (const value of Array.isArray(raw) ? raw : [raw]) {
        if (typeof value !== "string") return fail(`returned a ${value === null ? "null" : typeof value} value for "${name.slice(0, 64)}": values must be strings`);
        if (/[\r\n]/.test(value)) return fail(`returned a value with a line break for "${name.slice(0, 64)}": remove CR and LF`);
        bytes += Buffer.byteLength(name) + Buffer.byteLength(value);
        if (bytes > MAX_HOST_HEADER_BYTES) return fail(`returned more than ${MAX_HOST_HEADER_BYTES} bytes of headers: send a reason, not a dump`);
        entries.push([name, value]);
      }
    }
  } catch (err) {
    return fail(`returned headers that could not be read (${errorName(err)})`, err);
  }
  return { entries };
}

function readReceipt(ack: unknown): DeadLetterReceipt | undefined {
  try {
    if (typeof ack !== "object" || ack === null) return undefined;
    const { stream, seq } = ack as { stream?: unknown; seq?: unknown };
    return typeof stream === "string" && stream !== "" && typeof seq === "number" && Number.isInteger(seq) && seq > 0 ? { stream, seq } : undefined;
  } catch {
    return undefined;
  }
}
