/**
 * Sending what the settle decision chose for one message, and reporting what happened. The
 * decision itself is pure (`decide.ts`); everything here is I/O and its failure handling.
 */
import { LATE_GRACE_MS, UNCONFIRMED_GRACE_MS, type AckingDeliveries, type StoredIds } from "./acking-deliveries.js";
import type { JsMsg } from "@nats-io/jetstream";
import { ConnectionClosedError, ConsumerPolicyError, DeadLetterError, DisconnectedError, errorName } from "../errors.js";
import { canConfirmInBatches, type ConfirmingConnection } from "../nats/ack-inbox.js";
import { connectionDown, type Requester } from "../nats/connection-state.js";
import { deliveryCount, deliveryInfo } from "../nats/message-access.js";
import { MetricNames } from "../telemetry/metric-names.js";
import type { MetricsRecorder } from "../telemetry/metrics-recorder.js";
import type { MessageResult, TemporaryFailureAction } from "./batch-result.js";
import { isLastDelivery, type Decision } from "./decide.js";
import { publishDeadLetter, type DeadLetterTarget } from "./dead-letter.js";
import { DEFAULT_CONFIRM_TIMEOUT_MS, ackBatchConfirmed, ackConfirmed, nakWithDelay, termWithReason, type ConfirmAckOptions } from "./frames.js";
import { ackWhenConnected, whenConnected } from "./held-acks.js";
import { defaultNakDelayMs } from "./retry-delay.js";
import type { DeliveryLimits } from "./delivery-limits.js";
import type { SettleBudget } from "./settle-budget.js";
import { publishMessageExhausted, type MessageExhaustedEvent } from "./settle-events.js";

/** How an instance settles: the parts of its options that decide and send the frames. */
export interface SettleConfig {
  /** The host's connection: ACK retries (else the message's own), the server version for Term reasons. */
  readonly connection: (Requester & { readonly info?: unknown }) | undefined;
  /** Confirmed ACKs, when asked for. */
  readonly confirmAck: ConfirmAckOptions | undefined;
  /** What a temporary failure gets while deliveries are left. */
  readonly onTemporaryFailure: TemporaryFailureAction;
  /** Where failures go when they cannot be retried; without it permanent ones are terminated. */
  readonly deadLetter: DeadLetterTarget | undefined;
  /** The BackOff that NAK delays are corrected for (BackOff-aware mode only). */
  readonly nakBackOff: readonly number[] | undefined;
  /** Each consumer's MaxDeliver: the host's, bound, learnt or read from the server. */
  readonly limits: DeliveryLimits;
  /** Where settle metrics go. */
  readonly metrics: MetricsRecorder;
  /** Randomness for the jitter of the default NAK delay. */
  readonly random: () => number;
}

/** A loop's own confirmed ACKs (its default when the host set no `confirmAck`). */
export interface LoopConfirmation {
  readonly options: ConfirmAckOptions;
  readonly connection: ConfirmingConnection;
}

/** What one batch's settling shares: its time budget, its number, its consumer's MaxDeliver. */
export interface SettleScope {
  /** Confirmed ACKs a loop asks for when the host set none. */
  readonly confirm?: LoopConfirmation | undefined;
  /** A loop's messages whose ACK is on its way (another delivery of one is acked, not written). */
  readonly acking?: AckingDeliveries | undefined;
  readonly budget: SettleBudget;
  /** The MaxDeliver of a message's consumer, resolved for this batch (0 or less, or unknown: no last delivery). */
  readonly maxDeliver: (m: JsMsg) => number | undefined;
  readonly batchId: number;
  readonly batchSize: number;
  readonly leaseLost: boolean;
}

/** Attempts of a dead-letter publish on a message's last delivery, and the pauses between them. */
const FINAL_DEAD_LETTER_PAUSES_MS = [0, 250, 1000] as const;

/** Sends the frames of one instance's settle rules. */
export class Settler {
  readonly #config: SettleConfig;
  /** Cleared when a copy landed in the source stream: the target would loop. */
  #deadLetterUsable = true;

  constructor(config: SettleConfig) {
    this.#config = config;
  }

