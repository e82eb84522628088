/**
 * The one lower-bound search of the workspace (the driver's address indexes, the policies' pools): the first index in [0, n) at which
 * `before(i)` is false, for a `before` that is true on a prefix (a sorted order). PyTorch's
 * std::set::lower_bound over a pool, ordered lists of blocks, sorted addresses.
 */
export function lowerBound(n: number, before: (i: number) => boolean): number {
  let lo = 0;
  let hi = n;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (before(mid)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** lowerBound over ascending numbers: the first index whose value is >= x (no closure: for hot paths). */
export function lowerBoundOf(a: ArrayLike<number>, x: number): number {
  let lo = 0;
  let hi = a.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (a[mid]! < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
