/**
 * The final frames: ACK (optionally confirmed, with retries), NAK with a BackOff-correct
 * delay, and Term with a reason only where the server understands one.
 */
import type { JsMsg } from "@nats-io/jetstream";
import { AckNotConfirmedError, ConnectionClosedError, DisconnectedError } from "../errors.js";
import { failureKind } from "../errors/settle-errors.js";
import { connectionDown, requesterOf, serverVersionOf, type Requester } from "../nats/connection-state.js";
import { AckInbox, consumerRuns, sendPlainAcks, type AckBatch, type ConfirmingConnection } from "../nats/ack-inbox.js";
import { deliveryCount, isSettled, markSettled, replySubject } from "../nats/message-access.js";
import { nakDelay, type NakDelay } from "../policy/nak-delay.js";
import { TERM_REASON_SINCE, atLeast } from "../policy/server-version.js";
import { whenConnected } from "./held-acks.js";
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
   * consumer) is sent again every 100 ms within the window `timeoutMs × (retries + 1)`, and
   * such refusals spend no retry (only an attempt that timed out does). The loops' own default (no
   * `confirmAck` given) keeps asking past it for up to a minute, within the lease, so an
   * election does not turn a committed batch into a duplicate. While the client is between
   * servers no attempt is made (it drops what is published then): the ACK waits for the
   * reconnect, as a plain one does, and its window starts then.
   */
  readonly retries?: number;
}

/** What settling one ACK achieved. */
export interface AckOutcome {
  /** The server confirmed the ACK (only with confirmed ACKs). */
  readonly confirmed: boolean;
  /** Set when a confirmed ACK got no reply after every attempt: it may or may not have landed. */
  readonly error?: unknown;
  /**
   * No frame left (`error` says why: the connection refused it, or closed or stayed down past
   * the budget while the ACK waited for a reconnect): the message is left for redelivery.
   */
  readonly unsent?: true;
  /** It waited for the connection to come back before its first frame. */
  readonly held?: true;
}

const ACK = "+ACK";

/** How long a confirmed ACK waits for its answer when `timeoutMs` is not given. */
export const DEFAULT_CONFIRM_TIMEOUT_MS = 5000;

/**
 * Sends `+ACK` and waits for the server's reply. The first attempt goes through
 * `ackAck()` (which marks the message acked in the client); later attempts publish the
 * request on the reply subject themselves, because the client will not send a second one.
 * Retries go through `connection`, else the connection that delivered the message. Every
 * wait is cut to what `budget` leaves. While the message's connection is between servers no
 * attempt is made (the client drops what is published then, and the attempt would only time
 * out): the ACK waits for the reconnect, as a plain one does, spending no attempt, and its
 * window starts then; `unsent` if the connection closed or `budget` ran out first.
 */
export async function ackConfirmed(
  m: JsMsg,
  options: ConfirmAckOptions,
  connection: Requester | undefined,
  budget: SettleBudget,
): Promise<AckOutcome> {
  const timeoutMs = options.timeoutMs ?? DEFAULT_CONFIRM_TIMEOUT_MS;
  const timeoutFor = (): number => Math.max(1, Math.min(timeoutMs, budget.remainingMs()));
  let retries = options.retries ?? 2;
  if (isSettled(m)) return { confirmed: false };
  const wasDown = connectionDown(m) === true;
  if (wasDown) {
    const unsent = await reconnected(m, budget);
    if (unsent !== undefined) return unsent;
  }
  // Refusals ("no responders": nobody holds the consumer, an election) are asked again every
  // 100 ms within this window and spend no retry: a new leader answers within moments.
  let windowEnd = performance.now() + timeoutMs * (retries + 1);
  let lastError: unknown;
  try {
    const confirmed = await m.ackAck({ timeout: timeoutFor() });
    return wasDown ? { confirmed, held: true } : { confirmed };
  } catch (err) {
    lastError = err;
  }
  let attempts = 1;
  const reply = replySubject(m);
  const requester = connection ?? requesterOf(m);
  while (reply !== undefined && requester !== undefined && budget.remainingMs() > 0) {
    if (connectionDown(m) === true) {
      // It went down after an attempt: the next waits for the reconnect, spending no retry
      // (the one that timed out meanwhile is not counted), and the window starts again then.
      const gone = await reconnected(m, budget);
      // Frames left before: the ACK may or may not have landed.
      if (gone !== undefined) return { confirmed: false, error: new AckNotConfirmedError(attempts, gone.error) };
      windowEnd = Math.max(windowEnd, performance.now() + timeoutMs * (retries + 1));
    } else if (failureKind(lastError) === "no_responders") {
      // The server's "no responders" (503): nobody holds the consumer now.
      const pause = Math.min(REFUSED_PAUSE_MS, windowEnd - performance.now(), budget.remainingMs());
      if (pause <= 0) break;
      // Not unref'd: settling awaits it, bounded by the window and the budget.
      await new Promise((r) => setTimeout(r, pause));
    } else if (retries-- <= 0) break;
    attempts += 1;
    try {
      await requester.request(reply, ACK, { timeout: timeoutFor() });
      return wasDown ? { confirmed: true, held: true } : { confirmed: true };
    } catch (err) {
      lastError = err;
    }
  }
  const error = new AckNotConfirmedError(attempts, lastError);
  return wasDown ? { confirmed: false, error, held: true } : { confirmed: false, error };
}

