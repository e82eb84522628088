import type { BlockPool } from "./block-pool.js";

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

  /** A free block in the pool (merge candidate) of the same mapping state. */
  static mergeable(b: Block | null, mapped: boolean): b is Block {
    return b !== null && !b.allocated && b.mapped === mapped;
  }
}
