import type { EventLog } from "@gmlake/trace";
import type { Block } from "../core/block.js";
import type { Allocator } from "../core/engine.js";
import { replay, type ReplayOptions } from "../replay/replay.js";
import { kSmallBuffer, kSmallSize } from "../core/rounding.js";

/** One pool's figures (PyTorch's memory_stats names: allocated_bytes.large_pool.current ...). */
export interface PoolFigures {
  allocatedBytes: number;
  activeBytes: number;
  requestedBytes: number;
  reservedBytes: number;
  /** inactive_split_bytes: free bytes in segments (or handles) that also hold a live block, which empty_cache cannot release. */
  inactiveSplitBytes: number;
  /** allocation.*.current: live blocks (pending frees included). */
  allocations: number;
  /** active: blocks allocated or pending free. */
  activeAllocations: number;
  /** inactive_split: free pieces in segments (or handles) that also hold a live block. */
  inactiveSplit: number;
  /** segment.*.current: plain segments and physical handles. */
  segments: number;
}

/** Free pieces by size: the memory that is reserved and stranded. */
export interface FreeBucket {
  label: string;
  /** Pieces smaller than this (bytes); Infinity for the last bucket. */
  belowBytes: number;
  pieces: number;
  bytes: number;
}

/**
 * An allocator's memory at one moment, as torch.cuda.memory_stats() and memory_summary()
 * name it, split into PyTorch's large and small pools, with the free memory broken down.
 */
export interface MemoryState {
  /** Trace events replayed (the state is after event eventIndex = events - 1). */
  eventIndex: number;
  all: PoolFigures;
  largePool: PoolFigures;
  smallPool: PoolFigures;
  /** Physical handles live (cuMemCreate); plain segments are in `segments`. */
  handles: number;
  /** Free bytes in pieces that hold no live block (empty_cache would release them). */
  releasableBytes: number;
  /** The free pieces by size (a piece: a run of free bytes within one segment or one physical handle). */
  freeBySize: FreeBucket[];
  largestFreeBytes: number;
  numAllocRetries: number;
  numOoms: number;
}

const MiB = 2 ** 20;
const BUCKETS: [string, number][] = [
  ["< 2 MiB", 2 * MiB],
  ["2-20 MiB", 20 * MiB],
  ["20-128 MiB", 128 * MiB],
  ["128 MiB-1 GiB", 1024 * MiB],
  [">= 1 GiB", Infinity],
];

function emptyPool(): PoolFigures {
  return { allocatedBytes: 0, activeBytes: 0, requestedBytes: 0, reservedBytes: 0, inactiveSplitBytes: 0, allocations: 0, activeAllocations: 0, inactiveSplit: 0, segments: 0 };
}

/** A piece of reserved memory: a plain segment or a physical handle, and which of its bytes live blocks use. */
interface Piece {
  size: number;
  used: [number, number][];
  small: boolean;
  large: boolean;
  plain: boolean;
}

/**
 * The memory of the allocators a probe sees, from the memory itself: every live block is
 * traced down to the physical bytes it uses (a plain segment's bytes, or through the chunk
 * pool's mappings to each handle's bytes, which also resolves stitched ranges to the
 * handles they share), and what no live block uses is free. A block belongs to the small
 * pool when its size is at most 1 MiB (PyTorch's kSmallSize); a segment or handle to the
 * small pool when it holds small blocks only, or, holding none, when it is a plain segment
 * of 2 MiB (kSmallBuffer, the small pool's segment size).
 */
