import { EventKind } from "@gmlake/trace";
import { Block, mergeFree, releaseAvailableCachedBlocks, splitFront } from "../core/block.js";
import { BlockPool } from "../core/block-pool.js";
import type { MapAccess, PhysicalChunk as Chunk, PolicyContext } from "../core/policy-context.js";
import { isDriverOom, StitchError } from "../core/errors.js";
import type { Policy, PolicyInstance } from "../core/policy.js";
import { allocationSize, kSmallSize, roundSize } from "../core/rounding.js";
import { CachingAllocator } from "./caching.js";
import { PYTORCH_KNOBS, pytorchKnobs } from "../core/pytorch-knobs.js";
import { PSegment, SBlock, SState } from "./gmlake-blocks.js";
import { lowerBoundOf } from "../core/lower-bound.js";

const GiB = 2 ** 30;

const MiB = 2 ** 20;

/** GMLake's knobs under the original (environment variable) names. */
export interface GmlakeOptions extends Record<string, unknown> {
  /** 1 = stitching on; 0 = caching with chunk-backed pBlocks (no stitch, no sPool). */
  vmmDefragment: number;
  /** Stitch only requests of at least this many bytes (512 MiB in the latest code). */
  fragLimit: number;
  /** Reuse a free sBlock only if its size <= request x reuseLimit. */
  reuseLimit: number;
  /** 0 = stitch before allocating new memory; 1 = only after a new allocation failed; 2 = only after releasing the cache. */
  defragLevel: number;
  /** GiB of stitched virtual ranges that triggers a GC of free stitched blocks (the original's unit). */
  autoGC: number;
  /** 1 = the original's reAlloc variant: a new allocation creates only the bytes missing from the stream's free pBlocks and stitches. */
  reAlloc: number;
  /** Bytes of one physical chunk (one cuMemCreate); a multiple of the driver granularity. */
  chunkSize: number;
  /** 1 = one cuMemSetAccess per chunk mapped, as the original does; 0 = one per mapped range. */
  setAccessPerChunk: number;
  /** PyTorch settings (null = the trace's recorded ones). */
  maxSplitSize: number | null;
  maxNonSplitRounding: number | null;
  roundupPower2Divisions: number[] | null;
}

/**
 * GMLake (ASPLOS'24) as its patch to PyTorch 2.0's caching allocator does it: small
 * requests in PyTorch's unchanged small pool; large requests rounded to whole chunks and
 * served by BestFit's four states — (1) a single free pBlock (split), else a cached free
 * sBlock (not split) within reuseLimit; (2) stitch free pBlocks of the stream into a new
 * virtual range; (3) a new pBlock; (4) release the cache, retry, fail. See docs/gmlake.md.
 *
 * Per-chunk state is not kept: a chunk is used iff the pBlock containing it is allocated
 * (by the program, or held by an active sBlock), so only chunks that some sBlock maps
 * (`sMaps`) cost per-chunk work, and pBlocks of segments nothing stitched cost what
 * PyTorch's blocks cost.
 */
export class GmlakeAllocator implements PolicyInstance {
  /** pPool: free pBlocks by (stream, size, address). */
  readonly large = new BlockPool("pPool", false);
  /** sPool: wholly free sBlocks by (stream, size, address) (keys: SBlock.key). */
  readonly sPool = new BlockPool("sPool", false);
  /** PyTorch's small pool, unchanged (requests rounded <= 1 MiB). */
  readonly small: CachingAllocator;
  private readonly ctx: PolicyContext;
  private readonly C: number;
  /** 1 / C: x * invC === x / C exactly when x is a multiple of C (the error of 1/C is below half an ulp of the quotient), and avoids a division on hot paths. */
  private readonly invC: number;
  private readonly vmm: boolean;
  private readonly fragLimit: number;
  private readonly reuseLimit: number;
  private readonly defragLevel: number;
  private readonly autoGcBytes: number;
  private readonly reAlloc: boolean;
  /** How mapChunks sets access (setAccessPerChunk). */
  private readonly access: MapAccess;
  private readonly maxSplit: number;
  private readonly maxNonSplitRounding: number;
  private readonly rp2: number[] | null;

  private readonly segments = new Set<PSegment>();
  private readonly freeS = new Set<SBlock>();
  private readonly fragS = new Set<SBlock>();
  private readonly activeS = new Set<SBlock>();
  /** By chunk id: the segment and index of the chunk, and the sBlocks mapping it. */
  private segOf: (PSegment | undefined)[] = [];
  private idxOf: number[] = [];
  private sMaps: (SBlock[] | undefined)[] = [];
  private mark = new Int32Array(1024);
  private epoch = 0;
  private clock = 0;
  /** Virtual bytes of live sBlocks (GMLake's total_fuse_size). */
  stitchedBytes = 0;
  private readonly n = {
    stitches: 0,
    stitchedChunks: 0,
    sBlockReuses: 0,
    gcRuns: 0,
    gcBlocks: 0,
    gcBytes: 0,
    segmentsCreated: 0,
    chunksCreated: 0,
    peakStitchedBytes: 0,
  };

