import type { Block } from "./block.js";

/** Blocks per bucket before it splits in two (a bucket holds at most CAP). */
const CAP = 16;
const HALF = CAP >> 1;

/** One sorted run of blocks; its keys are also kept in typed arrays so searches touch contiguous memory, not Block objects. */
class Bucket {
  n = 0;
  readonly st = new Float64Array(CAP);
  readonly sz = new Float64Array(CAP);
  readonly ad = new Float64Array(CAP);
  readonly bl: (Block | null)[] = new Array<Block | null>(CAP).fill(null);

  /** First index whose key is >= (stream, size, addr). */
  lower(stream: number, size: number, addr: number): number {
    const st = this.st;
    const sz = this.sz;
    const ad = this.ad;
    let lo = 0;
    let hi = this.n;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const s = st[mid]!;
      const z = sz[mid]!;
      if (s < stream || (s === stream && (z < size || (z === size && ad[mid]! < addr)))) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}

/**
 * The free blocks of one pool ordered by (stream, size, address), as PyTorch's
 * `std::set<Block*, BlockComparatorSize>`, with best-fit lookup by lower bound.
 *
 * A chunked sorted list: sorted buckets of at most 16 blocks, each keeping its keys in
 * typed arrays, plus the buckets' last keys in typed arrays. A lookup is two binary
 * searches over contiguous numbers (no pointer chasing through Block objects, which is
 * what made a plain comparator-based structure slow); insert/delete shift at most 16
 * entries. A flat sorted array degrades to O(n) moves with thousands of free blocks; a
 * balanced-tree library allocates a node per entry and calls a comparator per probe.
 */
export class BlockPool {
  readonly name: string;
  readonly isSmall: boolean;
  private buckets: Bucket[] = [];
  /** Last key of each bucket. */
  private mSt = new Float64Array(16);
  private mSz = new Float64Array(16);
  private mAd = new Float64Array(16);
  private _size = 0;
  /** An emptied bucket kept for reuse: pools often go empty and back (no allocation churn). */
  private spare: Bucket | null = null;
  /** Cursor of the last seek()/advance(). */
  private cb = 0;
  private ci = 0;
  /** Free for the owning policy. */
  data: unknown = null;

  constructor(name: string, isSmall: boolean) {
    this.name = name;
    this.isSmall = isSmall;
  }

  get size(): number {
    return this._size;
  }

