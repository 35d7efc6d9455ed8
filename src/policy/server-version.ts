/**
 * What the connected nats-server understands, from the version in its INFO. Unknown versions
 * get the behaviour that is safe on every server. Versions compare as semver: a pre-release
 * (`2.11.0-RC.1`, `2.15.0-dev`) comes before its release, so a feature "since 2.11.0" is not
 * assumed on a release candidate of it.
 */

/** A release `major.minor.patch`. */
export type Version = readonly [number, number, number];

/** A parsed server version: the release and its pre-release identifiers (empty for a release). */
export interface ParsedVersion {
  readonly release: Version;
  /** `2.10.4-beta.1` → `["beta", 1]`: numeric identifiers as numbers, the others as strings. */
  readonly prerelease: readonly (string | number)[];
}

/** `+TERM <reason>` is honoured from 2.10.4; older servers ignore the whole frame and redeliver. */
export const TERM_REASON_SINCE: Version = [2, 10, 4];

/** From 2.10.14 a consumer with BackOff may leave MaxDeliver unlimited (-1). */
export const UNLIMITED_MAX_DELIVER_SINCE: Version = [2, 10, 14];

/** From 2.10.23 a set MaxDeliver may equal the BackOff length (before: strictly greater). */
export const MAX_DELIVER_EQUAL_SINCE: Version = [2, 10, 23];

/**
 * From 2.11.7 (and 2.12.0) a consumer's pending acks count as activity for `inactive_threshold`;
 * before, only pull requests and acks of any kind (a `+WPI` too) did.
 */
export const PENDING_ACKS_ACTIVE_SINCE: Version = [2, 11, 7];

/** Longer strings are not versions (and are never scanned). */
const MAX_VERSION_LENGTH = 128;

// A `-` after the release starts a pre-release, whatever follows it, up to `+` or a space.
const VERSION = /^v?(\d+)\.(\d+)\.(\d+)(?:-([^\s+]*))?/;

/**
 * Parses `2.9.10`, `v2.10.4-beta.1`, `2.15.0-dev+abc` and the like (build metadata after `+`
 * is ignored, as is anything after the version); anything else is `undefined`. Never throws.
 */
export function parseVersion(value: unknown): ParsedVersion | undefined {
  if (typeof value !== "string" || value.length > MAX_VERSION_LENGTH) return undefined;
  const m = VERSION.exec(value.trim());
  if (!m) return undefined;
  const prerelease = m[4] === undefined ? [] : m[4].split(".").map((id) => (/^\d+$/.test(id) ? Number(id) : id));
  return { release: [Number(m[1]), Number(m[2]), Number(m[3])], prerelease };
}

/**
 * Whether `version` is at least the release `since`; `undefined` when the version is unknown.
 * A pre-release of `since` is not: `atLeast("2.10.4-beta.1", [2, 10, 4])` is false.
 */
export function atLeast(version: unknown, since: Version): boolean | undefined {
  const v = parseVersion(version);
  if (!v) return undefined;
  return compareVersions(v, { release: since, prerelease: [] }) >= 0;
}

/**
 * Semver precedence of two parsed versions: negative, 0 or positive. A pre-release is lower
 * than its release; identifiers compare left to right, numbers numerically and below
 * strings, strings in ASCII order; a longer list wins a tie.
 */
export function compareVersions(a: ParsedVersion, b: ParsedVersion): number {
  for (let i = 0; i < 3; i++) {
    if (a.release[i]! !== b.release[i]!) return a.release[i]! < b.release[i]! ? -1 : 1;
  }
  const pa = a.prerelease;
  const pb = b.prerelease;
  if (pa.length === 0 || pb.length === 0) return pa.length === pb.length ? 0 : pa.length === 0 ? 1 : -1;
  for (let i = 0; i < Math.min(pa.length, pb.length); i++) {
    const x = pa[i]!;
    const y = pb[i]!;
    if (x === y) continue;
    if (typeof x === "number" && typeof y === "number") return x < y ? -1 : 1;
    if (typeof x === "number") return -1;
    if (typeof y === "number") return 1;
    return x < y ? -1 : 1;
  }
  return pa.length === pb.length ? 0 : pa.length < pb.length ? -1 : 1;
}