  constructor(ctx: PolicyContext, o: GmlakeOptions) {
    this.ctx = ctx;
    const g = ctx.device.granularity;
    // the schema (gmlakePolicy.knobs) checked each value; the granularity is the device's
    if (o.chunkSize % ctx.device.granularity !== 0) {
      throw new StitchError("BAD_OPTION", `gmlake.chunkSize ${o.chunkSize} is not a multiple of the device granularity ${ctx.device.granularity}`);
    }
    this.C = o.chunkSize;
    this.invC = 1 / this.C;
    this.vmm = o.vmmDefragment > 0;
    this.fragLimit = o.fragLimit;
    this.reuseLimit = o.reuseLimit;
    this.defragLevel = o.defragLevel;
    this.autoGcBytes = o.autoGC * GiB;
    this.reAlloc = o.reAlloc > 0;
    this.access = o.setAccessPerChunk > 0 ? "each" : "range";
    ({ maxSplit: this.maxSplit, maxNonSplitRounding: this.maxNonSplitRounding, rp2: this.rp2 } = pytorchKnobs(ctx.settings, o));
    this.small = new CachingAllocator(ctx, {
      maxSplitSize: o.maxSplitSize,
      maxNonSplitRounding: o.maxNonSplitRounding,
      roundupPower2Divisions: o.roundupPower2Divisions,
    });
  }

  // ---------------------------------------------------------------- malloc

  malloc(size: number, stream: number): Block | null {
    let rounded = roundSize(size, this.rp2);
    if (rounded <= kSmallSize) return this.mallocSmall(size, stream);
    const C = this.C;
    rounded = Math.ceil(rounded / C) * C;
    // State 1: a single pBlock, else a cached sBlock; state 2 (defragLevel 0): stitch.
    const f = this.large.seek(stream, rounded);
    let b: Block | null;
    if (f !== null && f.stream === stream) {
      if (this.fits(f, rounded)) return this.takeFound(f, rounded); // the hot path
      b = null;
    } else {
      b = this.vmm ? this.reuse(stream, rounded) : null;
    }
    if (b === null) b = this.stitch(stream, rounded, 0);
    if (b === null) {
      // State 3: new memory; state 4: release the cache and retry; stitching at the levels allowed.
      const allocSize = Math.ceil(allocationSize(rounded) / C) * C;
      b = this.allocNew(stream, rounded, allocSize);
      if (b === null && releaseAvailableCachedBlocks(this.large.streamBlocks(stream), rounded, this.maxSplit, (x) => this.releasePBlock(x))) b = this.allocNew(stream, rounded, allocSize);
      if (b === null) b = this.stitch(stream, rounded, 1);
      if (b === null) {
        this.releaseCachedBlocks();
        this.ctx.retried();
        b = this.allocNew(stream, rounded, allocSize);
      }
      if (b === null) b = this.stitch(stream, rounded, 2);
      if (b === null) return null;
    }
    if (b.segment instanceof PSegment) {
      // should_split of GMLake: the remainder is at least one chunk.
      if (rounded < this.maxSplit && b.size - rounded >= C) {
        const a = this.splitLow(b, rounded);
        this.large.insert(b);
        b = a;
      }
      this.markUsed(b, null);
    }
    return b;
  }

  /** PyTorch's small pool; its out-of-memory path also releases the large cache, as release_cached_blocks does. */
  private mallocSmall(size: number, stream: number): Block | null {
    const b = this.small.malloc(size, stream);
    if (b !== null) return b;
    this.releaseCachedBlocks(); // the small pool's own retry was reported (the engine counts one per malloc)
    return this.small.malloc(size, stream);
  }

  /**
   * get_free_block's test of the pPool's best fit b of the stream (when the stream has no
   * pBlock that large, malloc tries a cached sBlock instead).
   */
  private fits(b: Block, size: number): boolean {
    if (size < this.maxSplit && b.size >= this.maxSplit) return false;
    return !(size >= this.maxSplit && b.size >= size + this.maxNonSplitRounding);
  }

  /** Hand out the best fit b, still in the pPool at its cursor: split (the remainder is re-keyed in place) or take it whole. */
  private takeFound(b: Block, rounded: number): Block {
    // should_split of GMLake: the remainder is at least one chunk.
    if (rounded < this.maxSplit && b.size - rounded >= this.C) {
      const a = this.splitLow(b, rounded);
      this.large.rekeyAtCursor(); // b kept the high part: its key shrank
      this.markUsed(a, null);
      return a;
    }
    this.large.takeAtCursor(); // b, removed without a second search
    this.markUsed(b, null);
    return b;
  }

