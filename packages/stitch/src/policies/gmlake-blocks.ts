import type { PhysicalChunk as Chunk } from "../core/policy-context.js";
import { Block } from "../core/block.js";

/**
 * One reserved virtual range of physical chunks made by a new allocation (GMLake's
 * VmmSegment as created by realloc_block). Its primitive blocks (pBlocks) are plain
 * `Block`s chained by prev/next over it; split and merge move chunk index ranges, never
 * call the driver. `chunks[i]` is mapped at `base + i * chunkSize` for the segment's life.
 */
export class PSegment {
  /** starts[i]: the pBlock beginning at chunk index i, or null (owner look-up without per-chunk owner pointers). */
  readonly starts: (Block | null)[];
  /** Number of (chunk, sBlock) mapping pairs on this segment's chunks: 0 = no stitch work on its pBlocks. */
  stitched = 0;
  /** Sorted indices of the chunks some sBlock maps (null = rebuild): pBlock state changes visit only these. */
  sIdx: Int32Array | null = null;
  /** sLists[k]: the mapper list (the same array object as by chunk id) of chunk sIdx[k]; saves two dependent loads per chunk. */
  sLists: SBlock[][] = [];

  constructor(
    readonly base: number,
    readonly size: number,
    readonly stream: number,
    readonly chunks: readonly Chunk[],
  ) {
    this.starts = new Array<Block | null>(chunks.length).fill(null);
  }
}

export const SState = {
  /** Handed out: its first `keep` chunks are used through it. */
  active: 0,
  /** Every chunk free: in the sPool (best fit) and the release-order list. */
  free: 1,
  /** Free, but some chunks are used by another block: cannot be handed out. */
  fragmented: 2,
  /** Garbage-collected: unmapped, address freed. */
  dead: 3,
} as const;
export type SState = (typeof SState)[keyof typeof SState];

/**
 * A stitched block (GMLake's fused block): a virtual range of its own onto which the
 * chunks of several pBlocks are mapped side by side. The same chunks stay mapped in their
 * pBlocks. While active, the chunks it uses are those of the pBlocks it holds (`held`,
 * marked allocated with `data = this`); the chunks past `keep` stay free for others.
 */
export class SBlock {
  /** Chunks mapped at addr + j * chunkSize; null where a released pBlock took a chunk away (then toGc). */
  readonly chunks: (Chunk | null)[];
  readonly n: number;
  /** Chunks of this sBlock that are free (used by no block), GMLake's free_blocks. */
  free = 0;
  /** Chunks used through this sBlock while active (a prefix), GMLake's used_blocks. */
  keep = 0;
  /** pBlocks whose chunks this active sBlock uses (each wholly). */
  held: Block[] = [];
  state: SState = SState.active;
  /** A chunk was unmapped from under it while active: collect it at its free. */
  toGc = false;
  /** Release order (GMLake orders by the free's event id). */
  releasedAt = 0;
  /** Offsets where consecutive chunks are not consecutive in one segment (integrity stamps both sides). */
  readonly seams: number[];
  /** Key in the sPool (ordered by (stream, size, addr)); data points back here. */
  readonly key: Block;

  constructor(
    readonly addr: number,
    readonly size: number,
    readonly stream: number,
    chunks: Chunk[],
    seams: number[],
  ) {
    this.chunks = chunks;
    this.n = chunks.length;
    this.seams = seams;
    this.key = new Block(addr, size, stream, null);
    this.key.data = this;
  }
}
