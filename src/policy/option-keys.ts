/**
 * Options objects: unknown keys are refused at the call that receives them, with the nearest
 * known key, so a typo can never switch a safety feature off.
 */
import { nearestKey } from "./nearest-key.js";
import { optionHome, type OptionsObject } from "./option-homes.js";
import { truncate } from "./untrusted.js";

/**
 * Reads an options object (`undefined` or `null`: no options) and refuses every key not in
 * `known`. Own enumerable keys only; a throwing getter or a revoked proxy is a `TypeError` too.
 *
 * @param where - how the caller names the object, for example `CommitThenAck options` or
 *   `options.deadLetter`.
 * @param object - which options object this is, so a key that belongs to another one is
 *   refused with the place it goes (`options.inProgress.maxHeartbeats`) rather than a guess.
 * @returns a snapshot of its own values (an empty record for no options).
 * @throws TypeError naming the key, where it belongs or the nearest known one, and every known key.
 */
export function readOptionKeys(where: string, options: unknown, known: readonly string[], object?: OptionsObject): Record<string, unknown> {
  if (options === undefined || options === null) return {};
  let keys: string[];
  try {
    if (typeof options !== "object" || Array.isArray(options)) {
      throw new TypeError(`${where} must be an object, got ${options === null ? "null" : Array.isArray(options) ? "an array" : typeof options}`);
    }
    keys = Object.keys(options);
  } catch (err) {
    if (err instanceof TypeError && err.message.startsWith(where)) throw err;
    throw new TypeError(`${where} could not be read (a revoked proxy or a throwing getter): pass a plain object`, { cause: err });
  }
  for (const key of keys) {
    if (known.includes(key)) continue;
    const shown = `${where}: unknown option ${JSON.stringify(truncate(key))}`;
    const home = object === undefined ? undefined : optionHome(object, key);
    if (home !== undefined) {
      throw new TypeError(`${shown} — it belongs in ${home}. Given here it would change nothing; move it there (known: ${known.join(", ")})`);
    }
    const guess = nearestKey(key, known);
    throw new TypeError(
      `${shown}${guess ? ` — did you mean "${guess}"?` : "."} A misspelt option would silently keep its default; rename or remove it (known: ${known.join(", ")})`,
    );
  }
  // A snapshot, read once: a getter cannot answer differently later, nor throw past here.
  const snapshot: Record<string, unknown> = {};
  for (const key of keys) {
    try {
      snapshot[key] = (options as Record<string, unknown>)[key];
    } catch (err) {
      throw new TypeError(`${where}.${key} could not be read (its getter threw): pass a plain value`, { cause: err });
    }
  }
  return snapshot;
}
