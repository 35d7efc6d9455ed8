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
  const fast = ackSubjectNumber(m, 0);
  if (fast !== undefined) return fast;
  try {
    const n = m.info?.deliveryCount;
    return typeof n === "number" && Number.isInteger(n) && n >= 1 ? n : undefined;
  } catch {
    return undefined;
  }
}

/** The stream sequence from the delivery info, when readable. */
export function streamSequence(m: JsMsg): number | undefined {
  const fast = ackSubjectNumber(m, 1);
  if (fast !== undefined) return fast;
  try {
    const seq = m.info?.streamSequence;
    return typeof seq === "number" && Number.isInteger(seq) && seq >= 1 ? seq : undefined;
  } catch {
    return undefined;
  }
}

const DOT = 46;
const ZERO = 48;
const NINE = 57;

/** Where the dots of the last subject scanned are (an ack subject has at most 11). */
const dotsAt = new Int32Array(12);

/** Scans `subject` once: its dots (up to 12) into `dotsAt`; returns how many there are (-1: more). */
function scanDots(subject: string): number {
  let dots = 0;
  // indexOf jumps from dot to dot natively: about twice as fast as reading every character.
  for (let i = subject.indexOf("."); i !== -1; i = subject.indexOf(".", i + 1)) {
    if (dots === 12) return -1;
    dotsAt[dots++] = i;
  }
  return dots;
}

/**
 * Where an ack subject's consumer part ends, the delivery count's token starting there
 * (`$JS.ACK.<stream>.<consumer>.` in the 9-token form, `$JS.ACK.<domain>.<account>.<stream>.<consumer>.`
 * in the 11- or 12-token one); -1 for a subject of another shape. Frames whose subjects share
 * that prefix go to one consumer.
 */
export function consumerPrefixEnd(subject: string): number {
  const d = consumerDot(subject);
  return d < 0 ? -1 : dotsAt[d]! + 1;
}

/**
 * Scans an ack subject into `dotsAt`; returns the place there of the dot that ends its
 * consumer token (the delivery count, stream sequence, consumer sequence and timestamp follow),
 * -1 for a subject of another shape.
 */
function consumerDot(subject: string): number {
  if (!subject.startsWith("$JS.ACK.")) return -1;
  const dots = scanDots(subject);
  return dots === 8 ? 3 : dots === 10 || dots === 11 ? 5 : -1;
}

/**
 * The last message and subject read by {@link ackSubjectNumber}, and its two numbers: callers
 * ask for both in turn. The message is compared first: two subjects of one consumer share a
 * long prefix, so comparing them costs nearly as much as reading one.
 */
let lastMsg: JsMsg | undefined;
let lastReply = "";
let lastCount: number | undefined;
let lastSequence: number | undefined;
/** Where the last subject's timestamp token starts (-1: another shape), and its value once read (`null`: not yet). */
let lastStampFrom = -1;
let lastStamp: number | undefined | null = null;

/**
 * The delivery count (`which` 0) or stream sequence (1) read straight from the ack subject:
 * the client's `info` parses the whole subject into an object on every read, and the loops ask
 * for these per message several times. `undefined` for a subject of another shape (the caller
 * then asks `info`).
 */
function ackSubjectNumber(m: JsMsg, which: 0 | 1): number | undefined {
  const reply = replySubject(m);
  if (reply === undefined) return undefined;
  remember(m, reply);
  return which === 0 ? lastCount : lastSequence;
}

/** Reads `reply` into the memo, unless it holds this message's subject already (one string: compared by reference). */
function remember(m: JsMsg, reply: string): void {
  if (m === lastMsg && reply === lastReply) return;
  const d = consumerDot(reply);
  lastMsg = m;
  lastReply = reply;
  lastStamp = null;
  if (d < 0) {
    lastCount = lastSequence = undefined;
    lastStampFrom = -1;
    return;
  }
  lastCount = tokenNumber(reply, dotsAt[d]! + 1);
  lastSequence = tokenNumber(reply, dotsAt[d + 1]! + 1);
  lastStampFrom = dotsAt[d + 3]! + 1;
}

/** The whole number of 1 to 15 digits starting at `i` and ending at a dot or the end. */
function tokenNumber(s: string, i: number): number | undefined {
  const n = digitsAt(s, i, 15);
  return n !== undefined && n >= 1 ? n : undefined;
}

/** The digits from `i` to a dot or the end, at most `max` of them (past 15, the double is rounded). */
function digitsAt(s: string, i: number, max: number): number | undefined {
  let n = 0;
  let digits = 0;
  for (; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === DOT) break;
    if (c < ZERO || c > NINE) return undefined;
    n = n * 10 + (c - ZERO);
    digits += 1;
  }
  return digits > 0 && digits <= max ? n : undefined;
}

/**
 * The stored message's timestamp as its ack subject carries it (nanoseconds since the epoch,
 * read into a double: one token always gives one number). With the stream sequence it names one
 * stored message: a stream deleted and made again under the same name reuses its sequences,
 * never their timestamps. `undefined` when unreadable.
 */
export function storedStamp(m: JsMsg): number | undefined {
  const reply = replySubject(m);
  if (reply !== undefined) {
    // Right after the message's sequence was read (as the loops do at arrival): only the digits are read.
    remember(m, reply);
    if (lastStampFrom >= 0) {
      if (lastStamp === null) lastStamp = digitsAt(reply, lastStampFrom, 20);
      return lastStamp;
    }
  }
  try {
    const ns = (m.info as { timestampNanos?: unknown } | undefined)?.timestampNanos;
    // A bigint in the 3.x client, a number in the 2.x one.
    return typeof ns === "bigint" ? Number(ns) : typeof ns === "number" && Number.isFinite(ns) ? ns : undefined;
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

