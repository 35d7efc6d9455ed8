/**
 * The final frames: ACK (optionally confirmed, with retries), NAK with a BackOff-correct
 * delay, and Term with a reason only where the server understands one.
 */
import type { JsMsg } from "@nats-io/jetstream";
import { AckNotConfirmedError } from "../errors.js";
import { connectionDown, requesterOf, serverVersionOf, type Requester } from "../nats/connection-state.js";
import { AckInbox, consumerRuns, type ConfirmingConnection } from "../nats/ack-inbox.js";
import { deliveryCount, isSettled, markSettled, replySubject } from "../nats/message-access.js";
import { nakDelay, type NakDelay } from "../policy/nak-delay.js";
import { TERM_REASON_SINCE, atLeast } from "../policy/server-version.js";
import type { SettleBudget } from "./settle-budget.js";

/**
 * Confirmed ACKs: wait for the server's reply, retry on timeout.
 *
 * @example
 * ```ts
 * const ack = new CommitThenAck({ connection: nc, confirmAck: { timeoutMs: 2_000, retries: 2 } });
 * ```
 */
export interface ConfirmAckOptions {
  /** Reply timeout per attempt; default 5000 ms. */
  readonly timeoutMs?: number;
  /**
   * Attempts after the first, integer 0 ..= 10; default 2. Retries publish `+ACK` requests on
   * the reply subject, through `connection` or else the connection that delivered the message.
   * An ACK the server refuses with "no responders" (a consumer leader election, or a deleted
   * consumer) is sent again every 100 ms within this window. The loops' own default (no
   * `confirmAck` given) keeps asking past it for up to a minute, within the lease, so an
   * election does not turn a committed batch into a duplicate.
   */
  readonly retries?: number;
}

/** What settling one ACK achieved. */
export interface AckOutcome {
  /** The server confirmed the ACK (only with confirmed ACKs). */
  readonly confirmed: boolean;
  /** Set when a confirmed ACK got no reply after every attempt: it may or may not have landed. */
  readonly error?: unknown;
}

const ACK = "+ACK";

/** How long a confirmed ACK waits for its answer when `timeoutMs` is not given. */
export const DEFAULT_CONFIRM_TIMEOUT_MS = 5000;

/**
 * Sends `+ACK` and waits for the server's reply. The first attempt goes through
 * `ackAck()` (which marks the message acked in the client); later attempts publish the
 * request on the reply subject themselves, because the client will not send a second one.
 * Retries go through `connection`, else the connection that delivered the message. Every
 * wait is cut to what `budget` leaves; the first frame is always sent.
 */
export async function ackConfirmed(
  m: JsMsg,
  options: ConfirmAckOptions,
  connection: Requester | undefined,
  budget: SettleBudget,
): Promise<AckOutcome> {
  const timeoutFor = (): number => Math.max(1, Math.min(options.timeoutMs ?? DEFAULT_CONFIRM_TIMEOUT_MS, budget.remainingMs()));
  const retries = options.retries ?? 2;
  if (isSettled(m)) return { confirmed: false };
  let lastError: unknown;
  try {
    if (await m.ackAck({ timeout: timeoutFor() })) return { confirmed: true };
    return { confirmed: false };
  } catch (err) {
    lastError = err;
  }
  let attempts = 1;
  const reply = replySubject(m);
  const requester = connection ?? requesterOf(m);
  for (let attempt = 0; attempt < retries && reply !== undefined && requester !== undefined && budget.remainingMs() > 0; attempt++) {
    attempts += 1;
    try {
      await requester.request(reply, ACK, { timeout: timeoutFor() });
      return { confirmed: true };
    } catch (err) {
      lastError = err;
    }
  }
  return { confirmed: false, error: new AckNotConfirmedError(attempts, lastError) };
}

/**
 * Sends `+ACK` for every message of `msgs` with replies to one inbox and waits for the server's
 * answers: one timer for the batch. The first attempt asks one reply of each run of frames to
 * one consumer (see `AckInbox`); later ones one of every frame still unconfirmed. Missing
 * answers are asked again on each timeout, and sooner
 * while the server says nobody holds the consumer (an election): until `timeoutMs × (retries + 1)`
 * has passed — with `bridgeElections`, longer while the server keeps refusing them, up to a
 * minute — within `budget`.
 * Cheaper than an `ackAck()` per message; outcomes in batch order.
 */