  /**
   * Reuse a free sBlock (not split): its first size/chunk chunks become used. The pBlocks
   * holding them are re-split into used runs (held by the sBlock) and free runs (back to
   * the pPool); other sBlocks mapping those chunks become fragmented.
   */
  private reuse(stream: number, size: number): Block | null {
    const k = this.sPool.seek(stream, size);
    if (k === null || k.stream !== stream || k.size > size * this.reuseLimit) return null;
    const S = k.data as SBlock;
    this.sPool.delete(k);
    this.freeS.delete(S);
    const C = this.C;
    const keep = size / C;
    const ep = ++this.epoch;
    this.growMark();
    const touched: Block[] = [];
    let cur: Block | null = null;
    let curSeg: PSegment | null = null;
    let lo = 0;
    let hi = 0;
    for (let j = 0; j < keep; j++) {
      const c = S.chunks[j]!;
      this.mark[c.id] = ep;
      const seg = this.segOf[c.id]!;
      const i = this.idxOf[c.id]!;
      if (cur !== null && seg === curSeg && i >= lo && i < hi) continue;
      const p = this.ownerOf(seg, i);
      if (p.allocated) throw new StitchError("INVARIANT", `gmlake: free sBlock 0x${S.addr.toString(16)} maps a used chunk`);
      if (this.large.delete(p)) touched.push(p);
      cur = p;
      curSeg = seg;
      lo = (p.addr - seg.base) / C;
      hi = lo + p.size / C;
    }
    S.state = SState.active;
    this.activeS.add(S);
    S.keep = keep;
    S.free = S.n - keep;
    for (const p of touched) this.splitRuns(p, S, ep);
    this.n.sBlockReuses++;
    return this.view(S);
  }

  /** Split a claimed pBlock into runs of marked (used by S) and unmarked (free) chunks. */
  private splitRuns(p: Block, S: SBlock, ep: number): void {
    const C = this.C;
    const seg = p.segment as PSegment;
    const chunks = seg.chunks;
    const mark = this.mark;
    let i = (p.addr - seg.base) / C;
    const end = i + p.size / C;
    let rest = p;
    while (i < end) {
      const used = mark[chunks[i]!.id] === ep;
      let j = i + 1;
      while (j < end && (mark[chunks[j]!.id] === ep) === used) j++;
      const piece = j < end ? this.splitLow(rest, (j - i) * C) : rest;
      if (used) {
        piece.allocated = true;
        piece.data = S;
        S.held.push(piece);
        this.markUsed(piece, S);
      } else {
        piece.allocated = false;
        piece.data = null;
        this.large.insert(piece);
      }
      i = j;
    }
  }

  /** The pBlock containing chunk index i of seg. */
  private ownerOf(seg: PSegment, i: number): Block {
    const starts = seg.starts;
    for (let k = i; k >= 0; k--) {
      const b = starts[k];
      if (b) return b;
    }
    throw new StitchError("INVARIANT", `gmlake: segment 0x${seg.base.toString(16)} has no block at chunk ${i}`);
  }

  /** The block handed to the program for an active sBlock: its used prefix (what it is charged). */
  private view(S: SBlock): Block {
    const bytes = S.keep * this.C;
    const v = new Block(S.addr, bytes, S.stream, null);
    v.segment = S;
    if (S.seams.length > 0) {
      const seams: number[] = [];
      for (const o of S.seams) if (o < bytes) seams.push(o);
      if (seams.length > 0) v.seams = seams;
    }
    return v;
  }

