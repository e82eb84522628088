/** Edit distance (insertions, deletions, substitutions, adjacent swaps) between two words. */
export function editDistance(a: string, b: string): number {
  const d: number[][] = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let v = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) v = Math.min(v, d[i - 2]![j - 2]! + 1);
      d[i]![j] = v;
    }
  }
  return d[a.length]![b.length]!;
}

/**
 * The candidate a mistyped word most likely meant: the nearest by edit distance (case
 * ignored), if it is near enough to be a typo (one edit, or a third of the word);
 * one that starts with the word (an abbreviation) otherwise; else undefined.
 */
export function closest(word: string, candidates: readonly string[]): string | undefined {
  const w = word.toLowerCase();
  let best: string | undefined;
  let bestD = Infinity;
  for (const c of candidates) {
    const dist = editDistance(w, c.toLowerCase());
    if (dist < bestD) {
      best = c;
      bestD = dist;
    }
  }
  // a two-letter word ("-x") is near every other: no guess there
  if (best !== undefined && w.length > 2 && bestD <= Math.max(1, Math.floor(w.length / 3))) return best;
  return w.length >= 3 ? candidates.find((c) => c.toLowerCase().startsWith(w)) : undefined;
}

/** " (did you mean X?)", or "" when nothing is near. */
export function didYouMean(word: string, candidates: readonly string[], show: (c: string) => string = (c) => c): string {
  const c = closest(word, candidates);
  return c === undefined ? "" : ` (did you mean ${show(c)}?)`;
}
