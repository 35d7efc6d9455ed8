/**
 * Settling one message: the frame its outcome calls for, sent, and what happened reported.
 */
import type { JsMsg } from "@nats-io/jetstream";
import type { NatsConnection } from "@nats-io/transport-node";
import { ConnectionClosedError, DisconnectedError, errorName } from "../errors.js";
import { connectionDown } from "../nats/connection-state.js";
import type { MessageResult, TemporaryFailureAction } from "./batch-result.js";
import { publishDeadLetter, type DeadLetterTarget } from "./dead-letter.js";
import { ackConfirmed, ackNow, nakWithDelay, termWithReason, type AckOutcome, type ConfirmAckOptions } from "./frames.js";

/** How an instance settles: the parts of its options that decide the frames. */
export interface SettleConfig {
  /** The messages' connection: server version (Term reasons), ACK retries. */
  readonly connection: Pick<NatsConnection, "request" | "isClosed" | "info"> | undefined;
  /** Confirmed ACKs, when asked for. */
  readonly confirmAck: ConfirmAckOptions | undefined;
  /** What a temporary failure gets. */
  readonly onTemporaryFailure: TemporaryFailureAction;
  /** Where permanent failures go; without it they are terminated. */
  readonly deadLetter: DeadLetterTarget | undefined;
  /** The BackOff that NAK delays are corrected for (BackOff-aware mode only). */
  readonly nakBackOff: readonly number[] | undefined;
}

/** Sends the frames of one instance's settle rules. */
export class Settler {
  readonly #config: SettleConfig;

  constructor(config: SettleConfig) {
    this.#config = config;
  }

  /** Whether successes are confirmed ACKs (awaited) rather than plain ones. */
  get confirmsAcks(): boolean {
    return this.#config.confirmAck !== undefined;
  }

  /**
   * A plain ACK, sent now. A client between connections drops frames without an error, so the
   * result says so (the message will most likely be redelivered; confirmed ACKs retry after the
   * reconnect instead).
   */
  successNow(m: JsMsg, closed: boolean): MessageResult {
    if (closed) return { msg: m, action: "left", settleError: new ConnectionClosedError() };
    const down = connectionDown(m) === true;
    try {
      ackNow(m);
    } catch (settleError) {
      return { msg: m, action: "acked", settleError };
    }
    return down ? { msg: m, action: "acked", settleError: new DisconnectedError() } : { msg: m, action: "acked" };
  }

  /** An ACK by the configured mode: confirmed (awaited, retried) or plain. */
  async success(m: JsMsg, closed: boolean): Promise<MessageResult> {
    const confirmAck = this.#config.confirmAck;
    if (confirmAck === undefined) return this.successNow(m, closed);
    if (closed) return { msg: m, action: "left", settleError: new ConnectionClosedError() };
    let outcome: AckOutcome;
    try {
      outcome = await ackConfirmed(m, confirmAck, this.#config.connection);
    } catch (err) {
      outcome = { confirmed: false, error: err };
    }
    return { msg: m, action: "acked", confirmed: outcome.confirmed, ...(outcome.error !== undefined ? { settleError: outcome.error } : {}) };
  }

  /** A temporary failure: NAK (with the configured delay) or leave; after a lost lease, leave. */
  temporary(m: JsMsg, error: unknown, leaseLost: boolean): MessageResult {
    const policy = this.#config.onTemporaryFailure;
    if (policy.action === "leave" || leaseLost) return { msg: m, action: "left", error };
    try {
      const d = nakWithDelay(m, policy.delayMs, this.#config.nakBackOff);
      return { msg: m, action: "nacked", error, requestedDelayMs: policy.delayMs ?? 0, effectiveDelayMs: d.effectiveMs };
    } catch (settleError) {
      return { msg: m, action: "left", error, settleError };
    }
  }

  /** A permanent failure: dead-letter then ACK, or Term without a target. */
  async permanent(m: JsMsg, error: unknown): Promise<MessageResult> {
    const target = this.#config.deadLetter;
    if (!target) {
      try {
        termWithReason(m, `permanent failure: ${errorName(error)}`, this.#config.connection);
        return { msg: m, action: "termed", error };
      } catch (settleError) {
        return { msg: m, action: "left", error, settleError };
      }
    }
    try {
      await publishDeadLetter(m, target, errorName(error));
    } catch (settleError) {
      // The copy is not confirmed: keep the original redeliverable.
      const retry = this.temporary(m, error, false);
      return { ...retry, settleError };
    }
    const acked = await this.success(m, false);
    return { ...acked, action: "dead_lettered", error };
  }
}