  /** Free pBlocks of a stream in pool order (ascending size, address). */
  /**
   * State 2, get_fused_fragmented_blocks: when the stream's free pBlocks together cover the
   * request, take them from the largest down until they do (split the last when it
   * overshoots by a chunk or more) and map all their chunks side by side in a new range.
   */
  private stitch(stream: number, size: number, time: number): Block | null {
    if (!this.vmm || time < this.defragLevel || size < this.fragLimit) return null;
    const cands = this.large.streamBlocks(stream);
    if (cands.length < 2) return null;
    let sum = 0;
    let k = cands.length;
    while (k > 0 && sum < size) sum += cands[--k]!.size;
    if (sum < size) return null;
    const taken: Block[] = [];
    for (let i = cands.length - 1; i >= k; i--) {
      this.large.delete(cands[i]!);
      taken.push(cands[i]!);
    }
    const C = this.C;
    const over = sum - size;
    if (over >= C) {
      const last = taken[taken.length - 1]!;
      taken[taken.length - 1] = this.splitLow(last, last.size - over);
      this.large.insert(last);
    }
    const chunks: Chunk[] = [];
    const seams: number[] = [];
    let prevSeg: PSegment | null = null;
    let prevIdx = -2;
    for (const p of taken) {
      const seg = p.segment as PSegment;
      const i0 = (p.addr - seg.base) / C;
      const i1 = i0 + p.size / C;
      for (let i = i0; i < i1; i++) {
        if (chunks.length > 0 && (seg !== prevSeg || i !== prevIdx + 1)) seams.push(chunks.length * C);
        chunks.push(seg.chunks[i]!);
        prevSeg = seg;
        prevIdx = i;
      }
    }
    const bytes = chunks.length * C;
    let va: number;
    try {
      va = this.reserveWithGc(bytes, size);
    } catch (e) {
      for (const p of taken) this.mergeFree(p); // a driver error other than OOM: the pBlocks stay free, then it surfaces
      throw e;
    }
    if (va < 0) {
      for (const p of taken) this.mergeFree(p);
      return null;
    }
    try {
      this.ctx.mapChunks(va, chunks, stream, this.access); // all or nothing
    } catch (e) {
      // the stitch failed (map / set-access): give the range back, the pBlocks stay free
      this.ctx.reserveFree(va, bytes);
      for (const p of taken) this.mergeFree(p);
      if (isDriverOom(e)) return null;
      throw e;
    }
    const S = new SBlock(va, bytes, stream, chunks, seams);
    for (const p of taken) {
      p.allocated = true;
      p.data = S;
      this.markUsed(p, S);
    }
    S.held = taken;
    for (const c of chunks) {
      const list = this.sMaps[c.id];
      if (list === undefined) this.sMaps[c.id] = [S];
      else list.push(S);
      const seg = this.segOf[c.id]!;
      seg.stitched++;
      seg.sIdx = null;
    }
    S.keep = S.n;
    S.free = 0;
    this.activeS.add(S);
    this.stitchedBytes += bytes;
    if (this.stitchedBytes > this.n.peakStitchedBytes) this.n.peakStitchedBytes = this.stitchedBytes;
    this.n.stitches++;
    this.n.stitchedChunks += S.n;
    this.ctx.record(EventKind.stitch, va, bytes, stream, S.n);
    if (this.stitchedBytes > this.autoGcBytes) this.gc(2, 0);
    return this.view(S);
  }

  /** cuMemAddressReserve for a stitch; on failure GC stitched ranges (time 0, 1, 2) and retry. */
  private reserveWithGc(bytes: number, request: number): number {
    for (let t = 0; ; t++) {
      try {
        return this.ctx.reserve(bytes);
      } catch (e) {
        if (!isDriverOom(e) || t >= 3) {
          if (isDriverOom(e)) return -1;
          throw e;
        }
        this.gc(t, request);
      }
    }
  }

  /** State 3, realloc_block: a new pBlock of allocSize (reAlloc: only the missing bytes, then stitch). */
  private allocNew(stream: number, size: number, allocSize: number): Block | null {
    if (this.reAlloc && this.vmm && size >= this.fragLimit) {
      let free = 0;
      for (const b of this.large.streamBlocks(stream)) free += b.size;
      if (free >= size) return null; // the original gives up here too ("something weird happened")
      if (free > 0) allocSize = Math.ceil(allocationSize(size - free) / this.C) * this.C;
    }
    const p = this.newSegmentWithGc(stream, allocSize);
    if (p === null || p.size >= size) return p;
    this.large.insert(p); // reAlloc: the new pBlock joins the free ones and is stitched with them
    return this.stitch(stream, size, 4);
  }

  /** The original GCs stitched ranges when a new allocation fails while the device has room and enough garbage exists. */
  private newSegmentWithGc(stream: number, bytes: number): Block | null {
    for (let t = 0; ; t++) {
      const p = this.newSegment(stream, bytes);
      if (p !== null || !this.vmm || t >= 3) return p;
      let garbage = 0;
      for (const S of this.fragS) if (S.stream === stream) garbage += S.size;
      for (const S of this.freeS) if (S.stream === stream) garbage += S.size;
      if (garbage < bytes) return null;
      if (!(this.ctx.freeDeviceBytes() > bytes)) return null;
      this.gc(t, bytes);
    }
  }

  /** Create chunks (all or nothing), reserve a range, map them: one new pBlock spanning a new segment. */
  private newSegment(stream: number, bytes: number): Block | null {
    // More than the device has can never be created: fail now, not after thousands of cuMemCreate calls.
    if (bytes > this.ctx.device.totalBytes) return null;
    const C = this.C;
    const nChunks = bytes / C;
    const chunks: Chunk[] = new Array<Chunk>(nChunks);
    for (let i = 0; i < nChunks; i++) {
      let c: Chunk | null;
      try {
        c = this.ctx.createChunk(C, true);
      } catch (e) {
        for (let j = i - 1; j >= 0; j--) this.ctx.releaseChunk(chunks[j]!); // not OOM: give back, then surface
        throw e;
      }
      if (c === null) {
        for (let j = i - 1; j >= 0; j--) this.ctx.releaseChunk(chunks[j]!);
        return null;
      }
      chunks[i] = c;
    }
    let va: number;
    try {
      va = this.ctx.reserve(bytes);
    } catch (e) {
      for (let j = nChunks - 1; j >= 0; j--) this.ctx.releaseChunk(chunks[j]!);
      if (!isDriverOom(e)) throw e;
      return null;
    }
    try {
      this.ctx.mapChunks(va, chunks, stream, this.access); // all or nothing
    } catch (e) {
      this.ctx.reserveFree(va, bytes);
      for (let j = nChunks - 1; j >= 0; j--) this.ctx.releaseChunk(chunks[j]!);
      if (isDriverOom(e)) return null;
      throw e;
    }
    this.ctx.commitReserved();
    const seg = new PSegment(va, bytes, stream, chunks);
    for (let i = 0; i < nChunks; i++) {
      const id = chunks[i]!.id;
      this.segOf[id] = seg;
      this.idxOf[id] = i;
    }
    this.segments.add(seg);
    const p = new Block(va, bytes, stream, this.large);
    p.segment = seg;
    seg.starts[0] = p;
    this.n.segmentsCreated++;
    this.n.chunksCreated += nChunks;
    this.ctx.segmentMapped(va, bytes, stream);
    return p;
  }

