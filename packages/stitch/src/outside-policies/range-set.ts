/** Entries per bucket before it splits (shifts stay short; a lookup is two binary searches). */
const CAP = 64;

/**
 * Disjoint ranges [start, end) ordered by start, each with a payload: a chunked sorted list
 * (as BlockPool's), for the policy guard's books of mapped memory and live blocks, where a
 * flat sorted array would move O(n) entries per insert with thousands live.
 */
export class RangeSet<T> {
  private starts: number[][] = [];
  private ends: number[][] = [];
  private items: T[][] = [];
  private n = 0;

  get size(): number {
    return this.n;
  }

  /** Index of the last bucket whose first start is <= x (0 when none is). */
  private bucket(x: number): number {
    const s = this.starts;
    let lo = 0;
    let hi = s.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (s[mid]![0]! <= x) lo = mid + 1;
      else hi = mid;
    }
    return lo > 0 ? lo - 1 : 0;
  }

  private static upper(a: number[], x: number): number {
    let lo = 0;
    let hi = a.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (a[mid]! <= x) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** Where floor() found it (fields, not a pair: no allocation per look-up). */
  private fb = 0;
  private fi = 0;

  /** Whether a range starts at or below x; the one with the greatest start is then at (fb, fi). */
  private floor(x: number): boolean {
    if (this.n === 0) return false;
    const b = this.bucket(x);
    const i = RangeSet.upper(this.starts[b]!, x) - 1;
    if (i < 0) return false;
    this.fb = b;
    this.fi = i;
    return true;
  }

  /** The range holding address x, as [start, end, payload], or null. */
  at(x: number): [number, number, T] | null {
    if (!this.floor(x)) return null;
    const { fb: b, fi: i } = this;
    const e = this.ends[b]![i]!;
    return x < e ? [this.starts[b]![i]!, e, this.items[b]![i]!] : null;
  }

  /** A range that intersects [start, end) (end > start), or null. */
  overlapping(start: number, end: number): [number, number, T] | null {
    if (this.n === 0) return null;
    let b = 0;
    let i = 0;
    if (this.floor(start)) {
      b = this.fb;
      i = this.fi;
      if (this.ends[b]![i]! > start) return [this.starts[b]![i]!, this.ends[b]![i]!, this.items[b]![i]!];
      i++; // the first range starting after `start`
      if (i >= this.starts[b]!.length) {
        b++;
        i = 0;
      }
    }
    if (b >= this.starts.length) return null;
    const s = this.starts[b]![i]!;
    return s < end ? [s, this.ends[b]![i]!, this.items[b]![i]!] : null;
  }

  /**
   * The first address of [start, end) that no range covers (end when all of it is), with
   * `visit` called on each covering range in order (a bound method: no closure per call).
   */
  firstUncovered(start: number, end: number, visit: ((s: number, e: number, item: T) => void) | null): number {
    let at = start;
    if (!this.floor(at)) return at;
    let b = this.fb;
    let i = this.fi;
    for (;;) {
      const s = this.starts[b]![i]!;
      const e = this.ends[b]![i]!;
      if (s > at || e <= at) return at;
      if (visit !== null) visit(s, e, this.items[b]![i]!);
      at = e;
      if (at >= end) return end;
      if (++i >= this.starts[b]!.length) {
        b++;
        i = 0;
        if (b >= this.starts.length) return at;
      }
    }
  }

  /** Add [start, end): the caller has checked that it overlaps nothing. */
  add(start: number, end: number, item: T): void {
    if (this.n === 0) {
      this.starts.push([start]);
      this.ends.push([end]);
      this.items.push([item]);
      this.n = 1;
      return;
    }
    const b = this.bucket(start);
    const ss = this.starts[b]!;
    const ee = this.ends[b]!;
    const it = this.items[b]!;
    const i = RangeSet.upper(ss, start);
    // shift by hand: splice allocates the array of what it removes, on every call
    for (let j = ss.length; j > i; j--) {
      ss[j] = ss[j - 1]!;
      ee[j] = ee[j - 1]!;
      it[j] = it[j - 1]!;
    }
    ss[i] = start;
    ee[i] = end;
    it[i] = item;
    this.n++;
    if (ss.length > CAP) {
      const h = CAP >> 1;
      this.starts.splice(b + 1, 0, ss.splice(h));
      this.ends.splice(b + 1, 0, ee.splice(h));
      this.items.splice(b + 1, 0, it.splice(h));
    }
  }

  /** Remove the range starting at `start`; returns its end, or -1 when none starts there. */
  remove(start: number): number {
    if (!this.floor(start)) return -1;
    const { fb: b, fi: i } = this;
    if (this.starts[b]![i] !== start) return -1;
    const ss = this.starts[b]!;
    const ee = this.ends[b]!;
    const it = this.items[b]!;
    const end = ee[i]!;
    const last = ss.length - 1;
    for (let j = i; j < last; j++) {
      ss[j] = ss[j + 1]!;
      ee[j] = ee[j + 1]!;
      it[j] = it[j + 1]!;
    }
    ss.pop();
    ee.pop();
    it.pop();
    this.n--;
    if (last === 0) {
      this.starts.splice(b, 1);
      this.ends.splice(b, 1);
      this.items.splice(b, 1);
    }
    return end;
  }
}
