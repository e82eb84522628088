import type { PhysicalChunk as Chunk } from "../core/policy-context.js";
import type { Block } from "../core/block.js";
import { StitchError } from "../core/errors.js";
import { lowerBoundOf } from "../core/lower-bound.js";

/**
 * One stream's virtual range for the vms policy's large blocks. Blocks cover it from
 * `base` to `base + size` as an address-ordered chain; each block is wholly mapped or
 * wholly unmapped. Physical handles are mapped at handle-aligned places inside; their
 * starts are kept sorted here (they change only on the slow path: a grow or a release).
 */
export class Arena {
  /** Mapping starts, ascending. */
  readonly hAddr: number[] = [];
  /** hChunk[i] is mapped at hAddr[i]. */
  readonly hChunk: Chunk[] = [];
  /** First block of the chain (never absorbed: merges keep the left block). */
  head: Block | null = null;
  /** The unmapped blocks (always free): every window a grow may pick contains one. */
  readonly unmapped = new Set<Block>();

  constructor(
    readonly base: number,
    readonly size: number,
    readonly stream: number,
  ) {}

  get end(): number {
    return this.base + this.size;
  }

  /** Index of the first handle starting at or after `addr`. */
  lowerBound(addr: number): number {
    return lowerBoundOf(this.hAddr, addr);
  }

  addHandle(addr: number, c: Chunk): void {
    const i = this.lowerBound(addr);
    this.hAddr.splice(i, 0, addr);
    this.hChunk.splice(i, 0, c);
  }

  removeHandle(addr: number): Chunk {
    const i = this.lowerBound(addr);
    if (this.hAddr[i] !== addr) throw new StitchError("INVARIANT", `vms: no handle mapped at 0x${addr.toString(16)}`);
    const c = this.hChunk[i]!;
    this.hAddr.splice(i, 1);
    this.hChunk.splice(i, 1);
    return c;
  }

  /** Offsets (from addr) where one handle ends and another begins inside [addr, end): integrity seams. */
  seams(addr: number, end: number): number[] | null {
    const a = this.hAddr;
    let i = this.lowerBound(addr + 1);
    if (i >= a.length || a[i]! >= end) return null;
    const out: number[] = [];
    for (; i < a.length && a[i]! < end; i++) out.push(a[i]! - addr);
    return out;
  }
}

/** A small-pool segment: a block of the arena (`host`, kept allocated) that small blocks subdivide. */
export class SmallSegment {
  constructor(readonly host: Block) {}
}