  // ---------------------------------------------------------------- split, merge, chunk states

  /** Split p (not in the pool): the returned block takes the lower `bytes`, p keeps the rest. */
  private splitLow(p: Block, bytes: number): Block {
    const seg = p.segment as PSegment;
    const invC = this.invC;
    const i = (p.addr - seg.base) * invC;
    const a = splitFront(p, bytes);
    seg.starts[i] = a;
    seg.starts[i + bytes * invC] = p;
    return a;
  }

  /** free_block: merge a free pBlock (not in the pool) with free neighbours and pool it. */
  private mergeFree(p: Block): void {
    const seg = p.segment as PSegment;
    const start = p.addr;
    p.allocated = false;
    p.data = null;
    this.slot = null;
    mergeFree(p, this.takeOut);
    if (p.addr !== start) seg.starts[(p.addr - seg.base) * this.invC] = p; // it absorbed the pBlock before it
    // a neighbour may be free but out of the pool (a failed stitch's other pBlocks): then insert, as a delete would have been a no-op
    const slot = this.slot;
    this.slot = null;
    if (slot === null || !this.large.replace(slot, p)) this.large.insert(p);
  }

  /** mergeFree: the pool slot p takes over (BlockPool.replace): often one search, not a delete and an insert. */
  private slot: Block | null = null;

  /** mergeFree's neighbour n leaves: the first keeps its pool slot for p, a second leaves the pool; the seam between them is no pBlock start. */
  private readonly takeOut = (n: Block, p: Block): void => {
    if (this.slot === null) this.slot = n;
    else this.large.delete(n);
    const seg = p.segment as PSegment;
    seg.starts[((n === p.prev ? p.addr : n.addr) - seg.base) * this.invC] = null;
  };

  /** p's chunks became used (by `claimer`, or by the program): other sBlocks mapping them lose free chunks. */
  private markUsed(p: Block, claimer: SBlock | null): void {
    const seg = p.segment as PSegment;
    if (seg.stitched === 0) return;
    const invC = this.invC;
    const i0 = (p.addr - seg.base) * invC;
    const i1 = i0 + p.size * invC;
    const idx = this.stitchedIdx(seg);
    const lists = seg.sLists;
    for (let k = lowerBoundOf(idx, i0); k < idx.length && idx[k]! < i1; k++) {
      const list = lists[k]!;
      for (let m = 0; m < list.length; m++) {
        const S = list[m]!;
        if (S === claimer) continue;
        if (S.state === SState.free) {
          this.sPool.delete(S.key);
          this.freeS.delete(S);
          S.state = SState.fragmented;
          this.fragS.add(S);
        }
        S.free--;
      }
    }
  }

  /** p's chunks became free: other sBlocks mapping them gain free chunks; a fragmented one wholly free returns to the sPool. */
  private markFree(p: Block, releaser: SBlock | null): void {
    const seg = p.segment as PSegment;
    if (seg.stitched === 0) return;
    const invC = this.invC;
    const i0 = (p.addr - seg.base) * invC;
    const i1 = i0 + p.size * invC;
    const idx = this.stitchedIdx(seg);
    const lists = seg.sLists;
    for (let k = lowerBoundOf(idx, i0); k < idx.length && idx[k]! < i1; k++) {
      const list = lists[k]!;
      for (let m = 0; m < list.length; m++) {
        const S = list[m]!;
        if (S === releaser) continue;
        S.free++;
        if (S.free === S.n && S.state === SState.fragmented && S.stream === p.stream) this.toFreePool(S);
      }
    }
  }

  /** Indices of seg's chunks that sBlocks map (rebuilt after a stitch or GC touched the segment). */
  private stitchedIdx(seg: PSegment): Int32Array {
    let idx = seg.sIdx;
    if (idx === null) {
      const out: number[] = [];
      const lists: SBlock[][] = [];
      const chunks = seg.chunks;
      for (let i = 0; i < chunks.length; i++) {
        const l = this.sMaps[chunks[i]!.id];
        if (l !== undefined && l.length > 0) {
          out.push(i);
          lists.push(l);
        }
      }
      seg.sLists = lists;
      idx = seg.sIdx = Int32Array.from(out);
    }
    return idx;
  }