  /** Index of the first bucket whose last key is >= (stream, size, addr). */
  private bucketFor(stream: number, size: number, addr: number): number {
    const st = this.mSt;
    const sz = this.mSz;
    const ad = this.mAd;
    let lo = 0;
    let hi = this.buckets.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const s = st[mid]!;
      const z = sz[mid]!;
      if (s < stream || (s === stream && (z < size || (z === size && ad[mid]! < addr)))) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  private setMax(k: number): void {
    const b = this.buckets[k]!;
    const j = b.n - 1;
    this.mSt[k] = b.st[j]!;
    this.mSz[k] = b.sz[j]!;
    this.mAd[k] = b.ad[j]!;
  }

  private newBucket(): Bucket {
    const b = this.spare;
    if (b === null) return new Bucket();
    this.spare = null;
    return b;
  }

  /** Rebuild the bucket-max arrays after buckets were added or removed (rare). */
  private rebuildMaxes(): void {
    const n = this.buckets.length;
    if (this.mSt.length < n) {
      const c = Math.max(n, this.mSt.length * 2);
      this.mSt = new Float64Array(c);
      this.mSz = new Float64Array(c);
      this.mAd = new Float64Array(c);
    }
    for (let k = 0; k < n; k++) this.setMax(k);
  }

  insert(b: Block): void {
    const stream = b.stream;
    const size = b.size;
    const addr = b.addr;
    this._size++;
    if (this.buckets.length === 0) {
      this.buckets.push(this.newBucket());
      this.rebuildMaxes();
    }
    let k = this.bucketFor(stream, size, addr);
    if (k === this.buckets.length) k--;
    const bk = this.buckets[k]!;
    const i = bk.lower(stream, size, addr);
    const n = bk.n;
    if (i < n) {
      // plain loops: for <= 64 entries they beat copyWithin's builtin call overhead
      const st = bk.st;
      const sz = bk.sz;
      const ad = bk.ad;
      const bl = bk.bl;
      for (let j = n; j > i; j--) {
        st[j] = st[j - 1]!;
        sz[j] = sz[j - 1]!;
        ad[j] = ad[j - 1]!;
        bl[j] = bl[j - 1]!;
      }
    }
    bk.st[i] = stream;
    bk.sz[i] = size;
    bk.ad[i] = addr;
    bk.bl[i] = b;
    bk.n = n + 1;
    if (i === n) this.setMax(k);
    if (bk.n === CAP) this.split(k);
  }

  private split(k: number): void {
    const a = this.buckets[k]!;
    const b = this.newBucket();
    b.st.set(a.st.subarray(HALF, CAP));
    b.sz.set(a.sz.subarray(HALF, CAP));
    b.ad.set(a.ad.subarray(HALF, CAP));
    for (let j = HALF; j < CAP; j++) {
      b.bl[j - HALF] = a.bl[j]!;
      a.bl[j] = null;
    }
    b.n = CAP - HALF;
    a.n = HALF;
    this.buckets.splice(k + 1, 0, b);
    this.rebuildMaxes();
  }

  /** Removes `b` (found by its key); returns false when it is not in the pool. */
  delete(b: Block): boolean {
    const k = this.bucketFor(b.stream, b.size, b.addr);
    if (k === this.buckets.length) return false;
    const bk = this.buckets[k]!;
    const i = bk.lower(b.stream, b.size, b.addr);
    if (i >= bk.n || bk.bl[i] !== b) return false;
    this.removeAt(k, i);
    return true;
  }

  /** Removes and returns the block at the cursor of the last seek() (no search: the best-fit hot path). */
  takeAtCursor(): Block {
    const k = this.cb;
    const bk = this.buckets[k]!;
    const i = this.ci;
    const b = bk.bl[i]!;
    this.removeAt(k, i);
    return b;
  }

  /** Removes entry i of bucket k; an emptied bucket is dropped (and kept as the spare). */
  private removeAt(k: number, i: number): void {
    const bk = this.buckets[k]!;
    this._size--;
    const n = bk.n - 1;
    if (n === 0) {
      this.buckets.splice(k, 1);
      bk.bl[0] = null;
      bk.n = 0;
      this.spare = bk;
      this.rebuildMaxes();
      return;
    }
    if (i < n) BlockPool.shiftDown(bk, i, n);
    bk.bl[n] = null;
    bk.n = n;
    if (i === n) this.setMax(k);
  }

  /** Close the gap at i in a bucket that will hold n entries. */
  private static shiftDown(bk: Bucket, i: number, n: number): void {
    const st = bk.st;
    const sz = bk.sz;
    const ad = bk.ad;
    const bl = bk.bl;
    for (let j = i; j < n; j++) {
      st[j] = st[j + 1]!;
      sz[j] = sz[j + 1]!;
      ad[j] = ad[j + 1]!;
      bl[j] = bl[j + 1]!;
    }
  }

  has(b: Block): boolean {
    const k = this.bucketFor(b.stream, b.size, b.addr);
    if (k === this.buckets.length) return false;
    const bk = this.buckets[k]!;
    const i = bk.lower(b.stream, b.size, b.addr);
    return i < bk.n && bk.bl[i] === b;
  }

  /**
   * Best fit: the first block >= (stream, size, 0), or null. It may belong to another
   * stream: the caller checks `stream` as PyTorch does. Sets the cursor for advance().
   */
  seek(stream: number, size: number): Block | null {
    const k = this.bucketFor(stream, size, -1);
    if (k === this.buckets.length) return null;
    const bk = this.buckets[k]!;
    const i = bk.lower(stream, size, -1);
    this.cb = k;
    this.ci = i;
    return bk.bl[i]!;
  }

  /** The block after the cursor (in pool order), or null at the end. */
  advance(): Block | null {
    let k = this.cb;
    let i = this.ci + 1;
    if (k >= this.buckets.length) return null;
    if (i >= this.buckets[k]!.n) {
      k++;
      i = 0;
      if (k >= this.buckets.length) {
        this.cb = k;
        return null;
      }
    }
    this.cb = k;
    this.ci = i;
    return this.buckets[k]!.bl[i]!;
  }

  /** All free blocks in pool order (a copy: safe to mutate the pool while iterating it). */
  toArray(): Block[] {
    const out: Block[] = [];
    for (const bk of this.buckets) for (let i = 0; i < bk.n; i++) out.push(bk.bl[i]!);
    return out;
  }

  clear(): void {
    this.buckets = [];
    this._size = 0;
  }

  /** Structure check for invariant checkers: sorted, keys in step with the blocks, maxes right, count right. */
  checkOrder(): string | null {
    let prev: Block | null = null;
    let n = 0;
    for (let k = 0; k < this.buckets.length; k++) {
      const bk = this.buckets[k]!;
      if (bk.n === 0) return `${this.name}: empty bucket`;
      for (let i = 0; i < bk.n; i++) {
        const b = bk.bl[i]!;
        if (bk.st[i] !== b.stream || bk.sz[i] !== b.size || bk.ad[i] !== b.addr) {
          return `${this.name}: block 0x${b.addr.toString(16)} changed its key while in the pool`;
        }
        if (prev !== null) {
          const lt = prev.stream !== b.stream ? prev.stream < b.stream : prev.size !== b.size ? prev.size < b.size : prev.addr < b.addr;
          if (!lt) return `${this.name}: pool out of order at 0x${b.addr.toString(16)}`;
        }
        prev = b;
        n++;
      }
      if (this.mSt[k] !== bk.st[bk.n - 1] || this.mSz[k] !== bk.sz[bk.n - 1] || this.mAd[k] !== bk.ad[bk.n - 1]) return `${this.name}: stale bucket max`;
    }
    return n === this._size ? null : `${this.name}: count ${this._size} != ${n}`;
  }
}