  /** The settle rules the decision needs. */
  get rules(): { readonly temporary: "nak" | "leave"; readonly deadLetter: boolean } {
    return { temporary: this.#config.onTemporaryFailure.action, deadLetter: this.#config.deadLetter !== undefined };
  }

  /** Each consumer's MaxDeliver. */
  get limits(): DeliveryLimits {
    return this.#config.limits;
  }

  /**
   * Carries out `decision` for `m`. Synchronous (a plain result) when nothing needs awaiting:
   * plain ACKs, NAKs, Terms and no-frame outcomes of a connected client.
   */
  apply(m: JsMsg, decision: Decision, error: unknown, scope: SettleScope): MessageResult | Promise<MessageResult> {
    const result = this.#apply(m, decision, error, scope);
    if (!scope.leaseLost) return result;
    return result instanceof Promise ? result.then(markLeaseLost) : markLeaseLost(result);
  }

  #apply(m: JsMsg, decision: Decision, error: unknown, scope: SettleScope): MessageResult | Promise<MessageResult> {
    switch (decision.frame) {
      case "ack":
        return this.#ack(m, scope, undefined);
      case "nak":
        return this.#nak(m, error);
      case "term":
        return this.#term(m, error, scope);
      case "dead_letter":
        return this.#deadLetter(m, error, decision.final, scope);
      case "none":
        if (decision.reason === "exhausted") return this.#exhausted(m, error, "no_dead_letter_target", scope, undefined);
        if (decision.reason === "exhausted_connection_closed") return this.#exhausted(m, error, "connection_closed", scope, new ConnectionClosedError());
        if (decision.reason === "connection_closed") return withError({ msg: m, action: "left", settleError: new ConnectionClosedError() }, error);
        if (decision.reason === "limit_unknown") return withError({ msg: m, action: "left", settleError: limitUnknown(m) }, error);
        return withError({ msg: m, action: "left" }, error);
    }
  }