  private toFreePool(S: SBlock): void {
    this.fragS.delete(S);
    S.state = SState.free;
    this.freeS.add(S);
    this.sPool.insert(S.key);
  }

  // ---------------------------------------------------------------- free (StitchFree)

  free(b: Block): void {
    if (b.pool === this.small.small) {
      this.small.free(b);
      return;
    }
    const S = b.segment;
    if (S instanceof SBlock) {
      this.freeStitched(S);
      return;
    }
    this.markFree(b, null);
    this.mergeFree(b);
  }

  /** An sBlock's free: its held pBlocks become free (merge, pool); it goes to the sPool if wholly free, else fragmented. */
  private freeStitched(S: SBlock): void {
    const held = S.held;
    S.held = [];
    for (const p of held) {
      p.allocated = false;
      p.data = null;
      this.markFree(p, S);
      this.mergeFree(p);
    }
    S.free += S.keep;
    S.keep = 0;
    S.releasedAt = ++this.clock;
    this.activeS.delete(S);
    if (S.toGc) {
      this.gcOne(S);
    } else if (S.free === S.n) {
      S.state = SState.free;
      this.freeS.add(S);
      this.sPool.insert(S.key);
    } else {
      S.state = SState.fragmented;
      this.fragS.add(S);
    }
  }

  // ---------------------------------------------------------------- GC and release

  /**
   * garbage_collect_fused_blocks: unmap and address-free fragmented sBlocks in release
   * order (time <= 1 with a required size: stop at 4^(time+1) x that size), then, for
   * time > 0, every free sBlock. Physical chunks are never released here.
   */
  gc(time: number, requireSize: number): number {
    let garbage = 0;
    let blocks = 0;
    const byRelease = (a: SBlock, b: SBlock) => a.releasedAt - b.releasedAt;
    for (const S of [...this.fragS].sort(byRelease)) {
      garbage += S.size;
      blocks++;
      this.gcOne(S);
      if (requireSize > 0 && time <= 1 && garbage >= requireSize * 4 ** (time + 1)) break;
    }
    if (time > 0) {
      for (const S of [...this.freeS].sort(byRelease)) {
        garbage += S.size;
        blocks++;
        this.gcOne(S);
      }
    }
    this.n.gcRuns++;
    this.n.gcBlocks += blocks;
    this.n.gcBytes += garbage;
    if (blocks > 0) this.ctx.record(EventKind.gc, 0, garbage, 0, blocks);
    return garbage;
  }

  /** Unmap an sBlock (not active) and free its range. */
  private gcOne(S: SBlock): void {
    const C = this.C;
    const chunks = S.chunks;
    let j = 0;
    while (j < S.n) {
      if (chunks[j] === null) {
        j++;
        continue;
      }
      let e = j + 1;
      while (e < S.n && chunks[e] !== null) e++;
      this.ctx.unmapChunks(S.addr + j * C, (j === 0 && e === S.n ? chunks : chunks.slice(j, e)) as Chunk[], S.stream);
      j = e;
    }
    this.ctx.reserveFree(S.addr, S.size);
    for (const c of chunks) if (c !== null) this.unlink(S, c);
    if (S.state === SState.free) {
      this.sPool.delete(S.key);
      this.freeS.delete(S);
    } else if (S.state === SState.fragmented) {
      this.fragS.delete(S);
    }
    S.state = SState.dead;
    this.stitchedBytes -= S.size;
  }

  private unlink(S: SBlock, c: Chunk): void {
    const list = this.sMaps[c.id]!;
    const k = list.indexOf(S);
    list[k] = list[list.length - 1]!;
    list.pop();
    const seg = this.segOf[c.id]!;
    seg.stitched--;
    seg.sIdx = null;
  }

  /** release_block of a whole free pBlock: sBlocks mapping its chunks are collected (active ones lose the chunk and are collected at their free). */
  private releasePBlock(p: Block): void {
    this.large.delete(p);
    const seg = p.segment as PSegment;
    const C = this.C;
    if (seg.stitched > 0) {
      for (const c of seg.chunks) {
        const list = this.sMaps[c.id];
        while (list !== undefined && list.length > 0) {
          const S = list[list.length - 1]!;
          if (S.state === SState.active) {
            const j = S.chunks.indexOf(c);
            this.ctx.unmapChunks(S.addr + j * C, [c], S.stream);
            S.chunks[j] = null;
            S.toGc = true;
            this.unlink(S, c);
          } else {
            this.gcOne(S);
          }
        }
      }
    }
    this.ctx.unmapChunks(seg.base, seg.chunks, seg.stream);
    this.ctx.reserveFree(seg.base, seg.size);
    for (const c of seg.chunks) {
      this.sMaps[c.id] = undefined;
      this.segOf[c.id] = undefined;
      this.ctx.releaseChunk(c);
    }
    this.segments.delete(seg);
    this.ctx.segmentUnmapped(seg.base, seg.size, seg.stream);
  }