export function ackBatchConfirmed(
  msgs: readonly JsMsg[],
  options: ConfirmAckOptions,
  nc: ConfirmingConnection,
  budget: SettleBudget,
  bridgeElections: boolean,
): Promise<AckOutcome[]> {
  const outcomes: AckOutcome[] = msgs.map(() => NOT_CONFIRMED);
  const subjects: string[] = [];
  const index: number[] = [];
  msgs.forEach((m, i) => {
    const reply = isSettled(m) ? undefined : replySubject(m);
    if (reply === undefined) return;
    subjects.push(reply);
    index.push(i);
    markSettled(m);
  });
  if (subjects.length === 0) return Promise.resolve(outcomes);
  const timeoutMs = options.timeoutMs ?? DEFAULT_CONFIRM_TIMEOUT_MS;
  const window = timeoutMs * ((options.retries ?? 2) + 1);
  const started = performance.now();
  let deadline = started + window;
  return new Promise((resolve) => {
    // Per frame: still unconfirmed (1) or confirmed (0); flags, not a set: a batch's frames
    // are answered once each, and a set per batch cost more than every lookup in it.
    const unconfirmed = new Uint8Array(subjects.length).fill(1);
    let missing = subjects.length;
    // Those the server refused in this attempt (a status instead of a confirmation).
    const refused = new Set<number>();
    let everRefused = false;
    let attempts = 1;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const left = (): number => Math.min(deadline - performance.now(), budget.remainingMs());
    const stillMissing = (): number[] => {
      const out: number[] = [];
      for (let k = 0; k < unconfirmed.length; k++) if (unconfirmed[k] === 1) out.push(k);
      return out;
    };
    const finish = (): void => {
      clearTimeout(timer);
      sent.dispose();
      const last = everRefused ? { name: "NoRespondersError" } : { name: "TimeoutError" };
      const error = missing > 0 ? new AckNotConfirmedError(attempts, Object.assign(new Error("no confirmation"), last)) : undefined;
      if (missing > 0) for (const k of stillMissing()) outcomes[index[k]!] = { confirmed: false, error };
      resolve(outcomes);
    };
    // Not unref'd: settling awaits it, bounded by the deadline and the budget.
    const arm = (ms: number): void => {
      clearTimeout(timer);
      const wait = Math.min(ms, left());
      timer = wait > 0 ? setTimeout(resend, wait) : undefined;
      if (wait <= 0) finish();
    };
    // A host's explicit confirmAck: at most `retries` more attempts, refused or timed out.
    const maxAttempts = bridgeElections ? Number.POSITIVE_INFINITY : (options.retries ?? 2) + 1;
    const resend = (): void => {
      // While the client is between connections nothing it sends arrives: the loops keep asking
      // until it is back, as for an election, up to a minute.
      if (bridgeElections && connectionDown(msgs[0]!) === true) deadline = Math.min(started + ELECTION_CAP_MS, Math.max(deadline, performance.now() + window));
      if (left() <= 0 || nc.isClosed() || attempts >= maxAttempts) {
        finish();
        return;
      }
      attempts += 1;
      refused.clear();
      sent.resend(stillMissing());
      arm(timeoutMs);
    };
    // The first attempt: one reply per run of frames to one consumer; it answers for the run.
    const runs = consumerRuns(subjects);
    // The run each run's last frame answers for.
    const runOf: (readonly number[] | undefined)[] = new Array<readonly number[] | undefined>(subjects.length);
    for (const run of runs) runOf[run[run.length - 1]!] = run;
    // Whether the answer concerned a frame still unconfirmed.
    const answered = (k: number, status: number): boolean => {
      if (unconfirmed[k] !== 1) return false;
      if (status !== 0) {
        everRefused = true;
        refused.add(k);
        return true;
      }
      unconfirmed[k] = 0;
      missing -= 1;
      if (refused.size > 0) refused.delete(k);
      outcomes[index[k]!] = CONFIRMED;
      return true;
    };
    const sent = AckInbox.for(nc).open(subjects, (k, status, run) => {
      // An answer names a frame of this batch (a run's answer, the last frame of a run); anything
      // else is ignored.
      if (!(k >= 0 && k < subjects.length)) return;
      const members = run ? runOf[k] : undefined;
      if (run && members === undefined) return;
      let any = false;
      if (members === undefined) any = answered(k, status);
      else for (let j = 0; j < members.length; j++) any = answered(members[j]!, status) || any;
      if (!any) return;
      if (status !== 0) {
        // While the server says nobody holds the consumer (an election), the ACK has certainly
        // not landed: keep asking past the usual window, up to a minute, so it reaches the new
        // leader as soon as there is one.
        // (The loops' own default only: a host's explicit confirmAck keeps its own window — and
        // a deleted consumer answers the same way.)
        if (bridgeElections) deadline = Math.min(started + ELECTION_CAP_MS, Math.max(deadline, performance.now() + window));
        // Nobody holds the consumer (an election): ask again soon, not at once.
        if (refused.size === missing) arm(Math.min(timeoutMs, REFUSED_PAUSE_MS));
        return;
      }
      if (missing === 0) finish();
    });
    sent.sendRuns(runs);
    arm(timeoutMs);
  });
}

/** How soon an ACK the server refused (no consumer leader) is asked again. */
const REFUSED_PAUSE_MS = 100;
/** How long refused ACKs are asked again at most. */
const ELECTION_CAP_MS = 60_000;

const CONFIRMED: AckOutcome = Object.freeze({ confirmed: true });
const NOT_CONFIRMED: AckOutcome = Object.freeze({ confirmed: false });

/**
 * Sends `-NAK` with the delay that makes the server wait `requestedMs` (see
 * {@link nakDelay}); returns what was sent and the wait the server will apply.
 */
export function nakWithDelay(m: JsMsg, requestedMs: number | undefined, backOffMs: readonly number[] | undefined): NakDelay {
  const d = nakDelay(requestedMs ?? 0, deliveryCount(m), backOffMs);
  if (d.sendMs > 0) m.nak(d.sendMs);
  else m.nak();
  return d;
}

/**
 * Terminates a message. A reason is sent only to servers known to understand it (2.10.4
 * and later): older servers ignore `+TERM <reason>` entirely and redeliver the message.
 *
 * @returns whether the reason was sent.
 */
export function termWithReason(m: JsMsg, reason: string, connection: unknown): boolean {
  const version = serverVersionOf(connection) ?? serverVersionOf(m);
  if (atLeast(version, TERM_REASON_SINCE) === true) {
    m.term(reason);
    return true;
  }
  m.term();
  return false;
}
