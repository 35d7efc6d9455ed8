/**
 * The errors a host's write throws to choose how its messages are settled.
 */
import { recognise } from "./error-kind.js";

/**
 * Thrown by a host's write to say "this failed, try again later" (NAK or leave for
 * redelivery, by policy). Errors the host does not classify are treated the same way:
 * retrying is safer than losing data.
 *
 * @example
 * ```ts
 * await ack.process(msgs, async (batch) => {
 *   try {
 *     await db.insertMany(batch.map((m) => m.json()));
 *   } catch (err) {
 *     throw new TemporarySinkError("database unavailable", { cause: err });
 *   }
 * });
 * ```
 */
export class TemporarySinkError extends Error {
  /** Always `"TemporarySinkError"`. */
  override readonly name = "TemporarySinkError";

  /**
   * @param message - what failed (keep subjects, payloads and credentials out of it).
   * @param options - standard error options (`cause`).
   */
  constructor(message = "temporary sink failure", options?: ErrorOptions) {
    super(message, options);
  }
}

/**
 * Thrown by a host's write to say "this can never succeed" (a poison message): the message
 * is dead-lettered when a dead-letter target is configured, otherwise terminated.
 *
 * @example
 * ```ts
 * await ack.process(msgs, async (batch) => {
 *   const rows = batch.map((m) => parseOrThrow(m.data));
 *   if (rows.some((r) => r === undefined)) throw new PermanentSinkError("unparseable record");
 *   await db.insertMany(rows);
 * });
 * ```
 */
export class PermanentSinkError extends Error {
  /** Always `"PermanentSinkError"`. */
  override readonly name = "PermanentSinkError";

  /**
   * @param message - what failed (keep subjects, payloads and credentials out of it).
   * @param options - standard error options (`cause`).
   */
  constructor(message = "permanent sink failure", options?: ErrorOptions) {
    super(message, options);
  }
}

recognise(TemporarySinkError, "TemporarySinkError");
recognise(PermanentSinkError, "PermanentSinkError");
