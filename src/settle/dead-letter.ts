/**
 * Dead-lettering a poison message: publish a copy through JetStream and wait for the stream
 * to confirm it. The caller acknowledges the original only after that.
 */
import type { JsMsg } from "@nats-io/jetstream";
import type { MsgHdrs } from "@nats-io/transport-node";
import { DeadLetterError } from "../errors.js";
import { deliveryInfo } from "../nats/message-access.js";

/**
 * Headers set on a dead-lettered copy. The payload is unchanged; the original headers are kept,
 * except the `Nats-` ones the server interprets (message id, expectations, TTL).
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
  /** The class name of the error (never its message). */
  ERROR: "Dead-Letter-Error",
} as const;

/**
 * Where poison messages go: a JetStream client (its `publish` waits for the stream's ack) and a
 * subject captured by a stream.
 *
 * @example
 * ```ts
 * const ack = new CommitThenAck({ deadLetter: { js: jetstream(nc), subject: "dlq.orders" } });
 * ```
 */
export interface DeadLetterTarget {
  /** A JetStream client; only `publish` is used. */
  readonly js: {
    /** Publishes and resolves with the stream's ack (`JetStreamClient.publish`). */
    publish(
      subject: string,
      payload?: Uint8Array | string,
      options?: { headers?: MsgHdrs; msgID?: string; timeout?: number },
    ): Promise<unknown>;
  };
  /** The dead-letter subject (a stream must capture it). */
  readonly subject: string;
  /** Publish timeout; default the client's. */
  readonly timeoutMs?: number;
}

/** The JetStream client's own publish timeout, assumed when the target sets none and a cap applies. */
const DEFAULT_PUBLISH_TIMEOUT_MS = 5000;

/** A confirmed copy: the stream that stored it and its sequence there. */
export interface DeadLetterReceipt {
  readonly stream: string;
  readonly seq: number;
}

/**
 * Publishes `m` to the dead-letter subject and resolves with the stream's acknowledgement.
 * The message id is unique per stream, consumer and sequence, so a retried publish is
 * deduplicated and two consumers of one stream keep two copies.
 *
 * `maxWaitMs` caps the publish timeout (the settle budget left during a shutdown).
 *
 * @throws {@link DeadLetterError} when the publish failed, returned no acknowledgement with a
 *   `stream` and a `seq`, or was stored by the message's own stream.
 */
export async function publishDeadLetter(m: JsMsg, target: DeadLetterTarget, errorClass: string, maxWaitMs = Number.POSITIVE_INFINITY): Promise<DeadLetterReceipt> {
  // During a shutdown the publish may wait only what the settle budget has left.
  const timeout = Number.isFinite(maxWaitMs) ? Math.max(1, Math.min(target.timeoutMs ?? DEFAULT_PUBLISH_TIMEOUT_MS, maxWaitMs)) : target.timeoutMs;
  // Loaded on first use, so the root entry does not need a NATS client to load.
  const { headers } = await import("@nats-io/transport-node");
  const info = deliveryInfo(m);
  const h = headers();
  const original = m.headers;
  if (original) {
    for (const [key, values] of original) {
      if (/^nats-/i.test(key)) continue;
      for (const v of values) h.append(key, v);
    }
  }
  if (info) {
    h.set(DeadLetterHeaders.STREAM, info.stream);
    h.set(DeadLetterHeaders.CONSUMER, info.consumer);
    h.set(DeadLetterHeaders.STREAM_SEQUENCE, String(info.streamSequence));
    h.set(DeadLetterHeaders.DELIVERY_COUNT, String(info.deliveryCount));
  }
  h.set(DeadLetterHeaders.SUBJECT, m.subject);
  h.set(DeadLetterHeaders.ERROR, errorClass);
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
  return receipt;
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
