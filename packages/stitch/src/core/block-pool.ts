// Block and BlockPool know each other (a block names its pool, a pool holds blocks): one file,
// so that no two files import each other. block.ts re-exports Block beside split and merge.

/**
 * A contiguous virtual range an allocator hands out or keeps free: PyTorch's Block.
 * Blocks of one segment form a doubly linked list by address (prev/next), which is what
 * split and merge work on. Fields are plain and monomorphic for speed; `segment` and
 * `data` belong to the policy that made the block.
 */
export class Block {
  addr: number;
  size: number;
  /** Raw stream value (cudaStream_t; 0 = default stream). */
  stream: number;
  /** Bytes the program asked for (live blocks only). */
  requested = 0;
  /** From malloc until free_completed (pending frees stay allocated: they may not merge). */
  allocated = false;
  /** True while a free_requested waits for its free_completed. */
  pendingFree = false;
  /** False for the unmapped tail blocks of an expandable segment. */
  mapped = true;
  prev: Block | null = null;
  next: Block | null = null;
  /** The pool the block belongs to (it is *in* the pool's free set only while free). */
  pool: BlockPool | null;
  /** The policy's segment object (segment, expandable segment, pBlock ...). */
  segment: unknown = null;
  /** Per-allocation id (integrity stamps, exports); set by the engine at malloc. */
  id = 0;
  /** The engine's: this block's slot in its allocator's list of live blocks (-1 when not live). */
  liveSlot = -1;
  /** Offsets inside the block where physical chunks meet non-adjacently (stitched blocks), for integrity. */
  seams: number[] | null = null;
  /** Anything else the policy needs. */
  data: unknown = null;

  constructor(addr: number, size: number, stream: number, pool: BlockPool | null) {
    this.addr = addr;
    this.size = size;
    this.stream = stream;
    this.pool = pool;
  }

  get end(): number {
    return this.addr + this.size;
  }

  /** A free block (merge candidate) of the same mapping state. */
  static mergeable(b: Block | null, mapped: boolean): b is Block {
    return b !== null && !b.allocated && b.mapped === mapped;
  }
}

/**
 * Blocks per bucket before it splits in two (a bucket holds at most CAP). 8 rather than 16:
 * shorter shifts per insert and delete, and 8 doubles (64 bytes) is the size up to which V8
 * keeps a typed array's data inside the object itself; measured with
 * torch-alloc/bench/live-replay.mjs (docs/notebook/2026-12-01-per-call-cost-cpu.md).
 */
const CAP = 8;
const HALF = CAP >> 1;

