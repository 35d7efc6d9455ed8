/**
 * MaxDeliver with BackOff: what the connected server accepts, by version.
 */
import { MAX_DELIVER_EQUAL_SINCE, UNLIMITED_MAX_DELIVER_SINCE, atLeast } from "./server-version.js";

/**
 * The MaxDeliver rule for consumers with BackOff on the connected server: before 2.10.14 it
 * must be set and greater than the BackOff length; up to 2.10.22 it may also be unlimited;
 * from 2.10.23 a set value may equal the length. An unknown version gets the strictest rule.
 */
export function maxDeliverProblem(maxDeliver: number | undefined, steps: number, serverVersion: string | undefined): string | undefined {
  const unlimited = maxDeliver === undefined || maxDeliver <= 0;
  const unlimitedOk = atLeast(serverVersion, UNLIMITED_MAX_DELIVER_SINCE) === true;
  const equalOk = atLeast(serverVersion, MAX_DELIVER_EQUAL_SINCE) === true;
  const server = serverVersion ? `server ${serverVersion}` : "a server of unknown version";
  if (unlimited) {
    return unlimitedOk ? undefined : `MaxDeliver is unlimited, but on ${server} a consumer with BackOff needs MaxDeliver set above the ${steps} BackOff steps: set max_deliver to at least ${steps + 1}`;
  }
  if (maxDeliver > steps || (equalOk && maxDeliver === steps)) return undefined;
  const need = equalOk ? steps : steps + 1;
  return `MaxDeliver ${maxDeliver} does not cover the ${steps} BackOff steps on ${server}: set max_deliver to at least ${need}`;
}
