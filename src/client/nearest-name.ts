/**
 * The name among `names` closest to `typo` (edit distance, case ignored),
 * when it is close enough to be the one meant.
 *
 * @example
 * nearestName('timeout', ['timeouts', 'retries']); // 'timeouts'
 */
export function nearestName(typo: string, names: readonly string[]): string | undefined {
  const wanted = typo.toLowerCase();
  let best: string | undefined;
  // Close enough: a few edits, and fewer than the typo has letters (so short nonsense matches nothing).
  let bestDistance = Math.min(Math.max(3, Math.floor(wanted.length / 3)), wanted.length - 1);
  for (const name of names) {
    const distance = editDistance(wanted, name.toLowerCase());
    if (distance <= bestDistance) {
      best = name;
      bestDistance = distance - 1;
    }
  }
  return best;
}

/** Levenshtein distance, with one row of memory; option names are short. */
function editDistance(a: string, b: string): number {
  if (a.length > 64 || b.length > 64) return Infinity;
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      row[j] = Math.min(previous[j]! + 1, row[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = row;
  }
  return previous[b.length]!;
}