  /**
   * ACKs of committed messages, confirmed all at once (one reply inbox, one timer), when
   * confirmed ACKs are asked for (by the host, or by a loop's default) and the connection can
   * carry them; `undefined` otherwise (each message is then settled on its own). `sent` says
   * whether the frames left now; a loop's batch whose connection is down waits for the
   * reconnect first. `ids`: the stream sequences and timestamps of `msgs`, when the loop read them already.
   */
  ackMany(msgs: readonly JsMsg[], scope: SettleScope, ids?: StoredIds): { readonly results: Promise<MessageResult[]>; readonly sent: boolean } | undefined {
    const host = this.#config.confirmAck;
    const confirm = host !== undefined ? (canConfirmInBatches(this.#config.connection) ? { options: host, connection: this.#config.connection } : undefined) : scope.confirm;
    if (confirm === undefined || msgs.length === 0) return undefined;
    const down = msgs.some((m) => connectionDown(m) === true);
    const seqs = scope.acking?.begin(msgs, ids);
    // A host's own confirmAck waits for the reconnect too, then keeps its bounded attempts.
    if (down) return { results: this.#confirmAfterReconnect(msgs, confirm, scope, seqs, host === undefined), sent: false };
    return { results: this.#confirm(msgs, confirm, scope, seqs, host === undefined), sent: true };
  }

  #confirm(msgs: readonly JsMsg[], confirm: LoopConfirmation, scope: SettleScope, seqs: readonly number[] | undefined, bridgeElections: boolean, held = false): Promise<MessageResult[]> {
    const started = performance.now();
    return ackBatchConfirmed(msgs, confirm.options, confirm.connection, scope.budget, bridgeElections).then((outcomes) => {
      if (seqs !== undefined) scope.acking!.answered(seqs, outcomes.every((o) => o.confirmed), answeredLate(held, started, confirm.options));
      return msgs.map((msg, i) => {
        const o = outcomes[i]!;
        // Refused by the connection: no frame left, the message comes back after AckWait.
        if (o.unsent === true) this.#config.metrics.count(MetricNames.ACKS_UNSENT_TOTAL);
        // Built without a spread: one object per message, not two.
        const r: MessageResult =
          o.unsent === true
            ? { msg, action: "left", settleError: o.error }
            : o.error !== undefined
              ? { msg, action: "acked", confirmed: o.confirmed, settleError: o.error }
              : { msg, action: "acked", confirmed: o.confirmed };
        return scope.leaseLost ? markLeaseLost(r) : r;
      });
    });
  }

  /**
   * Confirmed ACKs whose connection is between servers: held until it is back, then sent
   * confirmed and, for a loop's own confirmation (`bridgeElections`), asked again through the
   * election that often comes with a reconnect (the server the client left may have held the
   * consumer); a host's `confirmAck` keeps its bounded attempts from there. A plain ACK sent at
   * the reconnect reaches nobody while no new leader exists, and its message comes back to be
   * written twice.
   */
  async #confirmAfterReconnect(msgs: readonly JsMsg[], confirm: LoopConfirmation, scope: SettleScope, seqs: readonly number[] | undefined, bridgeElections: boolean): Promise<MessageResult[]> {
    const metrics = this.#config.metrics;
    // A loop's batch came through one connection: its first message that is down speaks for it.
    const outcome = await whenConnected(msgs.find((m) => connectionDown(m) === true) ?? msgs[0]!, scope.budget);
    if (outcome.kind === "connected") {
      metrics.count(MetricNames.ACKS_HELD_TOTAL, msgs.length);
      return this.#confirm(msgs, confirm, scope, seqs, bridgeElections, true);
    }
    if (seqs !== undefined) scope.acking!.end(seqs, UNCONFIRMED_GRACE_MS);
    metrics.count(MetricNames.ACKS_UNSENT_TOTAL, msgs.length);
    // No frame left: the messages come back after AckWait, as after any ACK that cannot be sent.
    const settleError = (): Error => (outcome.kind === "closed" ? new ConnectionClosedError() : new DisconnectedError());
    return msgs.map((msg) => {
      const r: MessageResult = { msg, action: "left", settleError: settleError() };
      return scope.leaseLost ? markLeaseLost(r) : r;
    });
  }

  /** An ACK: confirmed (awaited, retried within the budget), plain, or held over a disconnect. */
  #ack(m: JsMsg, scope: SettleScope, error: unknown): MessageResult | Promise<MessageResult> {
    const confirmAck = this.#config.confirmAck;
    if (confirmAck !== undefined) {
      // On its way until answered: a delivery of it again meanwhile (it waited for a reconnect,
      // or the server's answer is slow) is acked, not written again, as in a confirmed batch.
      const seqs = scope.acking?.begin([m]);
      const started = performance.now();
      return ackConfirmed(m, confirmAck, this.#config.connection, scope.budget).then(
        (outcome) => {
          if (seqs !== undefined) scope.acking!.answered(seqs, outcome.confirmed, answeredLate(outcome.held === true, started, confirmAck));
          const metrics = this.#config.metrics;
          // Waited for a reconnect that did not come (closed, or a shutdown's bound): no frame left.
          if (outcome.unsent === true) {
            metrics.count(MetricNames.ACKS_UNSENT_TOTAL);
            return withError({ msg: m, action: "left", settleError: outcome.error }, error);
          }
          if (outcome.held === true) metrics.count(MetricNames.ACKS_HELD_TOTAL);
          return withError({ msg: m, action: "acked", confirmed: outcome.confirmed, ...(outcome.error !== undefined ? { settleError: outcome.error } : {}) }, error);
        },
        (err: unknown) => {
          if (seqs !== undefined) scope.acking!.end(seqs, UNCONFIRMED_GRACE_MS);
          return withError({ msg: m, action: "left", settleError: err }, error);
        },
      );
    }
    if (connectionDown(m) === true) return this.#holdAck(m, scope, error);
    try {
      m.ack();
    } catch (settleError) {
      // The frame did not leave: the message is redelivered after AckWait.
      this.#config.metrics.count(MetricNames.ACKS_UNSENT_TOTAL);
      return withError({ msg: m, action: "left", settleError }, error);
    }
    return withError({ msg: m, action: "acked" }, error);
  }

  /**
   * Holds the ACK of a committed message while the client is between connections, for as long
   * as the connection lives: past the lease deadline too (while the only server is down nobody
   * else can be handed the message, and an ACK that arrives late still settles it), until it is
   * sent, the connection closes, or a shutdown's bound passes. Only an ACK that went out counts
   * as `acked`.
   */
  async #holdAck(m: JsMsg, scope: SettleScope, error: unknown): Promise<MessageResult> {
    const seqs = scope.acking?.begin([m]);
    const outcome = await ackWhenConnected(m, scope.budget);
    if (seqs !== undefined) scope.acking!.end(seqs, outcome.kind === "sent" ? LATE_GRACE_MS : UNCONFIRMED_GRACE_MS);
    const metrics = this.#config.metrics;
    if (outcome.kind === "sent") {
      metrics.count(MetricNames.ACKS_HELD_TOTAL);
      return withError({ msg: m, action: "acked" }, error);
    }
    metrics.count(MetricNames.ACKS_UNSENT_TOTAL);
    // No frame left: the message comes back after AckWait, as after any ACK that cannot be sent.
    if (outcome.kind === "closed") return withError({ msg: m, action: "left", settleError: new ConnectionClosedError() }, error);
    if (outcome.kind === "threw") return withError({ msg: m, action: "left", settleError: outcome.error }, error);
    return withError({ msg: m, action: "left", settleError: new DisconnectedError() }, error);
  }

