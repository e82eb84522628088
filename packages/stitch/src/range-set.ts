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

  /** The range with the greatest start <= x, as [bucket, index], or null. */
  private floor(x: number): [number, number] | null {
    if (this.n === 0) return null;
    const b = this.bucket(x);
    const i = RangeSet.upper(this.starts[b]!, x) - 1;
    return i < 0 ? null : [b, i];
  }

  /** The range holding address x, as [start, end, payload], or null. */
  at(x: number): [number, number, T] | null {
    const f = this.floor(x);
    if (f === null) return null;
    const [b, i] = f;
    const e = this.ends[b]![i]!;
    return x < e ? [this.starts[b]![i]!, e, this.items[b]![i]!] : null;
  }

  /** A range that intersects [start, end) (end > start), or null. */
  overlapping(start: number, end: number): [number, number, T] | null {
    if (this.n === 0) return null;
    const f = this.floor(start);
    if (f !== null && this.ends[f[0]]![f[1]]! > start) return [this.starts[f[0]]![f[1]]!, this.ends[f[0]]![f[1]]!, this.items[f[0]]![f[1]]!];
    // the first range starting after `start`
    let b = f === null ? 0 : f[0];
    let i = f === null ? 0 : f[1] + 1;
    if (i >= this.starts[b]!.length) {
      b++;
      i = 0;
    }
    if (b >= this.starts.length) return null;
    const s = this.starts[b]![i]!;
    return s < end ? [s, this.ends[b]![i]!, this.items[b]![i]!] : null;
  }

  /** Each range intersecting [start, end), in address order. */
  each(start: number, end: number, f: (s: number, e: number, item: T) => void): void {
    if (this.n === 0) return;
    const fl = this.floor(start);
    let b = fl === null ? 0 : fl[0];
    let i = fl === null ? 0 : fl[1];
    for (; b < this.starts.length; b++, i = 0) {
      const ss = this.starts[b]!;
      for (; i < ss.length; i++) {
        if (ss[i]! >= end) return;
        if (this.ends[b]![i]! > start) f(ss[i]!, this.ends[b]![i]!, this.items[b]![i]!);
      }
    }
  }

  /** Whether [start, end) is covered by ranges that meet end to start. */
  covers(start: number, end: number): boolean {
    let at = start;
    const f = this.floor(at);
    if (f === null) return false;
    let [b, i] = f;
    for (;;) {
      if (this.starts[b]![i]! > at || this.ends[b]![i]! <= at) return false;
      at = this.ends[b]![i]!;
      if (at >= end) return true;
      if (++i >= this.starts[b]!.length) {
        b++;
        i = 0;
        if (b >= this.starts.length) return false;
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
    const i = RangeSet.upper(ss, start);
    ss.splice(i, 0, start);
    this.ends[b]!.splice(i, 0, end);
    this.items[b]!.splice(i, 0, item);
    this.n++;
    if (ss.length > CAP) {
      const h = CAP >> 1;
      this.starts.splice(b + 1, 0, ss.splice(h));
      this.ends.splice(b + 1, 0, this.ends[b]!.splice(h));
      this.items.splice(b + 1, 0, this.items[b]!.splice(h));
    }
  }

  /** Remove the range starting at `start`; returns its end, or -1 when none starts there. */
  remove(start: number): number {
    const f = this.floor(start);
    if (f === null) return -1;
    const [b, i] = f;
    if (this.starts[b]![i] !== start) return -1;
    const end = this.ends[b]![i]!;
    this.starts[b]!.splice(i, 1);
    this.ends[b]!.splice(i, 1);
    this.items[b]!.splice(i, 1);
    this.n--;
    if (this.starts[b]!.length === 0) {
      this.starts.splice(b, 1);
      this.ends.splice(b, 1);
      this.items.splice(b, 1);
    }
    return end;
  }
}