export function memoryState(engines: readonly (Allocator | undefined)[], liveBlocks: readonly Block[], eventIndex: number): MemoryState {
  const all = emptyPool();
  const large = emptyPool();
  const small = emptyPool();
  const buckets: FreeBucket[] = BUCKETS.map(([label, belowBytes]) => ({ label, belowBytes, pieces: 0, bytes: 0 }));
  let releasable = 0;
  let largest = 0;
  let handles = 0;
  let retries = 0;
  let ooms = 0;
  for (const e of engines) {
    if (!e) continue;
    retries += e.stats.numAllocRetries;
    ooms += e.stats.numOoms;
    const pieces: Piece[] = [];
    const plain = [...e.ctx.plainSegments.entries()].sort((a, b) => a[0] - b[0]);
    const plainPieces = plain.map(([, size]) => ({ size, used: [], small: false, large: false, plain: true }) as Piece);
    pieces.push(...plainPieces);
    const chunkPiece = new Map<number, Piece>();
    for (const c of e.ctx.chunks.list()) {
      const p: Piece = { size: c.size, used: [], small: false, large: false, plain: false };
      chunkPiece.set(c.id, p);
      pieces.push(p);
      handles++;
    }
    const plainAt = (addr: number): number => {
      let lo = 0, hi = plain.length;
      while (lo < hi) {
        const mid = (lo + hi) >>> 1;
        if (plain[mid]![0] <= addr) lo = mid + 1;
        else hi = mid;
      }
      const j = lo - 1;
      return j >= 0 && addr < plain[j]![0] + plain[j]![1] ? j : -1;
    };
    for (const b of liveBlocks) {
      const isSmall = b.size <= kSmallSize;
      const mark = (p: Piece, from: number, to: number) => {
        p.used.push([from, to]);
        if (isSmall) p.small = true;
        else p.large = true;
      };
      const j = plainAt(b.addr);
      let owned = false;
      if (j >= 0) {
        owned = true;
        const [base, size] = plain[j]!;
        mark(plainPieces[j]!, b.addr - base, Math.min(size, b.addr + b.size - base));
      } else {
        let at = b.addr;
        const end = b.addr + b.size;
        while (at < end) {
          const t = e.ctx.chunks.translate(at);
          if (t === null) break;
          const len = Math.min(end - at, t.chunk.size - t.offset);
          const p = chunkPiece.get(t.chunk.id);
          if (p) {
            owned = true;
            mark(p, t.offset, t.offset + len);
          }
          at += len;
        }
      }
      if (!owned) continue; // another device's block
      for (const pool of [all, isSmall ? small : large]) {
        pool.activeBytes += b.size;
        pool.activeAllocations++;
        pool.allocations++;
        pool.requestedBytes += b.requested;
        if (!b.pendingFree) pool.allocatedBytes += b.size;
      }
    }
    for (const p of pieces) {
      const pool = p.small && !p.large ? small : !p.small && !p.large && p.plain && p.size <= kSmallBuffer ? small : large;
      const frees = freeRuns(p);
      const holdsLive = p.used.length > 0;
      for (const target of [all, pool]) {
        target.reservedBytes += p.size;
        target.segments++;
      }
      for (const f of frees) {
        if (f > largest) largest = f;
        const bk = buckets.find((x) => f < x.belowBytes)!;
        bk.pieces++;
        bk.bytes += f;
        if (holdsLive) {
          for (const target of [all, pool]) {
            target.inactiveSplitBytes += f;
            target.inactiveSplit++;
          }
        } else releasable += f;
      }
    }
  }
  return {
    eventIndex,
    all,
    largePool: large,
    smallPool: small,
    handles,
    releasableBytes: releasable,
    freeBySize: buckets,
    largestFreeBytes: largest,
    numAllocRetries: retries,
    numOoms: ooms,
  };
}

/** Sizes of the runs of a piece's bytes that no live block uses. */
function freeRuns(p: Piece): number[] {
  const used = p.used.sort((a, b) => a[0] - b[0]);
  const out: number[] = [];
  let at = 0;
  for (const [from, to] of used) {
    if (from > at) out.push(from - at);
    if (to > at) at = to;
  }
  if (at < p.size) out.push(p.size - at);
  return out;
}

/**
 * A policy's memory at its own peak reserved: the trace is replayed up to the event where
 * the peak was first reached (found by a first replay, or given) and the memory read there.
 */
export function memoryAtPeak(log: EventLog, o: Omit<ReplayOptions, "until" | "probe" | "recorder"> & { peakReservedEventIndex?: number }): MemoryState | null {
  const { peakReservedEventIndex, ...rest } = o;
  let at = peakReservedEventIndex;
  if (at === undefined) at = replay(log, { ...rest, recorder: null }).peakReservedEventIndex;
  if (at < 0) return null;
  let state: MemoryState | null = null;
  replay(log, { ...rest, recorder: null, until: at + 1, probe: (p) => (state = memoryState(p.engines, p.liveBlocks, p.events - 1)) });
  return state;
}
