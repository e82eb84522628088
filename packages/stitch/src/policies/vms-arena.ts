import type { PhysicalChunk as Chunk } from "../core/policy-context.js";
import type { Block } from "../core/block.js";
import type { BlockPool } from "../core/block-pool.js";
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

/** A free handle that may move: wholly inside free mapped block `block`. */
export interface Donor {
  arena: Arena;
  block: Block;
  addr: number;
  chunk: Chunk;
  used: boolean;
  /** Released to make room under pressure instead of moved (it fits no gap). */
  release?: boolean;
}

/** The knobs the donor list follows (VmsOptions'). */
export interface DonorOptions {
  readonly moveFreePages: boolean;
  readonly crossStream: boolean;
  readonly donorOrder: string;
}

/**
 * Free handles that may move, largest first: wholly inside free mapped blocks, outside the
 * window. `lendPool`: private pools' free memory may move too (PolicyContext.lendPoolMemory).
 */
export function donorsFor(pool: BlockPool, o: DonorOptions, win: Arena, p: number, s: number, stream: number, lendPool = false): Donor[] {
  const out: Donor[] = [];
  if (!o.moveFreePages) return out;
  for (const b of pool.toArray()) {
    // A captured graph may replay into a private pool's free addresses (a trace's pools): never move those.
    if ((b.stream < 0 && !lendPool) || (!o.crossStream && b.stream !== stream)) continue;
    const a = b.segment as Arena;
    const end = b.addr + b.size;
    for (let i = a.lowerBound(b.addr); i < a.hAddr.length && a.hAddr[i]! < end; i++) {
      const h = a.hAddr[i]!;
      const c = a.hChunk[i]!;
      if (h + c.size > end) break;
      if (a === win && h < p + s && h + c.size > p) continue;
      out.push({ arena: a, block: b, addr: h, chunk: c, used: false });
    }
  }
  if (o.donorOrder === "hole") out.sort((x, y) => x.block.size - y.block.size || y.chunk.size - x.chunk.size);
  else out.sort((x, y) => y.chunk.size - x.chunk.size);
  return out;
}

/** Bytes to map so that [p, p + s) is all mapped; `b` is the block holding p. */
function needAt(b: Block, p: number, s: number, g: number): number {
  const e = p + s;
  let need = 0;
  for (let x: Block | null = b; x !== null && x.addr < e; x = x.next) {
    if (!x.mapped) need += Math.min(x.addr + x.size, Math.ceil(e / g) * g) - Math.max(x.addr, Math.floor(p / g) * g);
  }
  return need;
}

/**
 * The window [p, p + s) inside a run of free blocks that needs the fewest new bytes
 * (ties: lowest address). Candidates start at a block's start or end at a block's end.
 * `tail`: the last run of the arena, from its start (room for any handle). `g`: the granularity.
 */
export function chooseWindow(a: Arena, s: number, tail: boolean, g: number): { start: number; runStart: Block } | null {
  let best: { start: number; runStart: Block } | null = null;
  let bestNeed = Infinity;
  const seen = new Set<Block>();
  for (const u of a.unmapped) {
    let r0 = u;
    while (r0.prev !== null && !r0.prev.allocated) r0 = r0.prev;
    if (seen.has(r0)) continue;
    seen.add(r0);
    let last = u;
    while (last.next !== null && !last.next.allocated) last = last.next;
    const end = last.addr + last.size;
    const nextRun = last.next;
    if (tail) {
      if (nextRun === null && end - r0.addr >= s) return { start: r0.addr, runStart: r0 };
      continue;
    }
    if (end - r0.addr < s) continue;
    for (let x: Block | null = r0; x !== nextRun; x = x!.next) {
      const xb = x!;
      if (xb.addr + s <= end) {
        const need = needAt(xb, xb.addr, s, g);
        if (need < bestNeed || (need === bestNeed && xb.addr < best!.start)) {
          bestNeed = need;
          best = { start: xb.addr, runStart: r0 };
        }
      }
      const q = xb.addr + xb.size - s;
      if (q >= r0.addr && q !== xb.addr) {
        let h: Block = r0;
        while (h.addr + h.size <= q) h = h.next!;
        const need = needAt(h, q, s, g);
        if (need < bestNeed || (need === bestNeed && q < best!.start)) {
          bestNeed = need;
          best = { start: q, runStart: r0 };
        }
      }
    }
  }
  return best;
}
