/**
 * Version comparisons for tests, on the library's own parser (one import line to follow the
 * sources when they move).
 */
import { atLeast, parseVersion, type Version } from "../../src/policy/server-version.js";

export { atLeast, parseVersion, type Version };

/** The server line the newest tested features need (consumer pause, priority groups, pedantic mode). */
export const NEWEST_FEATURES_SINCE = "2.11.0";

/** Whether `version` is at least `min` (both `major.minor.patch` strings); false when unknown. */
export function versionAtLeast(version: string | undefined, min: string): boolean {
  const since = parseVersion(min);
  if (!since) throw new TypeError(`not a version: ${min}`);
  return atLeast(version, since.release) === true;
}

/** Sorts version strings, oldest first. */
export function byVersion(a: string, b: string): number {
  return versionAtLeast(a, b) ? (versionAtLeast(b, a) ? 0 : 1) : -1;
}