  /** release_cached_blocks: every whole free pBlock (with the sBlocks mapping it), then the small pool's free segments. */
  releaseCachedBlocks(): void {
    for (const b of this.large.toArray()) if (b.prev === null && b.next === null) this.releasePBlock(b);
    this.small.releaseCachedBlocks();
  }

  emptyCache(): void {
    this.releaseCachedBlocks();
    this.gc(2, 0);
  }

  teardown(): void {
    this.emptyCache();
  }

  private growMark(): void {
    const need = this.segOf.length;
    if (this.mark.length < need) {
      const m = new Int32Array(Math.max(need, this.mark.length * 2));
      m.set(this.mark);
      this.mark = m;
    }
  }

  // ---------------------------------------------------------------- checks and counters

  counters(): Record<string, number> {
    return { ...this.n, stitchedBytes: this.stitchedBytes, fragmentedSBlocks: this.fragS.size, freeSBlocks: this.freeS.size };
  }

  check(): string | null {
    const m = this.small.check() ?? this.large.checkOrder() ?? this.sPool.checkOrder();
    if (m) return m;
    const C = this.C;
    const hex = (a: number) => "0x" + a.toString(16);
    let pairs = 0;
    const ownerOf: (Block | undefined)[] = []; // by chunk id, filled while walking the chains
    // pBlocks: chains tile their segment; pool membership; starts[]; held blocks point at active sBlocks.
    for (const seg of this.segments) {
      let b: Block | null = seg.starts[0] ?? null;
      if (b === null || b.prev !== null) return `segment ${hex(seg.base)}: no head block`;
      let at = seg.base;
      for (; b !== null; b = b.next) {
        if (b.addr !== at || b.size <= 0 || b.size % C !== 0) return `segment ${hex(seg.base)}: broken chain at ${hex(at)}`;
        if (b.segment !== seg) return `block ${hex(b.addr)} points at another segment`;
        const i0: number = (b.addr - seg.base) / C;
        if (seg.starts[i0] !== b) return `segment ${hex(seg.base)}: starts[${i0}] is not the block there`;
        for (let i = i0 + 1; i < i0 + b.size / C; i++) if (seg.starts[i] !== null) return `segment ${hex(seg.base)}: stale starts[${i}]`;
        for (let i = i0; i < i0 + b.size / C; i++) ownerOf[seg.chunks[i]!.id] = b;
        const inPool = this.large.has(b);
        if (b.allocated === inPool) return `pBlock ${hex(b.addr)}: allocated=${b.allocated} but in pPool=${inPool}`;
        if (!b.allocated && b.next !== null && !b.next.allocated) return `pBlock ${hex(b.addr)}: unmerged free neighbour`;
        if (b.data !== null) {
          const S = b.data as SBlock;
          if (!(S instanceof SBlock) || S.state !== SState.active || !S.held.includes(b)) return `pBlock ${hex(b.addr)}: held by a block that is not an active sBlock`;
        }
        at = b.addr + b.size;
      }
      if (at !== seg.base + seg.size) return `segment ${hex(seg.base)}: chain ends at ${hex(at)}`;
      let stitched = 0;
      for (let i = 0; i < seg.chunks.length; i++) {
        const c = seg.chunks[i]!;
        if (!c.live || this.segOf[c.id] !== seg || this.idxOf[c.id] !== i) return `chunk ${c.id}: wrong segment index`;
        if (!c.mappings.includes(seg.base + i * C)) return `chunk ${c.id}: not mapped in its segment`;
        const list = this.sMaps[c.id] ?? [];
        if (c.mappings.length !== 1 + list.length) return `chunk ${c.id}: ${c.mappings.length} mappings, 1 + ${list.length} mappers`;
        for (const S of list) {
          const j = S.chunks.indexOf(c);
          if (j < 0 || S.state === SState.dead || !c.mappings.includes(S.addr + j * C)) return `chunk ${c.id}: mapper sBlock ${hex(S.addr)} does not map it`;
        }
        stitched += list.length;
      }
      if (stitched !== seg.stitched) return `segment ${hex(seg.base)}: stitched ${seg.stitched} != ${stitched}`;
      if (seg.sIdx !== null) {
        const want: number[] = [];
        for (let i = 0; i < seg.chunks.length; i++) if ((this.sMaps[seg.chunks[i]!.id]?.length ?? 0) > 0) want.push(i);
        if (want.join() !== Array.from(seg.sIdx).join()) return `segment ${hex(seg.base)}: stale stitched-chunk index`;
        for (let k = 0; k < want.length; k++) {
          if (seg.sLists[k] !== this.sMaps[seg.chunks[want[k]!]!.id]) return `segment ${hex(seg.base)}: stale mapper list at chunk ${want[k]}`;
        }
      }
      pairs += stitched;
    }
    // sBlocks: state sets, free counts against the pBlocks' states, held = used prefix.
    let bytes = 0;
    let mapped = 0;
    const used = (c: Chunk) => ownerOf[c.id]!.allocated;
    for (const [set, st] of [
      [this.activeS, SState.active],
      [this.freeS, SState.free],
      [this.fragS, SState.fragmented],
    ] as const) {
      for (const S of set) {
        if (S.state !== st) return `sBlock ${hex(S.addr)}: state ${S.state} in set of ${st}`;
        bytes += S.size;
        let free = 0;
        for (let j = 0; j < S.n; j++) {
          const c = S.chunks[j];
          if (c === null) continue;
          mapped++;
          if (!c.live || ownerOf[c.id] === undefined) return `sBlock ${hex(S.addr)} maps a chunk of no live segment`;
          if (!used(c)) free++;
          if (st === SState.active && j < S.keep) {
            if (ownerOf[c.id]!.data !== S) return `sBlock ${hex(S.addr)}: used chunk ${j} not in a pBlock it holds`;
          }
        }
        if (!S.toGc && free !== S.free) return `sBlock ${hex(S.addr)}: free ${S.free} != ${free}`;
        if (st === SState.free && (free !== S.n || !this.sPool.has(S.key))) return `sBlock ${hex(S.addr)}: free but not wholly free or not in sPool`;
        if (st === SState.fragmented && this.sPool.has(S.key)) return `sBlock ${hex(S.addr)}: fragmented and in sPool`;
        if (st === SState.active) {
          let heldChunks = 0;
          for (const p of S.held) heldChunks += p.size / C;
          if (heldChunks !== S.keep) return `sBlock ${hex(S.addr)}: holds ${heldChunks} chunks, uses ${S.keep}`;
          if (S.toGc !== S.chunks.includes(null)) return `sBlock ${hex(S.addr)}: toGc inconsistent`;
        } else if (S.toGc) return `sBlock ${hex(S.addr)}: free but marked toGc`;
      }
    }
    if (mapped !== pairs) return `sBlocks map ${mapped} chunks, chunks list ${pairs} sBlock mappers`;
    if (bytes !== this.stitchedBytes) return `stitched bytes ${this.stitchedBytes} != live sBlocks ${bytes}`;
    if (this.sPool.size !== this.freeS.size) return `sPool holds ${this.sPool.size}, free sBlocks ${this.freeS.size}`;
    let chunkBytes = 0;
    for (const seg of this.segments) chunkBytes += seg.size;
    if (chunkBytes + this.ctx.plainSegmentBytes !== this.ctx.reservedBytes) {
      return `reserved ${this.ctx.reservedBytes} != pBlock segments ${chunkBytes} + small segments ${this.ctx.plainSegmentBytes}`;
    }
    return null;
  }
}

