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

// Split and merge, once for every policy. The rule: the block you pass keeps its identity
// (its object, and so its place in a pool when only its key changed: rekeyAtCursor); the
// part split off is a new block with the same stream, pool, segment and mapping state; a
// merge keeps the block you name. Pool membership is the caller's: take a block out of its
// pool before its address or size changes, and the absorbed one out of its own.

/** Split off the first `bytes` of b as a new block linked before it; b keeps the rest. */
export function splitFront(b: Block, bytes: number): Block {
  const a = new Block(b.addr, bytes, b.stream, b.pool);
  a.segment = b.segment;
  a.mapped = b.mapped;
  a.prev = b.prev;
  if (a.prev !== null) a.prev.next = a;
  a.next = b;
  b.prev = a;
  b.addr += bytes;
  b.size -= bytes;
  return a;
}

/** Split b at address `at`: b keeps [addr, at), the returned new block, linked after b, takes [at, end). */
export function splitBack(b: Block, at: number): Block {
  const r = new Block(at, b.addr + b.size - at, b.stream, b.pool);
  r.segment = b.segment;
  r.mapped = b.mapped;
  r.prev = b;
  r.next = b.next;
  if (r.next !== null) r.next.prev = r;
  b.next = r;
  b.size = at - b.addr;
  return r;
}

/** b absorbs its neighbour n (b.prev or b.next): b grows over n's bytes, n leaves the chain. */
export function absorb(b: Block, n: Block): void {
  if (n === b.prev) {
    b.addr = n.addr;
    b.prev = n.prev;
    if (b.prev !== null) b.prev.next = b;
  } else {
    b.next = n.next;
    if (b.next !== null) b.next.prev = b;
  }
  b.size += n.size;
}
