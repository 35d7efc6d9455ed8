/**
 * Confirmed ACKs for a whole batch in one go. The client's `ackAck()` makes a request per
 * message (a reply registration and a timer each), so confirming a batch of 100 costs 100 of
 * each. Here one wildcard subscription per connection receives every reply, the `+ACK` frames of
 * a batch go out back to back, and one timer waits for them all.
 *
 * The first attempt asks for one reply per run of frames to the same consumer: only the run's
 * last `+ACK` carries a reply subject. Its confirmation covers the run because the frames left
 * in one synchronous loop on one connection, in order: the client writes its buffer to one
 * socket in order, and a reconnect drops what it had not written (it starts every attempt with
 * an empty buffer), so the last frame cannot arrive without the ones before it; the server
 * handles one client's frames in order, and a consumer's ACKs in order. So the server does the
 * work of one reply per batch, not one per message. Later attempts (after a timeout or a
 * refusal) ask for a reply to every frame, so whatever is still unconfirmed is known exactly.
 */

import { consumerPrefixEnd } from "./message-access.js";

/** What confirming needs of a connection (a `NatsConnection`). */
export interface ConfirmingConnection {
  subscribe(subject: string, options: { callback: (err: unknown, msg: { subject: string; headers?: { code?: number } | undefined }) => void }): { unsubscribe(): void };
  publish(subject: string, payload: Uint8Array, options?: { reply: string }): void;
  isClosed(): boolean;
  /** Both clients have it: a draining connection has dropped (or refuses) the reply subscription. */
  isDraining?(): boolean;
}

/** Whether `nc` can carry batch confirmations. */
export function canConfirmInBatches(nc: unknown): nc is ConfirmingConnection {
  const c = nc as Partial<ConfirmingConnection> | null | undefined;
  return c !== null && c !== undefined && typeof c.subscribe === "function" && typeof c.publish === "function" && typeof c.isClosed === "function";
}

/** One batch's frames and answers (see {@link AckInbox.open}). */
export interface AckBatch {
  /**
   * Sends `+ACK` to every subject of each run (indexes into the batch's subjects, all to one
   * consumer), a reply asked only of each run's last frame. When the connection refuses a
   * publish (draining past its subscriptions, or closed), stops there and returns the error and
   * the indexes whose frame did not leave.
   */
  sendRuns(runs: readonly (readonly number[])[]): RefusedFrames | undefined;
  /** Sends `+ACK` again to each of `indexes`, each asking for its own reply; throws what the connection throws. */
  resend(indexes: readonly number[]): void;
  dispose(): void;
}

/** Frames the connection refused to publish, and why. */
export interface RefusedFrames {
  readonly error: unknown;
  /** Indexes into the batch's subjects, in sending order. */
  readonly unsent: readonly number[];
}

/** Encoded once: every frame of every batch sends the same bytes. */
const ACK = new TextEncoder().encode("+ACK");

/**
 * Sends a plain `+ACK` (no reply asked) to each of `subjects`, in order; stops at the first the
 * connection refuses and returns the error and the indexes not sent.
 */
export function sendPlainAcks(nc: ConfirmingConnection, subjects: readonly string[]): RefusedFrames | undefined {
  let k = 0;
  try {
    for (; k < subjects.length; k++) nc.publish(subjects[k]!, ACK);
  } catch (error) {
    const unsent: number[] = [];
    for (; k < subjects.length; k++) unsent.push(k);
    return { error, unsent };
  }
  return undefined;
}

/** Marks a reply subject that answers for a run ("r"). */
const R = "r".charCodeAt(0);

/**
 * Splits the batch's subjects into runs of consecutive frames to one consumer (indexes, in
 * order). A subject of an unknown shape is a run of its own.
 */
export function consumerRuns(subjects: readonly string[]): number[][] {
  const runs: number[][] = [];
  let current: number[] | undefined;
  let prefix = "";
  // Dots after the prefix: the same form (the tokens after the consumer) as the run's first.
  let tail = -1;
  for (let i = 0; i < subjects.length; i++) {
    const s = subjects[i]!;
    if (current !== undefined && tail >= 0 && s.startsWith(prefix) && dotsFrom(s, prefix.length) === tail) {
      current.push(i);
      continue;
    }
    current = [i];
    runs.push(current);
    const end = consumerPrefixEnd(s);
    prefix = end > 0 ? s.slice(0, end) : "";
    tail = end > 0 ? dotsFrom(s, end) : -1;
  }
  return runs;
}

function dotsFrom(s: string, from: number): number {
  let n = 0;
  // indexOf jumps from dot to dot natively: about twice as fast as reading every character.
  for (let i = s.indexOf(".", from); i !== -1; i = s.indexOf(".", i + 1)) n += 1;
  return n;
}

const inboxes = new WeakMap<object, AckInbox>();
/** How long a subscription the server refused is not asked again. */
const RESUBSCRIBE_AFTER_MS = 30_000;
let batches = 0;

/** The reply inbox of one connection, shared by every batch confirmed through it. */
export class AckInbox {
  readonly #prefix: string;
  readonly #waiting = new Map<string, (index: number, status: number, run: boolean) => void>();
  readonly #nc: ConfirmingConnection;
  #subscribed = false;
  /** What the server answered when it refused the subscription (a permissions violation). */
  #refusal: unknown = undefined;
  #refusedUntil = 0;

