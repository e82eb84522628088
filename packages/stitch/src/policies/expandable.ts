import { Block, mergeFree, splitBack, splitFront } from "../core/block.js";
import { BlockPool } from "../core/block-pool.js";
import type { PhysicalChunk as Chunk, PolicyContext } from "../core/policy-context.js";
import { isDriverOom, StitchError } from "../core/errors.js";
import { lowerBound } from "../core/lower-bound.js";
import type { Policy, PolicyInstance } from "../core/policy.js";
import { PYTORCH_KNOBS, pytorchKnobs } from "../core/pytorch-knobs.js";
import { kLargeBuffer, kMinBlockSize, kSmallBuffer, kSmallSize, roundSize } from "../core/rounding.js";

export interface ExpandableOptions extends Record<string, unknown> {
  /** Bytes; null = from settings (unlimited when unset). */
  maxSplitSize: number | null;
  maxNonSplitRounding: number | null;
  roundupPower2Divisions: number[] | null;
  /** Page (handle) size of the small pool's segments. */
  smallPageSize: number;
  /** Page (handle) size of the large pool's segments. */
  largePageSize: number;
}

/** One reserved virtual range of pages (PyTorch's ExpandableSegment). */
class ExpandableSegment {
  /** pages[i]: the handle mapped at base + i * pageSize, or null. */
  readonly pages: (Chunk | null)[] = [];
  constructor(
    readonly base: number,
    readonly size: number,
    readonly pageSize: number,
    readonly stream: number,
  ) {}
}

/** A pool's free mapped blocks plus its unmapped blocks ordered by (stream, address). */
class Pool {
  readonly blocks: BlockPool;
  readonly unmapped: Block[] = [];
  constructor(
    readonly name: string,
    readonly isSmall: boolean,
    readonly pageSize: number,
  ) {
    this.blocks = new BlockPool(name, isSmall);
  }
  private pos(b: Block): number {
    const u = this.unmapped;
    return lowerBound(u.length, (i) => {
      const m = u[i]!;
      return m.stream !== b.stream ? m.stream < b.stream : m.addr < b.addr;
    });
  }
  addUnmapped(b: Block): void {
    this.unmapped.splice(this.pos(b), 0, b);
  }
  removeUnmapped(b: Block): void {
    const i = this.pos(b);
    if (this.unmapped[i] === b) this.unmapped.splice(i, 1);
  }
}

const allocatable = (b: Block | null): b is Block => b !== null && !b.allocated;

/** A block's size for best fit: its size plus the unmapped block right after it (room to grow). */
function xs(b: Block): number {
  const n = b.next;
  return n !== null && !n.mapped ? b.size + n.size : b.size;
}

/**
 * PyTorch's expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, torch
 * 2.11): one reserved range per (stream, pool) grown page by page (2 MiB small, 20 MiB
 * large pages, one handle each); mirrors get_free_block's expandable ranking,
 * try_allocate_expandable_block, map_block, unmap_block and release_blocks.
 */
export class ExpandableAllocator implements PolicyInstance {
  readonly small: Pool;
  readonly large: Pool;
  private readonly ctx: PolicyContext;
  private readonly segments: ExpandableSegment[] = [];
  private readonly maxSplit: number;
  private readonly maxNonSplitRounding: number;
  private readonly rp2: number[] | null;
  private readonly addressSpace: number;

  constructor(ctx: PolicyContext, o: ExpandableOptions) {
    this.ctx = ctx;
    ({ maxSplit: this.maxSplit, maxNonSplitRounding: this.maxNonSplitRounding, rp2: this.rp2 } = pytorchKnobs(ctx.settings, o));
    const g = ctx.device.granularity;
    for (const [k, p] of [["smallPageSize", o.smallPageSize], ["largePageSize", o.largePageSize]] as const) {
      if (p % g !== 0) throw new StitchError("BAD_OPTION", `expandable.${k} ${p} is not a multiple of the device granularity ${g}`);
    }
    this.small = new Pool("small", true, o.smallPageSize);
    this.large = new Pool("large", false, o.largePageSize);
    // totalGlobalMem + totalGlobalMem / 8 (integer division, as PyTorch)
    const t = ctx.device.totalBytes;
    this.addressSpace = t + Math.floor(t / 8);
  }

  malloc(size: number, stream: number): Block | null {
    const rounded = roundSize(size, this.rp2);
    const pool = rounded <= kSmallSize ? this.small : this.large;
    let b = this.getFreeBlock(pool, stream, rounded);
    if (b === null) {
      b = this.tryAllocateExpandableBlock(pool, stream, rounded);
      // release_available_cached_blocks skips expandable blocks, so with max_split_size it cannot help here.
      if (b === null) {
        this.releaseCachedBlocks();
        this.ctx.retried();
        b = this.tryAllocateExpandableBlock(pool, stream, rounded);
      }
      if (b === null) return null;
    }
    // should_split with expandable segments: any remainder >= 512 B, both pools.
    if (b.size - rounded >= kMinBlockSize) {
      const a = splitFront(b, rounded);
      pool.blocks.insert(b);
      return a;
    }
    return b;
  }