/**
 * `undefined` once the connection that delivered `m`, now down, is back; an unsent outcome when
 * it closed or `budget` ran out first.
 */
async function reconnected(m: JsMsg, budget: SettleBudget): Promise<AckOutcome | undefined> {
  const outcome = await whenConnected(m, budget);
  if (outcome.kind === "connected") return undefined;
  return { confirmed: false, unsent: true, error: outcome.kind === "closed" ? new ConnectionClosedError() : new DisconnectedError() };
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
  const outcomes: AckOutcome[] = new Array<AckOutcome>(msgs.length).fill(NOT_CONFIRMED);
  const subjects: string[] = [];
  const index: number[] = [];
  for (let i = 0; i < msgs.length; i++) {
    const m = msgs[i]!;
    const reply = isSettled(m) ? undefined : replySubject(m);
    if (reply === undefined) continue;
    subjects.push(reply);
    index.push(i);
    markSettled(m);
  }
  if (subjects.length === 0) return Promise.resolve(outcomes);
  // A draining connection has dropped the reply subscription, or refuses a new one (so does a
  // closed one): no answer can come back, yet frames still leave until its subscriptions are
  // drained.
  let batch: ConfirmedBatch | undefined;
  let inbox: AckInbox | undefined;
  try {
    inbox = AckInbox.for(nc);
    if (nc.isDraining?.() !== true && inbox.ready()) batch = new ConfirmedBatch(inbox, msgs, options, nc, budget, bridgeElections, subjects, index, outcomes);
  } catch (fault) {
    // The server refuses the inbox (permissions): the loops' own confirmation, which the host
    // did not ask for, falls back to plain ACKs, as on a draining connection; the batch that
    // met the refusal reported it (and one does again each time the inbox asks anew).
    if (bridgeElections && fault === inbox?.refusal) return Promise.resolve(acksWithoutReplies(nc, subjects, index, outcomes, NOT_CONFIRMED));
    // Not a refusal but a fault: the ACKs still leave, and the fault is reported with each of
    // them, not taken for a mere "unconfirmed" (nor thrown into a settling batch).
    return Promise.resolve(acksWithoutReplies(nc, subjects, index, outcomes, { confirmed: false, error: fault }));
  }
  if (batch === undefined) return Promise.resolve(acksWithoutReplies(nc, subjects, index, outcomes, NOT_CONFIRMED));
  const opened = batch;
  return new Promise((resolve) => opened.start(resolve));
}

/**
 * Plain `+ACK`s for a connection that cannot carry replies, each reported `sent`; a refused one
 * is unsent.
 */
function acksWithoutReplies(
  nc: ConfirmingConnection,
  subjects: readonly string[],
  index: readonly number[],
  outcomes: AckOutcome[],
  sent: AckOutcome,
): AckOutcome[] {
  for (const i of index) outcomes[i] = sent;
  const refused = sendPlainAcks(nc, subjects);
  if (refused !== undefined) {
    const unsent = unsentOutcome(nc, refused.error);
    for (const k of refused.unsent) outcomes[index[k]!] = unsent;
  }
  return outcomes;
}

/** A frame the connection refused: the library's own error when it is closed, else the client's. */
function unsentOutcome(nc: ConfirmingConnection, error: unknown): AckOutcome {
  return { confirmed: false, unsent: true, error: nc.isClosed() ? new ConnectionClosedError({ cause: error }) : error };
}

/**
 * One batch of confirmed ACKs in flight: its frames, what the server answered, one timer. One
 * object per batch, its steps methods: `runEach` confirms every message as a batch of its own,
 * so closures made per batch were made per message.
 */
