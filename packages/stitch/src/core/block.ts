import { Block } from "./block-pool.js";
import { lowerBound } from "./lower-bound.js";

export { Block };

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

/**
 * The merge rule, once for every policy: free block b absorbs each free neighbour of its own
 * mapping state, the one before it first, then the one after (b keeps its object, as
 * PyTorch's free_block keeps the freed block). `takeOut(n, b)` runs before b's bounds
 * change: it takes n out of its pool, or wherever the policy keeps it. Returns b.
 */
export function mergeFree(b: Block, takeOut: (n: Block, into: Block) => void): Block {
  const prev = b.prev;
  if (Block.mergeable(prev, b.mapped)) {
    takeOut(prev, b);
    absorb(b, prev);
  }
  const next = b.next;
  if (Block.mergeable(next, b.mapped)) {
    takeOut(next, b);
    absorb(b, next);
  }
  return b;
}

/**
 * The same merge keeping the leftmost block: b's free neighbour before it absorbs b, then the
 * survivor absorbs the one after. vms's rule: a run's first block, which a grow holds while it
 * frees and maps inside the run, and an arena's head stay valid (mergeFree's rule would
 * absorb them; expandable's allocation loop needs mergeFree's, b surviving). `takeOut(n, b)`
 * runs before the absorb: n is about to merge with b (n === b.prev: n survives). Returns
 * the survivor.
 */
export function mergeFreeKeepLeft(b: Block, takeOut: (n: Block, b: Block) => void): Block {
  const prev = b.prev;
  if (Block.mergeable(prev, b.mapped)) {
    takeOut(prev, b);
    absorb(prev, b);
    b = prev;
  }
  const next = b.next;
  if (Block.mergeable(next, b.mapped)) {
    takeOut(next, b);
    absorb(b, next);
  }
  return b;
}

/**
 * PyTorch's release_available_cached_blocks (it runs only with max_split_size set): release
 * the stream's smallest whole free block of at least max(size, maxSplit) bytes; without one,
 * whole oversize blocks from the largest down until that many bytes are released. `free`:
 * the stream's free blocks in pool order (BlockPool.streamBlocks); `release` frees one (out
 * of its pool, back to the driver). Returns whether enough was released to retry.
 */
export function releaseAvailableCachedBlocks(free: readonly Block[], size: number, maxSplit: number, release: (b: Block) => void): boolean {
  if (maxSplit === Infinity) return false;
  const key = size < maxSplit ? maxSplit : size;
  const i = lowerBound(free.length, (j) => free[j]!.size < key);
  if (i < free.length) {
    const b = free[i]!;
    if (b.prev !== null || b.next !== null) return false;
    release(b);
    return true;
  }
  let released = 0;
  for (let j = free.length - 1; j >= 0 && released < key && free[j]!.size >= maxSplit; j--) {
    const b = free[j]!;
    if (b.prev === null && b.next === null) {
      released += b.size;
      release(b);
    }
  }
  return released >= key;
}