  /**
   * Where malloc would serve from mapped free memory, no page mapped (PolicyInstance.peekCached):
   * the best fit's address, as the allocated part of a split keeps the lower one.
   */
  peekCached(size: number, stream: number): number | null {
    const rounded = roundSize(size, this.rp2);
    return this.fit(rounded <= kSmallSize ? this.small : this.large, stream, rounded)?.addr ?? null;
  }

  private getFreeBlock(pool: Pool, stream: number, size: number): Block | null {
    const it = this.fit(pool, stream, size);
    if (it !== null) pool.blocks.delete(it);
    return it;
  }

  /** get_free_block's choice, left in the pool. */
  private fit(pool: Pool, stream: number, size: number): Block | null {
    const blocks = pool.blocks;
    let it = blocks.seek(stream, size);
    if (it === null || it.stream !== stream) return null;
    // Best fit by size + the unmapped block right after (a tail block can grow into it):
    // walk forward while the next candidate's expandable size is smaller.
    let next = blocks.advance();
    while (next !== null && next.stream === stream && xs(next) < xs(it)) {
      it = next;
      next = blocks.advance();
    }
    if (size < this.maxSplit && it.size >= this.maxSplit) return null;
    if (size >= this.maxSplit && it.size >= size + this.maxNonSplitRounding) return null;
    return it;
  }

  /** find_expandable_block: the lowest-address unmapped block of the stream (with a free block before it) that has room. */
  private findExpandableBlock(pool: Pool, stream: number, size: number): Block | null {
    const hasSpace = (b: Block | null) => {
      let bytes = 0;
      while (bytes < size && allocatable(b)) {
        bytes += b.size;
        b = b.next;
      }
      return bytes >= size;
    };
    for (const u of pool.unmapped) {
      if (u.stream < stream) continue;
      if (u.stream !== stream) break;
      const c = allocatable(u.prev) ? u.prev : u;
      if (hasSpace(c)) return c;
    }
    return null;
  }

  /** A new segment's unmapped block, or null when the driver cannot reserve the range (out of memory). */
  private newSegment(pool: Pool, stream: number): Block | null {
    const page = pool.pageSize;
    const pages = Math.ceil(this.addressSpace / page);
    const size = pages * page;
    let base: number;
    try {
      base = this.ctx.reserve(size);
    } catch (e) {
      if (isDriverOom(e)) return null;
      throw e;
    }
    const seg = new ExpandableSegment(base, size, page, stream);
    this.segments.push(seg);
    const b = new Block(base, size, stream, pool.blocks);
    b.mapped = false;
    b.segment = seg;
    pool.addUnmapped(b);
    return b;
  }

  private tryAllocateExpandableBlock(pool: Pool, stream: number, size: number): Block | null {
    const first = this.findExpandableBlock(pool, stream, size) ?? this.newSegment(pool, stream);
    if (first === null) return null;
    let c: Block = first;
    if (!c.mapped && !this.mapBlock(pool, c, Math.min(c.size, size))) return null;
    while (c.size < size) {
      const n = c.next!;
      if (!this.mapBlock(pool, n, Math.min(size - c.size, n.size))) return null;
      c = n;
    }
    pool.blocks.delete(c);
    return c;
  }

  /** ExpandableSegment::map: create (all or nothing) and map the pages covering [addr, addr+size). */
  private mapPages(seg: ExpandableSegment, addr: number, size: number): number {
    const p = seg.pageSize;
    const begin = Math.floor((addr - seg.base) / p);
    const end = Math.ceil((addr + size - seg.base) / p);
    if (begin === end) return 0;
    const made: Chunk[] = [];
    for (let i = begin; i < end; i++) {
      const c = this.ctx.createChunk(p, true);
      if (c === null) {
        for (const m of made) this.ctx.releaseChunk(m);
        return 0;
      }
      made.push(c);
    }
    try {
      this.ctx.mapChunks(seg.base + begin * p, made, seg.stream); // all or nothing
    } catch (e) {
      // a failed map or set-access: give the pages back, as a failed create does
      for (const m of made) this.ctx.releaseChunk(m);
      if (isDriverOom(e)) return 0;
      throw e;
    }
    this.ctx.commitReserved();
    for (let i = begin; i < end; i++) seg.pages[i] = made[i - begin]!;
    return (end - begin) * p;
  }

  /** map_block: map at least `size` bytes at the start of unmapped block `b`, then merge with free mapped neighbours. */
  private mapBlock(pool: Pool, b: Block, size: number): boolean {
    const seg = b.segment as ExpandableSegment;
    const at = b.addr;
    const mapped = this.mapPages(seg, at, size);
    if (mapped === 0) return false;
    pool.removeUnmapped(b);
    if (mapped < b.size) pool.addUnmapped(splitBack(b, b.addr + mapped)); // the rest stays unmapped
    b.mapped = true;
    mergeFree(b, this.takeOut);
    pool.blocks.insert(b);
    this.ctx.segmentMapped(at, mapped, seg.stream);
    return true;
  }