class ConfirmedBatch {
  readonly #msgs: readonly JsMsg[];
  readonly #nc: ConfirmingConnection;
  readonly #budget: SettleBudget;
  readonly #bridgeElections: boolean;
  readonly #subjects: readonly string[];
  /** Each frame's message, as an index into the batch. */
  readonly #index: readonly number[];
  readonly #outcomes: AckOutcome[];
  #resolve: (outcomes: AckOutcome[]) => void = ignoreOutcomes;
  readonly #timeoutMs: number;
  /** How long the attempts may take in all: `timeoutMs × (retries + 1)`. */
  readonly #window: number;
  /**
   * A host's explicit confirmAck: at most `retries` more attempts that timed out. Refused ones
   * (an election) are asked again within the window and spend none.
   */
  readonly #maxAttempts: number;
  /** Attempts whose whole wait passed without every answer. */
  #timedOut = 0;
  /** The timer armed is the short pause after a refusal, not an attempt's wait. */
  #paused = false;
  readonly #started: number;
  #deadline: number;
  /**
   * Per frame: still unconfirmed (1) or confirmed (0); flags, not a set: a batch's frames are
   * answered once each, and a set per batch cost more than every lookup in it.
   */
  readonly #unconfirmed: Uint8Array;
  #missing: number;
  /** Frames the server refused in this attempt (a status instead of a confirmation); made on the first. */
  #refused: Set<number> | undefined = undefined;
  #everRefused = false;
  #attempts = 1;
  /** What the connection threw when it refused a frame, if it did. */
  #failure: unknown = undefined;
  #timer: ReturnType<typeof setTimeout> | undefined = undefined;
  /** The run each run's last frame answers for (first attempt: one reply per run). */
  readonly #runOf: (readonly number[] | undefined)[];
  readonly #runs: readonly (readonly number[])[];
  readonly #sent: AckBatch;
  readonly #inbox: AckInbox;
  readonly #resend = (): void => this.#onTimer();

