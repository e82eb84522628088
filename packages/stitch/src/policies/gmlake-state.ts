import { EventKind } from "@gmlake/trace";
import { Block, mergeFree, splitFront } from "../core/block.js";
import { BlockPool } from "../core/block-pool.js";
import type { MapAccess, PhysicalChunk as Chunk, PolicyContext } from "../core/policy-context.js";
import { StitchError } from "../core/errors.js";
import { lowerBoundOf } from "../core/lower-bound.js";
import { pytorchKnobs } from "../core/pytorch-knobs.js";
import { CachingAllocator } from "./caching.js";
import { PSegment, SBlock, SState } from "./gmlake-blocks.js";

const GiB = 2 ** 30;

// GmlakeAllocator's state and what keeps it true (gmlake.ts decides what to do with it).

/** GMLake's knobs under the original (environment variable) names. */
export interface GmlakeOptions extends Record<string, unknown> {
  /** Stitching on; false = caching with chunk-backed pBlocks (no stitch, no sPool). The original's 1/0 are accepted too (checkKnob). */
  vmmDefragment: boolean;
  /** Stitch only requests of at least this many bytes (512 MiB in the latest code). */
  fragLimit: number;
  /** Reuse a free sBlock only if its size <= request x reuseLimit. */
  reuseLimit: number;
  /** 0 = stitch before allocating new memory; 1 = only after a new allocation failed; 2 = only after releasing the cache. */
  defragLevel: number;
  /** GiB of stitched virtual ranges that triggers a GC of free stitched blocks (the original's unit). */
  autoGC: number;
  /** The original's reAlloc variant: a new allocation creates only the bytes missing from the stream's free pBlocks and stitches. */
  reAlloc: boolean;
  /** Bytes of one physical chunk (one cuMemCreate); a multiple of the driver granularity. */
  chunkSize: number;
  /** One cuMemSetAccess per chunk mapped, as the original does; false = one per mapped range. */
  setAccessPerChunk: boolean;
  /** PyTorch settings (null = the trace's recorded ones). */
  maxSplitSize: number | null;
  maxNonSplitRounding: number | null;
  roundupPower2Divisions: number[] | null;
}

/**
 * What GMLake's BestFit works on: pBlocks (Blocks of physical chunks in chunk-backed
 * segments, PSegment) in the pPool, the sBlocks that map their chunks in stitched ranges,
 * and the bookkeeping between them: split and merge of pBlocks, chunks becoming used or
 * free (which moves sBlocks between free and fragmented), GC of stitched ranges, release
 * of whole pBlocks, and check(). GmlakeAllocator (gmlake.ts) adds malloc and free.
 */
export abstract class GmlakeState {
  /** pPool: free pBlocks by (stream, size, address). */
  readonly large = new BlockPool("pPool", false);
  /** sPool: wholly free sBlocks by (stream, size, address) (keys: SBlock.key). */
  readonly sPool = new BlockPool("sPool", false);
  /** PyTorch's small pool, unchanged (requests rounded <= 1 MiB). */
  readonly small: CachingAllocator;
  protected readonly ctx: PolicyContext;
  protected readonly C: number;
  /** 1 / C: x * invC === x / C exactly when x is a multiple of C (the error of 1/C is below half an ulp of the quotient), and avoids a division on hot paths. */
  protected readonly invC: number;
  protected readonly vmm: boolean;
  protected readonly fragLimit: number;
  protected readonly reuseLimit: number;
  protected readonly defragLevel: number;
  protected readonly autoGcBytes: number;
  protected readonly reAlloc: boolean;
  /** How mapChunks sets access (setAccessPerChunk). */
  protected readonly access: MapAccess;
  protected readonly maxSplit: number;
  protected readonly maxNonSplitRounding: number;
  protected readonly rp2: number[] | null;

