/**
 * What the connected nats-server understands, from the version in its INFO. Unknown versions
 * get the behaviour that is safe on every server.
 */

/** A parsed `major.minor.patch`. */
export type Version = readonly [number, number, number];

/** `+TERM <reason>` is honoured from 2.10.4; older servers ignore the whole frame and redeliver. */
export const TERM_REASON_SINCE: Version = [2, 10, 4];

/** From 2.10.14 a consumer with BackOff may leave MaxDeliver unlimited (-1). */
export const UNLIMITED_MAX_DELIVER_SINCE: Version = [2, 10, 14];

/** From 2.10.23 a set MaxDeliver may equal the BackOff length (before: strictly greater). */
export const MAX_DELIVER_EQUAL_SINCE: Version = [2, 10, 23];

/** Parses `2.9.10`, `v2.10.4-beta.1` and the like; anything else is `undefined`. */
export function parseVersion(value: unknown): Version | undefined {
  if (typeof value !== "string") return undefined;
  const m = /^v?(\d+)\.(\d+)\.(\d+)/.exec(value.trim());
  if (!m) return undefined;
  return [Number(m[1]), Number(m[2]), Number(m[3])];
}

/** Whether `version` is at least `since`; `undefined` when the version is unknown. */
export function atLeast(version: unknown, since: Version): boolean | undefined {
  const v = parseVersion(version);
  if (!v) return undefined;
  for (let i = 0; i < 3; i++) {
    if (v[i]! !== since[i]!) return v[i]! > since[i]!;
  }
  return true;
}
