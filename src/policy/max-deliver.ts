/**
 * MaxDeliver with BackOff: what the connected server accepts, by version.
 */
import { MAX_DELIVER_EQUAL_SINCE, UNLIMITED_MAX_DELIVER_SINCE, atLeast, parseVersion } from "./server-version.js";
import { describe, truncate } from "./untrusted.js";

/** What nats-server answers when MaxDeliver does not cover the BackOff (error 10116, every version). */
const SERVER_SAYS = `"max deliver is required to be > length of backoff values"`;

/**
 * The MaxDeliver rule for consumers with BackOff on the connected server: before 2.10.14 it
 * must be set and greater than the BackOff length; up to 2.10.22 it may also be unlimited;
 * from 2.10.23 a set value may equal the length. An unknown version (a pre-release counts as
 * before its release) gets the strictest rule. Never throws: a MaxDeliver or a step count that
 * is not a whole number is a problem too.
 *
 * @returns the problem, for a person, or `undefined` when the server accepts it.
 */
export function maxDeliverProblem(maxDeliver: number | undefined, steps: number, serverVersion: string | undefined): string | undefined {
  if (typeof steps !== "number" || !Number.isSafeInteger(steps) || steps < 0) {
    return `the BackOff length ${describe(steps)} is not a whole number of steps: read the consumer's backoff again`;
  }
  if (steps === 0) return undefined;
  if (maxDeliver !== undefined && (typeof maxDeliver !== "number" || !Number.isSafeInteger(maxDeliver))) {
    return `MaxDeliver ${describe(maxDeliver)} is not a whole number: set max_deliver to at least ${steps + 1}, or -1 for unlimited`;
  }
  const unlimited = maxDeliver === undefined || maxDeliver <= 0;
  const unlimitedOk = atLeast(serverVersion, UNLIMITED_MAX_DELIVER_SINCE) === true;
  const equalOk = atLeast(serverVersion, MAX_DELIVER_EQUAL_SINCE) === true;
  const server = parseVersion(serverVersion) ? `server ${truncate(String(serverVersion).trim())}` : "a server of unknown version";
  if (unlimited) {
    return unlimitedOk
      ? undefined
      : `MaxDeliver is unlimited, but on ${server} a consumer with BackOff needs MaxDeliver set above the ${steps} BackOff steps (the server says ${SERVER_SAYS}): set max_deliver to at least ${steps + 1}`;
  }
  if (maxDeliver > steps || (equalOk && maxDeliver === steps)) return undefined;
  const need = equalOk ? steps : steps + 1;
  return `MaxDeliver ${maxDeliver} does not cover the ${steps} BackOff steps on ${server} (the server says ${SERVER_SAYS}): set max_deliver to at least ${need}`;
}
