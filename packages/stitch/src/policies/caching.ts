import { Block, mergeFree, releaseAvailableCachedBlocks, splitFront } from "../core/block.js";
import { BlockPool } from "../core/block-pool.js";
import type { PolicyContext } from "../core/policy-context.js";
import type { Policy, PolicyInstance } from "../core/policy.js";
import { PYTORCH_KNOBS, pytorchKnobs } from "../core/pytorch-knobs.js";
import { allocationSize, kMinBlockSize, kSmallSize, roundSize } from "../core/rounding.js";

/** A merged neighbour leaves its pool (a segment's blocks share one pool). */
const leavePool = (n: Block): void => void n.pool!.delete(n);

export interface CachingOptions extends Record<string, unknown> {
  /** Bytes; null = from the trace's allocator settings (-1 / unset = unlimited). */
  maxSplitSize: number | null;
  /** Bytes; null = from settings (PyTorch default 20 MiB). */
  maxNonSplitRounding: number | null;
  /** 16 entries indexed by log2(size) - 20; null = from settings. */
  roundupPower2Divisions: number[] | null;
}

/** Segment bookkeeping of a cudaMalloc'd segment. */
class Segment {
  constructor(
    readonly addr: number,
    readonly size: number,
    readonly stream: number,
  ) {}
}

/**
 * PyTorch's CUDA caching allocator (torch 2.11, expandable_segments off): see
 * ../shared/reference/pytorch-allocator.md. Mirrors DeviceCachingAllocator::malloc,
 * get_free_block, alloc_block, release_available_cached_blocks, release_cached_blocks,
 * alloc_found_block (split), free_block (merge).
 */
export class CachingAllocator implements PolicyInstance {
  readonly small = new BlockPool("small", true);
  readonly large = new BlockPool("large", false);
  private readonly ctx: PolicyContext;
  private readonly maxSplit: number;
  private readonly maxNonSplitRounding: number;
  private readonly rp2: number[] | null;

  constructor(ctx: PolicyContext, o: CachingOptions) {
    this.ctx = ctx;
    ({ maxSplit: this.maxSplit, maxNonSplitRounding: this.maxNonSplitRounding, rp2: this.rp2 } = pytorchKnobs(ctx.settings, o));
  }

  malloc(size: number, stream: number): Block | null {
    const rounded = roundSize(size, this.rp2);
    const pool = rounded <= kSmallSize ? this.small : this.large;
    let b = this.getFreeBlock(pool, stream, rounded);
    if (b === null) {
      // No memory fraction is modelled, so garbage_collect_cached_blocks never runs (it needs set_fraction).
      const allocSize = allocationSize(rounded);
      b = this.allocBlock(pool, stream, allocSize);
      if (b === null && releaseAvailableCachedBlocks(pool.streamBlocks(stream), rounded, this.maxSplit, (x) => this.releaseBlock(x))) b = this.allocBlock(pool, stream, allocSize);
      if (b === null) {
        this.releaseCachedBlocks();
        this.ctx.retried();
        b = this.allocBlock(pool, stream, allocSize);
      }
      if (b === null) return null;
    }
    return this.allocFoundBlock(b, rounded, pool);
  }

  /**
   * Where malloc would serve from the pool with no cudaMalloc (PolicyInstance.peekCached): the
   * best fit's address, as the allocated part of a split keeps the lower one. Without it the
   * live allocator's foresight had nothing to answer and every caching request waited on the
   * JS thread.
   */
  peekCached(size: number, stream: number): number | null {
    const rounded = roundSize(size, this.rp2);
    return this.fit(rounded <= kSmallSize ? this.small : this.large, stream, rounded)?.addr ?? null;
  }

  /** get_free_block's choice, left in the pool (its cursor on it). */
  private fit(pool: BlockPool, stream: number, size: number): Block | null {
    const b = pool.seek(stream, size);
    if (b === null || b.stream !== stream) return null;
    // Do not return an oversized block for a small request, nor a much larger one for a large request.
    if (size < this.maxSplit && b.size >= this.maxSplit) return null;
    if (size >= this.maxSplit && b.size >= size + this.maxNonSplitRounding) return null;
    return b;
  }

  private getFreeBlock(pool: BlockPool, stream: number, size: number): Block | null {
    return this.fit(pool, stream, size) === null ? null : pool.takeAtCursor();
  }

  private allocBlock(pool: BlockPool, stream: number, allocSize: number): Block | null {
    const addr = this.ctx.segmentAlloc(allocSize, stream);
    if (addr < 0) return null;
    const b = new Block(addr, allocSize, stream, pool);
    b.segment = new Segment(addr, allocSize, stream);
    return b;
  }

  private shouldSplit(b: Block, size: number): boolean {
    const remaining = b.size - size;
    if (b.pool!.isSmall) return remaining >= kMinBlockSize;
    return size < this.maxSplit && remaining > kSmallSize;
  }

  private allocFoundBlock(b: Block, size: number, pool: BlockPool): Block {
    if (!this.shouldSplit(b, size)) return b;
    // The allocated part keeps the lower address; the remainder goes back to the pool.
    const a = splitFront(b, size);
    pool.insert(b);
    return a;
  }

  free(b: Block): void {
    mergeFree(b, leavePool);
    b.pool!.insert(b);
  }

  private releaseBlock(b: Block): void {
    b.pool!.delete(b);
    this.ctx.segmentFree(b.addr, b.size, b.stream);
  }

  /** release_cached_blocks: cudaFree every whole (unsplit) free segment, large pool first, in pool order. */
  releaseCachedBlocks(): void {
    for (const pool of [this.large, this.small]) {
      for (const b of pool.toArray()) if (b.prev === null && b.next === null) this.releaseBlock(b);
    }
  }

  emptyCache(): void {
    this.releaseCachedBlocks();
  }

  teardown(): void {
    this.releaseCachedBlocks();
  }

  check(): string | null {
    for (const pool of [this.small, this.large]) {
      const m = pool.checkOrder();
      if (m) return m;
      for (const b of pool.toArray()) {
        if (b.allocated) return `allocated block 0x${b.addr.toString(16)} in pool ${pool.name}`;
        if ((b.prev !== null && !b.prev.allocated) || (b.next !== null && !b.next.allocated)) {
          return `free block 0x${b.addr.toString(16)} has an unmerged free neighbour`;
        }
        if (b.prev !== null && b.prev.addr + b.prev.size !== b.addr) return `broken chain at 0x${b.addr.toString(16)}`;
      }
    }
    return null;
  }
}

export const cachingPolicy: Policy<CachingOptions> = {
  name: "caching",
  description: "PyTorch's CUDA caching allocator (torch 2.11): small/large pools, best fit by (stream, size, address), split/merge, release-and-retry",
  knobs: PYTORCH_KNOBS,
  create: (ctx, o) => new CachingAllocator(ctx, o),
};
