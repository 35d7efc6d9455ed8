/**
 * The errors of settling: an ACK the server did not confirm, a dead-letter copy that was not made.
 */
import { errorName, recognise } from "./error-kind.js";

/**
 * A confirmed ACK (`confirmAck`) got no reply after every attempt: it may or may not have
 * landed. Found in `MessageResult.settleError`. The client's own error is not kept: its message
 * names the ack reply subject, which carries the stream, the consumer and the message's
 * sequences. Only its class and a fixed phrase for the usual causes are.
 *
 * @example
 * ```ts
 * for (const r of result.messages) {
 *   if (r.settleError instanceof AckNotConfirmedError) log.warn({ attempts: r.settleError.attempts, kind: r.settleError.lastFailure });
 * }
 * ```
 */
export class AckNotConfirmedError extends Error {
  /** Always `"AckNotConfirmedError"`. */
  override readonly name = "AckNotConfirmedError";
  /** Requests sent (the first `ackAck` and every retry). */
  readonly attempts: number;
  /** The last failure's kind: `timeout`, `no_responders` (the consumer is gone) or `error`. */
  readonly lastFailure: "timeout" | "no_responders" | "error";
  /** The class name of the last failure (`TimeoutError`, `RequestError`, ...). */
  readonly lastErrorName: string;

  /**
   * @param attempts - requests sent.
   * @param lastError - the last attempt's error (only its class name and kind are kept).
   */
  constructor(attempts: number, lastError: unknown) {
    const kind = failureKind(lastError);
    const name = errorName(lastError);
    super(`the ACK was not confirmed after ${attempts} attempt${attempts === 1 ? "" : "s"}: ${kind.replace("_", " ")} (${name}); it may or may not have landed`);
    this.attempts = attempts;
    this.lastFailure = kind;
    this.lastErrorName = name;
  }
}

/** What an ACK's confirmation failed on (internal: the settle path asks it too). */
export function failureKind(err: unknown): AckNotConfirmedError["lastFailure"] {
  // Walk the cause chain by class name (and nats 2.x's error code) only; messages are never read.
  for (let e = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (e.name === "TimeoutError" || code === "TIMEOUT") return "timeout";
    if (e.name === "NoResponders" || e.name === "NoRespondersError" || code === "503") return "no_responders";
  }
  return "error";
}

/**
 * Why a dead-letter copy was not confirmed (stable strings):
 *
 * - `publish_failed`: the publish failed or timed out (its error's class name is kept);
 * - `not_confirmed`: the publish returned no stream acknowledgement with a `stream` and a `seq`
 *   (for example a core connection passed where a JetStream client belongs);
 * - `source_stream`: the stream that acknowledged the copy is the message's own stream, which
 *   would consume it again — the target is then unusable for this instance;
 * - `target_unusable`: the target was marked unusable by an earlier `source_stream`;
 * - `headers_refused`: the copy *was* confirmed and the original acknowledged, but without the
 *   headers of `deadLetter.headers`, which threw or returned some that cannot be set (`cause`).
 *
 * @example
 * ```ts
 * const misconfigured: DeadLetterFailure[] = ["not_confirmed", "source_stream", "target_unusable"];
 * ```
 */
export type DeadLetterFailure = "publish_failed" | "not_confirmed" | "source_stream" | "target_unusable" | "headers_refused";

/**
 * A dead-letter copy was not confirmed by a stream, so the original was not acknowledged: it
 * stays redeliverable, or, on its last allowed delivery, is reported as exhausted — or, with
 * reason `headers_refused`, it went out without the host's headers. In `MessageResult.settleError`.
 *
 * @example
 * ```ts
 * for (const r of result.messages) {
 *   if (r.settleError instanceof DeadLetterError && r.settleError.reason !== "publish_failed") {
 *     alert(`the dead-letter target or its headers hook is misconfigured (${r.settleError.reason})`);
 *   }
 * }
 * ```
 */
export class DeadLetterError extends Error {
  /** Always `"DeadLetterError"`. */
  override readonly name = "DeadLetterError";
  /** The stable reason code. */
  readonly reason: DeadLetterFailure;
  /**
   * For `publish_failed`: the class name of the publish's error (`TimeoutError`,
   * `NoRespondersError`, …). The error itself is not kept: its message may name the subject.
   */
  readonly publishErrorName: string | undefined;

  /**
   * @param reason - why the copy was not confirmed.
   * @param publishError - the publish's own error, for `publish_failed` (only its class name is kept).
   * @param options - standard error options (`cause`).
   */
  constructor(reason: DeadLetterFailure, publishError?: unknown, options?: ErrorOptions) {
    const errorClass = publishError === undefined ? undefined : errorName(publishError);
    super(errorClass === undefined ? DEAD_LETTER_MESSAGES[reason] : `${DEAD_LETTER_MESSAGES[reason]} (${errorClass})`, options);
    this.reason = reason;
    this.publishErrorName = errorClass;
  }
}

const DEAD_LETTER_MESSAGES: Readonly<Record<DeadLetterFailure, string>> = {
  publish_failed: "the dead-letter publish failed: the original stays redeliverable",
  not_confirmed:
    "the dead-letter publish returned no stream acknowledgement (stream and seq): pass a JetStream client (jetstream(nc)), not a core connection, and make sure a stream captures the subject",
  source_stream:
    "the dead-letter copy was stored by the message's own stream, which would consume it again: use a subject that another stream captures",
  target_unusable: "the dead-letter target was found to loop back into the source stream earlier: fix the subject and restart",
  headers_refused: "the dead-letter copy was published with the library's headers only: options.deadLetter.headers threw or returned headers that cannot be set (see cause)",
};

recognise(AckNotConfirmedError, "AckNotConfirmedError");
recognise(DeadLetterError, "DeadLetterError");