export const gmlakePolicy: Policy<GmlakeOptions> = {
  name: "gmlake",
  description:
    "GMLake (ASPLOS'24) as its PyTorch 2.0 patch: 2 MiB chunk-backed pBlocks, stitched sBlocks of free pBlocks (BestFit's four states), sPool reuse, GC of stitched ranges",
  knobs: {
    vmmDefragment: { type: "integer", min: 0, max: 1, unit: "0/1", default: 1, description: "1 = stitching on; 0 = caching with chunk-backed pBlocks (no stitch, no sPool)" },
    fragLimit: { type: "bytes", default: 512 * MiB, description: "stitch only requests of at least this many bytes" },
    reuseLimit: { type: "number", greaterThan: 0, max: 1e6, unit: "x request", default: 10, description: "reuse a free sBlock only if its size <= request x reuseLimit" },
    defragLevel: { type: "integer", min: 0, max: 4, default: 0, description: "0 = stitch before new memory; 1 = only after a new allocation failed; 2 = only after releasing the cache" },
    autoGC: { type: "number", min: 0, max: 2 ** 20, unit: "GiB", default: 1000, description: "stitched virtual bytes that trigger a GC of free stitched blocks" },
    reAlloc: { type: "integer", min: 0, max: 1, unit: "0/1", default: 0, description: "1 = a new allocation creates only the bytes missing from the stream's free pBlocks, then stitches" },
    chunkSize: { type: "bytes", min: 1, max: 2 ** 40, default: 2 * MiB, description: "bytes of one physical chunk (one cuMemCreate); a multiple of the device granularity" },
    setAccessPerChunk: { type: "integer", min: 0, max: 1, unit: "0/1", default: 1, description: "1 = one cuMemSetAccess per chunk mapped, as the original does; 0 = one per mapped range" },
    ...PYTORCH_KNOBS,
  },
  create: (ctx, o) => new GmlakeAllocator(ctx, o),
};
