/**
 * The one place that reads what a `JsMsg` does not expose in its public type (its reply
 * subject, whether a final ack was already sent, its delivery info). Every read is
 * structural and guarded, so a different client version degrades to "unknown".
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

/** Marks `m` as finally acknowledged in its client (a frame sent without its own ack methods). */
export function markSettled(m: JsMsg): void {
  try {
    if (typeof (m as unknown as { didAck?: unknown }).didAck === "boolean") (m as unknown as { didAck: boolean }).didAck = true;
  } catch {
    // A client without the flag: nothing to keep in step.
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

/** The stream sequence from the delivery info, when readable. */
export function streamSequence(m: JsMsg): number | undefined {
  try {
    const seq = m.info?.streamSequence;
    return typeof seq === "number" && Number.isInteger(seq) && seq >= 1 ? seq : undefined;
  } catch {
    return undefined;
  }
}

/** The JetStream domain a message came through, when its ack subject names one. */
export function jetStreamDomain(m: JsMsg): string | undefined {
  try {
    const domain = (m.info as { domain?: unknown } | undefined)?.domain;
    return typeof domain === "string" && domain !== "" && domain !== "_" ? domain : undefined;
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

