/**
 * Checking a dead-letter subject at setup, where the identity may look streams up: a subject
 * the source stream itself captures would consume every poison message again (a loop), and a
 * subject no stream captures would store nothing. Either fails closed before the first fetch.
 * An identity that may not look streams up is not refused: the PubAck check at publish time
 * still refuses a copy stored by the source stream.
 */
import { ConsumerPolicyError } from "../errors.js";

/** The part of a JetStream manager this check needs. */
export interface StreamFinder {
  readonly streams?: { find?(subject: string): Promise<string> };
}

/** How long the lookup may take before it is skipped (an identity without the permission may get no answer). */
const LOOKUP_TIMEOUT_MS = 2000;
const TIMED_OUT: unique symbol = Symbol("timed out");

/** Refuses a dead-letter subject captured by the source stream or by no stream. */
export async function checkDeadLetterSubject(jsm: unknown, stream: string, consumer: string, subject: string): Promise<void> {
  const find = (jsm as StreamFinder | null)?.streams?.find;
  if (typeof find !== "function") return;
  let timer: ReturnType<typeof setTimeout> | undefined;
  // A symbol, not a string: a stream may be named "timeout".
  const timedOut = new Promise<typeof TIMED_OUT>((resolve) => {
    timer = setTimeout(() => resolve(TIMED_OUT), LOOKUP_TIMEOUT_MS);
  });
  let found: string | typeof TIMED_OUT | undefined;
  try {
    found = await Promise.race([find.call((jsm as Required<StreamFinder>).streams, subject), timedOut]);
  } catch (err) {
    if (isNoMatch(err)) {
      throw new ConsumerPolicyError("dead_letter_uncaptured", {
        stream,
        consumer,
        message: "no stream captures the dead-letter subject, so no copy could be stored: add a stream for it before starting workers",
      }, { cause: err });
    }
    // No permission to look streams up, or no answer: the publish-time check still applies.
    return;
  } finally {
    clearTimeout(timer);
  }
  if (found === stream) {
    throw new ConsumerPolicyError("dead_letter_loop", {
      stream,
      consumer,
      message: "the source stream itself captures the dead-letter subject, so every dead-lettered message would be consumed again: use a subject another stream captures",
    });
  }
}

/** No stream captures the subject: a `StreamNotFoundError` of the 3.x client, a plain `Error` of nats 2.x. */
function isNoMatch(err: unknown): boolean {
  try {
    const e = err as { name?: unknown; message?: unknown };
    return (e.name === "StreamNotFoundError" || e.name === "Error") && typeof e.message === "string" && /no stream matches subject/i.test(e.message);
  } catch {
    return false;
  }
}