  private constructor(nc: ConfirmingConnection) {
    this.#nc = nc;
    const base = (nc as { options?: { inboxPrefix?: unknown } }).options?.inboxPrefix;
    // The connection's own inbox prefix: accounts that restrict replies allow that one.
    this.#prefix = `${typeof base === "string" && base !== "" ? base : "_INBOX"}.${randomToken()}`;
  }

  static for(nc: ConfirmingConnection): AckInbox {
    let inbox = inboxes.get(nc);
    if (inbox === undefined) inboxes.set(nc, (inbox = new AckInbox(nc)));
    return inbox;
  }

  /**
   * Opens a batch: `answered(i, status, run)` is called for every answer to a frame asking for
   * one — `status` 0 when the server confirmed the ACK, else the status it sent instead (503:
   * nobody holds the consumer, the ACK was not taken); `run` when the frame was the last of a
   * run sent by `sendRuns`, so its answer covers the whole run. Dispose of the handle when done.
   */
  open(ackSubjects: readonly string[], answered: (index: number, status: number, run: boolean) => void): AckBatch {
    const token = `${(++batches).toString(36)}`;
    this.#waiting.set(token, answered);
    return new InboxBatch(this.#nc, this.#waiting, token, `${this.#prefix}.${token}.`, ackSubjects);
  }

  /**
   * The server's refusal of the inbox's subscription while it stands (a permissions
   * violation): no answer can come to a batch that asked for one.
   */
  get refusal(): unknown {
    return this.#refusal;
  }

  /**
   * Subscribes the inbox on first use. False when the connection refuses the subscription
   * (it is draining or closed): no answer could come back, and a later batch asks again.
   * Any other refusal is a fault and is thrown, as is the server's refusal of the subscription
   * for 30 s after it came (then the inbox subscribes again: permissions can be reloaded).
   * Call before `open`.
   */
  ready(): boolean {
    if (this.#refusal !== undefined) {
      if (performance.now() < this.#refusedUntil) throw this.#refusal;
      this.#refusal = undefined;
    }
    if (this.#subscribed) return true;
    const offset = this.#prefix.length + 1;
    try {
      this.#nc.subscribe(`${this.#prefix}.>`, {
        callback: (err, msg) => {
          if (err) {
            // The server refused the subscription (the account may not subscribe to the
            // inbox's wildcard) and the client closed it: no answer will come. Not to be
            // taken for slow answers, batch after batch.
            this.#refusal = err;
            this.#refusedUntil = performance.now() + RESUBSCRIBE_AFTER_MS;
            this.#subscribed = false;
            return;
          }
          const rest = msg.subject.slice(offset);
          const dot = rest.indexOf(".");
          const run = rest.charCodeAt(dot + 1) === R;
          // Anything else published to the inbox names no frame: only our own digits count.
          const index = frameIndex(rest, run ? dot + 2 : dot + 1);
          if (dot < 0 || index < 0) return;
          this.#waiting.get(rest.slice(0, dot))?.(index, msg.headers?.code ?? 0, run);
        },
      });
    } catch (error) {
      // Draining or closed is the one refusal that means "no replies"; anything else (a prefix
      // the client will not take as a subject, say) must not pass silently as "unconfirmed".
      if (this.#nc.isClosed() || this.#nc.isDraining?.() === true) return false;
      throw error;
    }
    this.#subscribed = true;
    return true;
  }
}

/** A batch's handle on the inbox: one object, no closures (a `runEach` message is a batch of its own). */
class InboxBatch implements AckBatch {
  readonly #nc: ConfirmingConnection;
  readonly #waiting: Map<string, unknown>;
  readonly #token: string;
  readonly #prefix: string;
  readonly #subjects: readonly string[];

  constructor(nc: ConfirmingConnection, waiting: Map<string, unknown>, token: string, prefix: string, subjects: readonly string[]) {
    this.#nc = nc;
    this.#waiting = waiting;
    this.#token = token;
    this.#prefix = prefix;
    this.#subjects = subjects;
  }

  sendRuns(runs: readonly (readonly number[])[]): RefusedFrames | undefined {
    const nc = this.#nc;
    const subjects = this.#subjects;
    // Where the sending is, for a refusal: one try around the loops, not one per frame.
    let r = 0;
    let j = 0;
    try {
      for (; r < runs.length; r++) {
        const run = runs[r]!;
        const last = run.length - 1;
        for (j = 0; j < last; j++) nc.publish(subjects[run[j]!]!, ACK);
        nc.publish(subjects[run[last]!]!, ACK, { reply: `${this.#prefix}r${run[last]!}` });
      }
    } catch (error) {
      const unsent = runs[r]!.slice(j);
      for (let q = r + 1; q < runs.length; q++) unsent.push(...runs[q]!);
      return { error, unsent };
    }
    return undefined;
  }

  resend(indexes: readonly number[]): void {
    for (const i of indexes) this.#nc.publish(this.#subjects[i]!, ACK, { reply: `${this.#prefix}${i}` });
  }

  dispose(): void {
    this.#waiting.delete(this.#token);
  }
}

/** The frame index written as digits from `from` to the end of `s`; -1 for anything else. */
function frameIndex(s: string, from: number): number {
  if (from >= s.length || s.length - from > 9) return -1;
  let n = 0;
  for (let i = from; i < s.length; i++) {
    const c = s.charCodeAt(i) - 48;
    if (c < 0 || c > 9) return -1;
    n = n * 10 + c;
  }
  return n;
}

function randomToken(): string {
  return Array.from(globalThis.crypto.getRandomValues(new Uint8Array(12)), (b) => b.toString(36).padStart(2, "0")).join("");
}