  protected readonly segments = new Set<PSegment>();
  protected readonly freeS = new Set<SBlock>();
  protected readonly fragS = new Set<SBlock>();
  protected readonly activeS = new Set<SBlock>();
  /** By chunk id: the segment and index of the chunk, and the sBlocks mapping it. */
  protected segOf: (PSegment | undefined)[] = [];
  protected idxOf: number[] = [];
  protected sMaps: (SBlock[] | undefined)[] = [];
  protected mark = new Int32Array(1024);
  protected epoch = 0;
  protected clock = 0;
  /** Virtual bytes of live sBlocks (GMLake's total_fuse_size). */
  stitchedBytes = 0;
  protected readonly n = {
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
    this.vmm = o.vmmDefragment;
    this.fragLimit = o.fragLimit;
    this.reuseLimit = o.reuseLimit;
    this.defragLevel = o.defragLevel;
    this.autoGcBytes = o.autoGC * GiB;
    this.reAlloc = o.reAlloc;
    this.access = o.setAccessPerChunk ? "each" : "range";
    ({ maxSplit: this.maxSplit, maxNonSplitRounding: this.maxNonSplitRounding, rp2: this.rp2 } = pytorchKnobs(ctx.settings, o));
    this.small = new CachingAllocator(ctx, {
      maxSplitSize: o.maxSplitSize,
      maxNonSplitRounding: o.maxNonSplitRounding,
      roundupPower2Divisions: o.roundupPower2Divisions,
    });
  }

  /** The pBlock containing chunk index i of seg. */
  protected ownerOf(seg: PSegment, i: number): Block {
    const starts = seg.starts;
    for (let k = i; k >= 0; k--) {
      const b = starts[k];
      if (b) return b;
    }
    throw new StitchError("INVARIANT", `gmlake: segment 0x${seg.base.toString(16)} has no block at chunk ${i}`);
  }

  // ---------------------------------------------------------------- split, merge, chunk states

  /** Split p (not in the pool): the returned block takes the lower `bytes`, p keeps the rest. */
  protected splitLow(p: Block, bytes: number): Block {
    const seg = p.segment as PSegment;
    const invC = this.invC;
    const i = (p.addr - seg.base) * invC;
    const a = splitFront(p, bytes);
    seg.starts[i] = a;
    seg.starts[i + bytes * invC] = p;
    return a;
  }

  /** free_block: merge a free pBlock (not in the pool) with free neighbours and pool it. */
  protected mergeFree(p: Block): void {
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
  protected slot: Block | null = null;

  /** mergeFree's neighbour n leaves: the first keeps its pool slot for p, a second leaves the pool; the seam between them is no pBlock start. */
  protected readonly takeOut = (n: Block, p: Block): void => {
    if (this.slot === null) this.slot = n;
    else this.large.delete(n);
    const seg = p.segment as PSegment;
    seg.starts[((n === p.prev ? p.addr : n.addr) - seg.base) * this.invC] = null;
  };

  /** p's chunks became used (by `claimer`, or by the program): other sBlocks mapping them lose free chunks. */
  protected markUsed(p: Block, claimer: SBlock | null): void {
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
  protected markFree(p: Block, releaser: SBlock | null): void {
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
  protected stitchedIdx(seg: PSegment): Int32Array {
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

  protected toFreePool(S: SBlock): void {
    this.fragS.delete(S);
    S.state = SState.free;
    this.freeS.add(S);
    this.sPool.insert(S.key);
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
  protected gcOne(S: SBlock): void {
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

  protected unlink(S: SBlock, c: Chunk): void {
    const list = this.sMaps[c.id]!;
    const k = list.indexOf(S);
    list[k] = list[list.length - 1]!;
    list.pop();
    const seg = this.segOf[c.id]!;
    seg.stitched--;
    seg.sIdx = null;
  }

  /** release_block of a whole free pBlock: sBlocks mapping its chunks are collected (active ones lose the chunk and are collected at their free). */
  protected releasePBlock(p: Block): void {
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

  protected growMark(): void {
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
