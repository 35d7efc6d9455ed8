/**
 * The compile-time check of what a write resolves with: a value with a `failed` key is read as
 * a report, so in TypeScript it must be one. Types only.
 */
import type { FailedMessage, WriteReport } from "./batch-result.js";

/**
 * What TypeScript asks of a write that resolved with a `failed` key that is not
 * `readonly FailedMessage[]`. No value has this property: a write typed this way does not
 * compile, and the error names what to return instead. At run time such a report fails closed
 * (every message of the batch is settled as a temporary failure, never acknowledged).
 *
 * @example
 * ```ts
 * // error: Property '"failed must be readonly FailedMessage[] …"' is missing … WriteReportExpected
 * await ack.process(msgs, async (batch) => ({ failed: [batch[0]] }));
 * // compiles: one { msg, error } per message that failed
 * await ack.process(msgs, async (batch) => ({ failed: [{ msg: batch[0]!, error: new TemporarySinkError("row locked") }] }));
 * ```
 */
export interface WriteReportExpected {
  /** What to resolve with instead: a {@link WriteReport}. */
  readonly "failed must be readonly FailedMessage[]: one { msg, error } per message that failed": WriteReport;
}

/**
 * The check {@link CommitThenAck.process} and {@link CommitThenAck.run} apply to the value a
 * write resolves with (`R`, awaited): `unknown` — nothing asked — for a value without a
 * `failed` key (nothing, a driver's result, a count) and for a {@link WriteReport};
 * {@link WriteReportExpected} for a value whose `failed` is anything else (an array of
 * messages, `{ message, error }` entries, one object, a `Set`, a count). A write typed
 * `unknown` or `any` is not checked.
 *
 * @typeParam R - what the write returns (a promise of it, or the value itself).
 *
 * @example
 * ```ts
 * type Ok = WriteReportCheck<Promise<{ rowCount: number }>>; // unknown
 * type Report = WriteReportCheck<Promise<WriteReport>>; // unknown
 * type Wrong = WriteReportCheck<Promise<{ failed: JsMsg[] }>>; // WriteReportExpected
 * ```
 */
export type WriteReportCheck<R> = [
  // Every member of the awaited value with a known `failed` key (an index signature is not one).
  Awaited<R> extends infer V
    ? V extends {
        /** Any value: what makes a report. */
        readonly failed?: unknown;
      }
      ? string extends keyof V
        ? never
        : V
      : never
    : never,
] extends [infer Report]
  ? [Report] extends [never]
    ? unknown
    : [Report] extends [
          {
            /** One entry per message that failed. */
            readonly failed?: readonly FailedMessage[];
          },
        ]
      ? unknown
      : WriteReportExpected
  : never;