/** First of the first n keys (st, sz, ad: sorted by stream, size, address) that is >= (stream, size, addr). */
function lowerKey(st: Float64Array, sz: Float64Array, ad: Float64Array, n: number, stream: number, size: number, addr: number): number {
  let lo = 0;
  let hi = n;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    const s = st[mid]!;
    const z = sz[mid]!;
    if (s < stream || (s === stream && (z < size || (z === size && ad[mid]! < addr)))) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** One sorted run of blocks; its keys are also kept in typed arrays so searches touch contiguous memory, not Block objects. */
class Bucket {
  n = 0;
  readonly st = new Float64Array(CAP);
  readonly sz = new Float64Array(CAP);
  readonly ad = new Float64Array(CAP);
  readonly bl: (Block | null)[] = new Array<Block | null>(CAP).fill(null);

  /** First index whose key is >= (stream, size, addr). */
  lower(stream: number, size: number, addr: number): number {
    return lowerKey(this.st, this.sz, this.ad, this.n, stream, size, addr);
  }
}

/**
 * The free blocks of one pool ordered by (stream, size, address), as PyTorch's
 * `std::set<Block*, BlockComparatorSize>`, with best-fit lookup by lower bound.
 *
 * A chunked sorted list: sorted buckets of at most CAP (8) blocks, each keeping its keys in
 * typed arrays, plus the buckets' last keys in typed arrays. A lookup is two binary
 * searches over contiguous numbers (no pointer chasing through Block objects, which is
 * what made a plain comparator-based structure slow); insert/delete shift at most CAP
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
  /** Emptied buckets kept for reuse: a bucket is four allocations (three typed arrays), and pools split and drain buckets all the time. */
  private spares: Bucket[] = [];
  /** Cursor of the last seek()/advance() (delete and replace move it too). */
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
    return lowerKey(this.mSt, this.mSz, this.mAd, this.buckets.length, stream, size, addr);
  }

  private setMax(k: number): void {
    const b = this.buckets[k]!;
    const j = b.n - 1;
    this.mSt[k] = b.st[j]!;
    this.mSz[k] = b.sz[j]!;
    this.mAd[k] = b.ad[j]!;
  }

  private newBucket(): Bucket {
    return this.spares.pop() ?? new Bucket();
  }

  /** Bucket k+1 was just inserted: open its slot in the max arrays (a shift, not a rebuild of every max). */
  private insertMax(k: number): void {
    const n = this.buckets.length;
    if (this.mSt.length < n) {
      const c = Math.max(n, this.mSt.length * 2);
      const st = new Float64Array(c);
      const sz = new Float64Array(c);
      const ad = new Float64Array(c);
      st.set(this.mSt);
      sz.set(this.mSz);
      ad.set(this.mAd);
      this.mSt = st;
      this.mSz = sz;
      this.mAd = ad;
    }
    if (k + 2 < n) {
      this.mSt.copyWithin(k + 2, k + 1, n - 1);
      this.mSz.copyWithin(k + 2, k + 1, n - 1);
      this.mAd.copyWithin(k + 2, k + 1, n - 1);
    }
    this.setMax(k);
    this.setMax(k + 1);
  }

  /** Bucket k was just removed: close its slot in the max arrays. */
  private removeMax(k: number): void {
    const n = this.buckets.length;
    if (k < n) {
      this.mSt.copyWithin(k, k + 1, n + 1);
      this.mSz.copyWithin(k, k + 1, n + 1);
      this.mAd.copyWithin(k, k + 1, n + 1);
    }
  }

  insert(b: Block): void {
    const stream = b.stream;
    const size = b.size;
    const addr = b.addr;
    this._size++;
    if (this.buckets.length === 0) this.buckets.push(this.newBucket()); // its max is set below (i === n === 0)
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
    // plain loop: subarray() would allocate three views per split
    for (let j = HALF; j < CAP; j++) {
      b.st[j - HALF] = a.st[j]!;
      b.sz[j - HALF] = a.sz[j]!;
      b.ad[j - HALF] = a.ad[j]!;
      b.bl[j - HALF] = a.bl[j]!;
      a.bl[j] = null;
    }
    b.n = CAP - HALF;
    a.n = HALF;
    this.buckets.splice(k + 1, 0, b);
    this.insertMax(k);
  }

  /** Removes `b` (found by its key); returns false when it is not in the pool. */
  delete(b: Block): boolean {
    if (!this.locate(b)) return false;
    this.removeAt(this.cb, this.ci);
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

  /**
   * The block at the cursor of the last seek() changed its key (say, a split took its low
   * part): put it back in order without a delete and an insert where it can (rekeyAt).
   */
  rekeyAtCursor(): void {
    this.rekeyAt(this.cb, this.ci);
  }

  /**
   * `b` (not in the pool) takes the place of the block at the cursor of the last seek(),
   * which leaves the pool, as when a best fit is split and its rest goes back: one search
   * (the seek's) where a delete and an insert take three.
   */
  replaceAtCursor(b: Block): void {
    this.buckets[this.cb]!.bl[this.ci] = b;
    this.rekeyAt(this.cb, this.ci);
  }

  /** Sets the cursor on `b` (found by its key); false, cursor unchanged, when b is not in the pool. */
  private locate(b: Block): boolean {
    const k = this.bucketFor(b.stream, b.size, b.addr);
    if (k === this.buckets.length) return false;
    const bk = this.buckets[k]!;
    const i = bk.lower(b.stream, b.size, b.addr);
    if (i >= bk.n || bk.bl[i] !== b) return false;
    this.cb = k;
    this.ci = i;
    return true;
  }

  /**
   * `b` (not in the pool) takes the place of `old` (in it), as when a free block absorbs a
   * pooled neighbour: one search, and no delete-then-insert where b sorts in old's bucket.
   * Returns false, changing nothing, when old is not in the pool.
   */
  replace(old: Block, b: Block): boolean {
    if (!this.locate(old)) return false;
    this.replaceAtCursor(b);
    return true;
  }

  /**
   * Entry i of bucket k holds a block whose key no longer matches the stored one: rewrite
   * the keys in place when it still sorts between its neighbours, shift it inside the
   * bucket when its place is there, else delete and insert it.
   */
  private rekeyAt(k: number, i: number): void {
    const bk = this.buckets[k]!;
    const b = bk.bl[i]!;
    const stream = b.stream;
    const size = b.size;
    const addr = b.addr;
    const n = bk.n;
    const st = bk.st;
    const sz = bk.sz;
    const ad = bk.ad;
    const bl = bk.bl;
    const last = this.buckets.length - 1;
    let after: boolean; // the predecessor's key < b's new key
    if (i > 0) after = BlockPool.less(st[i - 1]!, sz[i - 1]!, ad[i - 1]!, stream, size, addr);
    else after = k === 0 || BlockPool.less(this.mSt[k - 1]!, this.mSz[k - 1]!, this.mAd[k - 1]!, stream, size, addr);
    let before: boolean; // b's new key < the successor's key
    if (i + 1 < n) before = BlockPool.less(stream, size, addr, st[i + 1]!, sz[i + 1]!, ad[i + 1]!);
    else if (k < last) {
      const nx = this.buckets[k + 1]!;
      before = BlockPool.less(stream, size, addr, nx.st[0]!, nx.sz[0]!, nx.ad[0]!);
    } else before = true;
    let j: number; // b's new index in this bucket
    if (after && before) j = i;
    else if (before) {
      // Lower: its place is in this bucket when it sorts after the previous bucket's last key.
      if (k > 0 && !BlockPool.less(this.mSt[k - 1]!, this.mSz[k - 1]!, this.mAd[k - 1]!, stream, size, addr)) return this.moveOut(k, i, b);
      j = bk.lower(stream, size, addr);
      for (let m = i; m > j; m--) {
        st[m] = st[m - 1]!;
        sz[m] = sz[m - 1]!;
        ad[m] = ad[m - 1]!;
        bl[m] = bl[m - 1]!;
      }
    } else {
      // Higher: its place is in this bucket when it sorts before the next bucket's first key.
      if (i + 1 >= n) return this.moveOut(k, i, b);
      if (k < last) {
        const nx = this.buckets[k + 1]!;
        if (!BlockPool.less(stream, size, addr, nx.st[0]!, nx.sz[0]!, nx.ad[0]!)) return this.moveOut(k, i, b);
      }
      j = bk.lower(stream, size, addr) - 1;
      for (let m = i; m < j; m++) {
        st[m] = st[m + 1]!;
        sz[m] = sz[m + 1]!;
        ad[m] = ad[m + 1]!;
        bl[m] = bl[m + 1]!;
      }
    }
    st[j] = stream;
    sz[j] = size;
    ad[j] = addr;
    bl[j] = b;
    if (i === n - 1 || j === n - 1) this.setMax(k);
  }

  private moveOut(k: number, i: number, b: Block): void {
    this.removeAt(k, i);
    this.insert(b);
  }

  private static less(s1: number, z1: number, a1: number, s2: number, z2: number, a2: number): boolean {
    return s1 < s2 || (s1 === s2 && (z1 < z2 || (z1 === z2 && a1 < a2)));
  }

  /** Removes entry i of bucket k; an emptied bucket is dropped (and kept for reuse). */
  private removeAt(k: number, i: number): void {
    const bk = this.buckets[k]!;
    this._size--;
    const n = bk.n - 1;
    if (n === 0) {
      this.buckets.splice(k, 1);
      bk.bl[0] = null;
      bk.n = 0;
      this.spares.push(bk);
      this.removeMax(k);
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

  /** The free blocks of one stream in pool order, (size, address) ascending (a copy). */
  streamBlocks(stream: number): Block[] {
    const out: Block[] = [];
    for (let b = this.seek(stream, 0); b !== null && b.stream === stream; b = this.advance()) out.push(b);
    return out;
  }

  /** All free blocks in pool order (a copy: safe to mutate the pool while iterating it). */
  toArray(): Block[] {
    const out: Block[] = [];
    for (const bk of this.buckets) for (let i = 0; i < bk.n; i++) out.push(bk.bl[i]!);
    return out;
  }

  clear(): void {
    for (const bk of this.buckets) {
      bk.bl.fill(null);
      bk.n = 0;
      this.spares.push(bk);
    }
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
