/**
 * "Did you mean": the known key nearest to a misspelt one, so a typo is refused with its fix.
 */

/**
 * The known key nearest to `key` (case, `_`, `-` and spaces ignored; a prefix counts as
 * exact), or `undefined` when none is within three edits or the key is over 64 characters.
 */
export function nearestKey(key: string, known: readonly string[]): string | undefined {
  // A key this long is near nothing; normalising it would only copy it.
  if (key.length > 64) return undefined;
  const n = normalise(key);
  let best: string | undefined;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const field of known) {
    const f = normalise(field);
    const d = f === n || f.startsWith(n) || n.startsWith(f) ? 0 : levenshtein(n, f);
    if (d < bestDistance) {
      bestDistance = d;
      best = field;
    }
  }
  return bestDistance <= 3 ? best : undefined;
}

/** Lower case without `_`, `-` and whitespace. */
export function normalise(s: string): string {
  return s.toLowerCase().replace(/[_\-\s]/g, "");
}

/** Edit distance; strings over 64 characters are never near anything. */
function levenshtein(a: string, b: string): number {
  if (a.length > 64 || b.length > 64) return Number.POSITIVE_INFINITY;
  let prev = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      cur[j] = Math.min((prev[j] ?? 0) + 1, (cur[j - 1] ?? 0) + 1, (prev[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = cur;
  }
  return prev[b.length] ?? Number.POSITIVE_INFINITY;
}