  /** try_merge_blocks' src leaves its pool (keyed on the old bounds) before dst's bounds change; a segment's blocks share one pool. */
  private readonly takeOut = (n: Block): void => {
    const pool = n.pool === this.small.blocks ? this.small : this.large;
    if (n.mapped) pool.blocks.delete(n);
    else pool.removeUnmapped(n);
  };

  free(b: Block): void {
    const pool = b.pool === this.small.blocks ? this.small : this.large;
    mergeFree(b, this.takeOut);
    pool.blocks.insert(b);
  }

  /** unmap_block: unmap the pages wholly inside free block `b`; the rest stays free and mapped. */
  private unmapBlock(pool: Pool, b: Block): void {
    const seg = b.segment as ExpandableSegment;
    const p = seg.pageSize;
    const begin = Math.ceil((b.addr - seg.base) / p);
    const end = Math.floor((b.addr + b.size - seg.base) / p);
    if (begin >= end) return;
    const chunks: Chunk[] = [];
    for (let i = begin; i < end; i++) chunks.push(seg.pages[i]!);
    const uAddr = seg.base + begin * p;
    const uSize = (end - begin) * p;
    this.ctx.unmapChunks(uAddr, chunks, seg.stream);
    for (let i = begin; i < end; i++) {
      this.ctx.releaseChunk(seg.pages[i]!);
      seg.pages[i] = null;
    }
    pool.blocks.delete(b);
    // the mapped bytes before and after the unmapped pages stay free and mapped
    if (uAddr > b.addr) pool.blocks.insert(splitFront(b, uAddr - b.addr));
    if (b.addr + b.size > uAddr + uSize) pool.blocks.insert(splitBack(b, uAddr + uSize));
    b.mapped = false;
    mergeFree(b, this.takeOut);
    pool.addUnmapped(b);
    this.ctx.segmentUnmapped(uAddr, uSize, seg.stream);
  }

  private releaseSegment(pool: Pool, b: Block): void {
    const seg = b.segment as ExpandableSegment;
    pool.removeUnmapped(b);
    this.segments.splice(this.segments.indexOf(seg), 1);
    this.ctx.reserveFree(seg.base, seg.size);
  }

  /** release_cached_blocks: unmap free pages of every segment, large pool first; drop segments left wholly unmapped. */
  releaseCachedBlocks(): void {
    for (const pool of [this.large, this.small]) {
      const toUnmap = pool.blocks.toArray();
      for (const b of toUnmap) {
        this.unmapBlock(pool, b);
        if (b.prev === null && b.next === null && !b.mapped) this.releaseSegment(pool, b);
      }
    }
  }

  emptyCache(): void {
    this.releaseCachedBlocks();
  }

  teardown(): void {
    this.releaseCachedBlocks();
    // Segments never mapped, or left whole-unmapped by an OOM path, still hold a reservation.
    for (const pool of [this.large, this.small]) {
      for (const b of [...pool.unmapped]) if (b.prev === null && b.next === null) this.releaseSegment(pool, b);
    }
  }

  check(): string | null {
    for (const pool of [this.small, this.large]) {
      const m = pool.blocks.checkOrder();
      if (m) return m;
      for (const b of pool.blocks.toArray()) {
        if (b.allocated || !b.mapped) return `block 0x${b.addr.toString(16)} in ${pool.name} free pool is allocated or unmapped`;
      }
    }
    for (const seg of this.segments) {
      // mapped pages must be exactly the pages of mapped blocks
      let mapped = 0;
      for (const c of seg.pages) if (c) mapped += c.size;
      let inBlocks = 0;
      let b: Block | null = null;
      for (const pool of [this.small, this.large]) for (const u of pool.unmapped) if (u.segment === seg) b = u;
      if (b === null) continue;
      while (b.prev !== null) b = b.prev;
      let end = seg.base;
      for (; b !== null; b = b.next) {
        if (b.addr !== end) return `segment 0x${seg.base.toString(16)}: gap at 0x${end.toString(16)}`;
        end = b.addr + b.size;
        if (b.mapped) inBlocks += b.size;
      }
      if (mapped !== inBlocks) return `segment 0x${seg.base.toString(16)}: ${mapped} B of pages mapped, ${inBlocks} B in mapped blocks`;
    }
    return null;
  }
}

export const expandablePolicy: Policy<ExpandableOptions> = {
  name: "expandable",
  description: "PyTorch's expandable segments (torch 2.11): one growable reserved range per (stream, pool), 2 MiB / 20 MiB pages",
  knobs: {
    ...PYTORCH_KNOBS,
    smallPageSize: { type: "bytes", min: 1, max: 2 ** 40, default: kSmallBuffer, description: "page (handle) size of the small pool's segments; a multiple of the device granularity" },
    largePageSize: { type: "bytes", min: 1, max: 2 ** 40, default: kLargeBuffer, description: "page (handle) size of the large pool's segments; a multiple of the device granularity" },
  },
  create: (ctx, o) => new ExpandableAllocator(ctx, o),
};
