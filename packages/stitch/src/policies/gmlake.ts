import { EventKind } from "@gmlake/trace";
import { Block, releaseAvailableCachedBlocks } from "../core/block.js";
import type { PhysicalChunk as Chunk } from "../core/policy-context.js";
import { isDriverOom, StitchError } from "../core/errors.js";
import type { Policy, PolicyInstance } from "../core/policy.js";
import { PYTORCH_KNOBS } from "../core/pytorch-knobs.js";
import { allocationSize, kSmallSize, roundSize } from "../core/rounding.js";
import { PSegment, SBlock, SState } from "./gmlake-blocks.js";
import { GmlakeState, type GmlakeOptions } from "./gmlake-state.js";

export type { GmlakeOptions };

const MiB = 2 ** 20;

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
 *
 * The paper's and its patch's names are kept; what each holds here (gmlake-state.ts has the fields):
 *
 *   name                     GMLake's              holds
 *   pBlock (Block, PSegment) primitive block       chunks mapped side by side in one segment of one new allocation
 *   sBlock (SBlock)          stitched/fused block  a virtual range of its own mapping the chunks of several pBlocks
 *   large                    pPool                 free pBlocks by (stream, size, address)
 *   sPool                    sPool                 wholly free sBlocks (their key blocks), by (stream, size, address)
 *   small                    PyTorch's small pool  requests rounded to at most 1 MiB (CachingAllocator)
 *   C, invC                  chunk size            bytes of one physical chunk (chunkSize), and 1 / C
 *   activeS, freeS, fragS    -                     sBlocks handed out, wholly free (in the sPool), fragmented
 *   segOf, idxOf, sMaps      -                     by chunk id: its segment, its index there, the sBlocks mapping it
 *   SBlock.keep, .free       used/free blocks      chunks used through an active sBlock (a prefix), chunks used by none
 *   stitchedBytes            total_fuse_size       virtual bytes of live sBlocks
 *   mark, epoch              -                     chunks one reuse claims (mark[id] === epoch)
 *   clock                    the free's event id   release order of sBlocks (SBlock.releasedAt), GC's order
 *   rp2                      roundup_power2_divisions  PyTorch's rounding knob
 *   S, p (locals)            -                     an sBlock, a pBlock
 *   malloc's states 1-4      BestFit               reuse() is state 1's sBlock, stitch() state 2, allocNew() 3
 *   free()                   StitchFree            a pBlock merges into the pPool; an sBlock gives back its held pBlocks
 */
export class GmlakeAllocator extends GmlakeState implements PolicyInstance {
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

  /**
   * Where malloc would serve with no new memory and no mapping (PolicyInstance.peekCached): the
   * small pool's best fit; state 1's pBlock (the low part of a split) or cached sBlock. Stitching
   * maps a new range, so a request that would stitch is not answered ahead (null). Without it the
   * live allocator's foresight answered none of gmlake's requests ahead.
   */
  peekCached(size: number, stream: number): number | null {
    let rounded = roundSize(size, this.rp2);
    if (rounded <= kSmallSize) return this.small.peekCached(size, stream);
    rounded = Math.ceil(rounded / this.C) * this.C;
    const f = this.large.seek(stream, rounded);
    if (f !== null && f.stream === stream) return this.fits(f, rounded) ? f.addr : null;
    if (!this.vmm) return null;
    return this.cachedSBlock(stream, rounded)?.addr ?? null;
  }

  /** State 1's cached sBlock for a request no pBlock fits: the sPool's best fit, within reuseLimit. */
  private cachedSBlock(stream: number, size: number): SBlock | null {
    const k = this.sPool.seek(stream, size);
    return k === null || k.stream !== stream || k.size > size * this.reuseLimit ? null : (k.data as SBlock);
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
    const S = this.cachedSBlock(stream, size);
    if (S === null) return null;
    this.sPool.delete(S.key);
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

}

export const gmlakePolicy: Policy<GmlakeOptions> = {
  name: "gmlake",
  description:
    "GMLake (ASPLOS'24) as its PyTorch 2.0 patch: 2 MiB chunk-backed pBlocks, stitched sBlocks of free pBlocks (BestFit's four states), sPool reuse, GC of stitched ranges",
  knobs: {
    vmmDefragment: { type: "boolean", default: true, description: "stitching on (false: caching with chunk-backed pBlocks, no stitch, no sPool)" },
    fragLimit: { type: "bytes", default: 512 * MiB, description: "stitch only requests of at least this many bytes" },
    reuseLimit: { type: "number", greaterThan: 0, max: 1e6, unit: "x request", default: 10, description: "reuse a free sBlock only if its size <= request x reuseLimit" },
    defragLevel: { type: "integer", min: 0, max: 4, default: 0, description: "0 = stitch before new memory; 1 = only after a new allocation failed; 2 = only after releasing the cache" },
    autoGC: { type: "number", min: 0, max: 2 ** 20, unit: "GiB", default: 1000, description: "stitched virtual bytes that trigger a GC of free stitched blocks" },
    reAlloc: { type: "boolean", default: false, description: "a new allocation creates only the bytes missing from the stream's free pBlocks, then stitches" },
    chunkSize: { type: "bytes", min: 1, max: 2 ** 40, default: 2 * MiB, description: "bytes of one physical chunk (one cuMemCreate); a multiple of the device granularity" },
    setAccessPerChunk: { type: "boolean", default: true, description: "one cuMemSetAccess per chunk mapped, as the original does (false: one per mapped range)" },
    ...PYTORCH_KNOBS,
  },
  create: (ctx, o) => new GmlakeAllocator(ctx, o),
};