  #nak(m: JsMsg, error: unknown): MessageResult {
    const policy = this.#config.onTemporaryFailure;
    const requested = policy.action === "nak" && policy.delayMs !== undefined ? policy.delayMs : defaultNakDelayMs(deliveryCount(m), this.#config.random());
    try {
      const d = nakWithDelay(m, requested, this.#config.nakBackOff);
      return { msg: m, action: "nacked", error, requestedDelayMs: requested, effectiveDelayMs: d.effectiveMs };
    } catch (settleError) {
      return { msg: m, action: "left", error, settleError };
    }
  }

  #term(m: JsMsg, error: unknown, scope: SettleScope): MessageResult {
    try {
      termWithReason(m, `permanent failure: ${errorName(error)}`, this.#config.connection);
      return { msg: m, action: "termed", error };
    } catch (settleError) {
      // On the last allowed delivery nothing brings the message back: say so, never "left".
      if (isLastDelivery(deliveryCount(m), scope.maxDeliver(m))) return this.#exhausted(m, error, "no_dead_letter_target", scope, settleError);
      return { msg: m, action: "left", error, settleError };
    }
  }

  /**
   * Publishes a copy and ACKs the original only once a stream other than its own confirmed it.
   * On the last delivery a failed publish is retried within the budget, then reported as
   * exhausted: nothing would bring the message back.
   */
  async #deadLetter(m: JsMsg, error: unknown, final: boolean, scope: SettleScope): Promise<MessageResult> {
    const target = this.#config.deadLetter;
    let failure: DeadLetterError = new DeadLetterError("target_unusable");
    const pauses = final ? FINAL_DEAD_LETTER_PAUSES_MS : [0];
    for (const pause of pauses) {
      if (!this.#deadLetterUsable || target === undefined) break;
      if (pause > 0) {
        if (scope.budget.remainingMs() < pause) break;
        await sleep(pause);
      }
      try {
        const receipt = await publishDeadLetter(m, target, error, scope.budget.remainingMs());
        // In a loop with no confirmAck of the host's: the loop's own confirmed ACK, so one lost in
        // an election does not bring the original back for a second copy.
        const confirming = this.#config.confirmAck === undefined ? this.ackMany([m], scope) : undefined;
        const acked = confirming !== undefined ? withError((await confirming.results)[0]!, error) : await this.#ack(m, scope, error);
        // Headers the host's hook could not give are reported, never a reason to hold the copy back.
        const headersError = acked.settleError === undefined ? receipt.headersError : undefined;
        return { ...acked, action: acked.action === "acked" ? "dead_lettered" : acked.action, ...(headersError !== undefined ? { settleError: headersError } : {}) };
      } catch (err) {
        failure = err instanceof DeadLetterError ? err : new DeadLetterError("publish_failed", err);
        if (failure.reason === "source_stream") this.#deadLetterUsable = false;
        // A misconfigured target does not heal by retrying.
        if (failure.reason !== "publish_failed") break;
      }
    }
    if (final) return this.#exhausted(m, error, "dead_letter_failed", scope, failure);
    return { msg: m, action: "left", error, settleError: failure };
  }

  #exhausted(
    m: JsMsg,
    error: unknown,
    reason: MessageExhaustedEvent["reason"],
    scope: SettleScope,
    settleError: unknown,
  ): MessageResult {
    this.#config.metrics.count(MetricNames.MESSAGES_EXHAUSTED_TOTAL);
    publishMessageExhausted(() => ({
      batchId: scope.batchId,
      batchSize: scope.batchSize,
      deliveryCount: deliveryCount(m) ?? 0,
      maxDeliver: scope.maxDeliver(m) ?? 0,
      reason,
      errorName: errorName(settleError ?? error),
    }));
    return withError({ msg: m, action: "exhausted", ...(settleError !== undefined ? { settleError } : {}) }, error);
  }
}

/** Why a failed message was left rather than NAKed: its consumer's MaxDeliver could not be read. */
function limitUnknown(m: JsMsg): ConsumerPolicyError {
  const info = deliveryInfo(m);
  return new ConsumerPolicyError("max_deliver_unknown", {
    stream: info?.stream ?? "?",
    consumer: info?.consumer ?? "?",
    message:
      "its MaxDeliver could not be read, so a NAK could promise a retry that never comes (on the last allowed delivery): the message was left for redelivery after AckWait instead; pass options.maxDeliver, use CommitThenAck.forConsumer, or grant the identity $JS.API.CONSUMER.INFO",
  });
}

function withError(r: MessageResult, error: unknown): MessageResult {
  return error === undefined ? r : { ...r, error };
}

function markLeaseLost(r: MessageResult): MessageResult {
  return { ...r, leaseLost: true };
}

function sleep(ms: number): Promise<void> {
  // Not unref'd: settling awaits it, and it is bounded by the settle budget.
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Whether a confirmed ACK's answer came late: held over a reconnect, or slower than its first attempt's wait. */
function answeredLate(held: boolean, started: number, options: ConfirmAckOptions): boolean {
  return held || performance.now() - started > (options.timeoutMs ?? DEFAULT_CONFIRM_TIMEOUT_MS);
}