  constructor(
    inbox: AckInbox,
    msgs: readonly JsMsg[],
    options: ConfirmAckOptions,
    nc: ConfirmingConnection,
    budget: SettleBudget,
    bridgeElections: boolean,
    subjects: readonly string[],
    index: readonly number[],
    outcomes: AckOutcome[],
  ) {
    this.#msgs = msgs;
    this.#nc = nc;
    this.#budget = budget;
    this.#bridgeElections = bridgeElections;
    this.#subjects = subjects;
    this.#index = index;
    this.#outcomes = outcomes;
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_CONFIRM_TIMEOUT_MS;
    this.#window = this.#timeoutMs * ((options.retries ?? 2) + 1);
    this.#maxAttempts = bridgeElections ? Number.POSITIVE_INFINITY : (options.retries ?? 2) + 1;
    this.#started = performance.now();
    this.#deadline = this.#started + this.#window;
    this.#unconfirmed = new Uint8Array(subjects.length).fill(1);
    this.#missing = subjects.length;
    this.#runs = consumerRuns(subjects);
    this.#runOf = new Array<readonly number[] | undefined>(subjects.length);
    for (const run of this.#runs) this.#runOf[run[run.length - 1]!] = run;
    this.#inbox = inbox;
    this.#sent = inbox.open(subjects, (k, status, run) => this.#onAnswer(k, status, run));
  }

  /** The first attempt: one reply per run of frames to one consumer; it answers for the run. */
  start(resolve: (outcomes: AckOutcome[]) => void): void {
    this.#resolve = resolve;
    const refused = this.#sent.sendRuns(this.#runs);
    if (refused === undefined) {
      this.#arm(this.#timeoutMs);
      return;
    }
    // The connection refuses frames now (draining past its subscriptions, or closed): those
    // did not leave, and the ones that did can get no answer any more.
    const unsent = unsentOutcome(this.#nc, refused.error);
    for (const k of refused.unsent) {
      this.#unconfirmed[k] = 0;
      this.#missing -= 1;
      this.#outcomes[this.#index[k]!] = unsent;
    }
    this.#failure = refused.error;
    this.#finish();
  }

  #left(): number {
    return Math.min(this.#deadline - performance.now(), this.#budget.remainingMs());
  }

  #stillMissing(): number[] {
    const out: number[] = [];
    const unconfirmed = this.#unconfirmed;
    for (let k = 0; k < unconfirmed.length; k++) if (unconfirmed[k] === 1) out.push(k);
    return out;
  }

  #finish(): void {
    clearTimeout(this.#timer);
    this.#sent.dispose();
    if (this.#missing > 0) {
      const last = this.#everRefused ? { name: "NoRespondersError" } : { name: "TimeoutError" };
      // The server refused the inbox's subscription meanwhile: that is why nothing came.
      const failure = this.#failure ?? this.#inbox.refusal;
      const error = new AckNotConfirmedError(this.#attempts, failure ?? Object.assign(new Error("no confirmation"), last));
      for (const k of this.#stillMissing()) this.#outcomes[this.#index[k]!] = { confirmed: false, error };
    }
    this.#resolve(this.#outcomes);
  }

  /** Not unref'd: settling awaits it, bounded by the deadline and the budget. */
  #arm(ms: number, paused = false): void {
    clearTimeout(this.#timer);
    this.#paused = paused;
    const wait = Math.min(ms, this.#left());
    this.#timer = wait > 0 ? setTimeout(this.#resend, wait) : undefined;
    if (wait <= 0) this.#finish();
  }

  #onTimer(): void {
    // While the client is between connections nothing it sends arrives: the loops keep asking
    // until it is back, as for an election, up to a minute.
    if (this.#bridgeElections && connectionDown(this.#msgs[0]!) === true) this.#extendDeadline();
    if (!this.#paused) this.#timedOut += 1;
    // A draining connection has dropped the reply subscription: no answer comes any more.
    // The server refused the inbox's subscription: no answer will come to any attempt.
    if (this.#left() <= 0 || this.#nc.isClosed() || this.#nc.isDraining?.() === true || this.#timedOut >= this.#maxAttempts || this.#inbox.refusal !== undefined) {
      this.#finish();
      return;
    }
    this.#attempts += 1;
    this.#refused?.clear();
    try {
      this.#sent.resend(this.#stillMissing());
    } catch (err) {
      // Refused (a timer callback must not throw): these frames left in an earlier attempt.
      this.#failure = err;
      this.#finish();
      return;
    }
    this.#arm(this.#timeoutMs);
  }

  #extendDeadline(): void {
    this.#deadline = Math.min(this.#started + ELECTION_CAP_MS, Math.max(this.#deadline, performance.now() + this.#window));
  }

  /** Whether the answer concerned a frame still unconfirmed. */
  #answered(k: number, status: number): boolean {
    if (this.#unconfirmed[k] !== 1) return false;
    if (status !== 0) {
      this.#everRefused = true;
      (this.#refused ??= new Set()).add(k);
      return true;
    }
    this.#unconfirmed[k] = 0;
    this.#missing -= 1;
    this.#refused?.delete(k);
    this.#outcomes[this.#index[k]!] = CONFIRMED;
    return true;
  }

  #onAnswer(k: number, status: number, run: boolean): void {
    // An answer names a frame of this batch (a run's answer, the last frame of a run); anything
    // else is ignored.
    if (!(k >= 0 && k < this.#subjects.length)) return;
    const members = run ? this.#runOf[k] : undefined;
    if (run && members === undefined) return;
    let any = false;
    if (members === undefined) any = this.#answered(k, status);
    else for (let j = 0; j < members.length; j++) any = this.#answered(members[j]!, status) || any;
    if (!any) return;
    if (status !== 0) {
      // While the server says nobody holds the consumer (an election), the ACK has certainly
      // not landed: keep asking past the usual window, up to a minute, so it reaches the new
      // leader as soon as there is one.
      // (The loops' own default only: a host's explicit confirmAck keeps its own window — and
      // a deleted consumer answers the same way.)
      if (this.#bridgeElections) this.#extendDeadline();
      // Nobody holds the consumer (an election): ask again soon, not at once.
      if (this.#refused!.size === this.#missing) this.#arm(Math.min(this.#timeoutMs, REFUSED_PAUSE_MS), true);
      return;
    }
    if (this.#missing === 0) this.#finish();
  }
}

/** How soon an ACK the server refused (no consumer leader) is asked again. */
const REFUSED_PAUSE_MS = 100;
/** How long refused ACKs are asked again at most. */
const ELECTION_CAP_MS = 60_000;

const CONFIRMED: AckOutcome = Object.freeze({ confirmed: true });
const NOT_CONFIRMED: AckOutcome = Object.freeze({ confirmed: false });
const ignoreOutcomes = (): void => {};

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
