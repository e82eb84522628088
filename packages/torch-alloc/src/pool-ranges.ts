/**
 * A private pool's carve state (private-pools.ts): its segments (engine blocks held for the
 * pool's life) with their free and held ranges, the pool's live blocks, and checkpoints of it
 * (cudagraph trees' getCheckpointState / setCheckpointPoolState, docs/design-private-pools.md
 * "Checkpoints").
 */
import type { Block } from "@gmlake/stitch";

export interface Range {
  readonly addr: number;
  readonly size: number;
}

export interface Segment {
  readonly block: Block;
  /** Free ranges [addr, addr + size), by address. */
  readonly free: Range[];
  /** Ranges of recorded blocks freed, by address: never reused (their other streams are not waited for) until the pool goes. */
  readonly held: Range[];
  /** Anything was ever carved from it (an untouched reserve goes back at the window's end). */
  touched: boolean;
}

export interface PoolBlock {
  readonly seg: Segment;
  /** Carved bytes (a multiple of 512). */
  readonly size: number;
  /** What the caller asked for, and on which stream (a checkpoint's blocks are handed out again with both). */
  readonly requested: number;
  readonly stream: number;
  /** record_stream was called on it: another stream may still use it after its free. */
  recorded: boolean;
}

/** A copy of a pool's carve state: its touched segments' ranges and its live blocks. */
export interface PoolCheckpoint {
  /**
   * The segments anything was carved from. An untouched one holds no block, so the restore
   * treats it as one taken after the checkpoint (all free), and it may have gone back meanwhile.
   */
  readonly segments: readonly { readonly seg: Segment; readonly free: readonly Range[]; readonly held: readonly Range[] }[];
  readonly live: readonly (readonly [number, PoolBlock])[];
  readonly inUse: number;
  readonly held: number;
}

/** [addr, addr + size) into `list` (by address), merged with its neighbours. */
export function addRange(list: Range[], addr: number, size: number): void {
  let i = 0;
  while (i < list.length && list[i]!.addr < addr) i++;
  let r = { addr, size };
  const prev = list[i - 1];
  if (prev !== undefined && prev.addr + prev.size === addr) {
    r = { addr: prev.addr, size: prev.size + r.size };
    list.splice(--i, 1);
  }
  const next = list[i];
  if (next !== undefined && r.addr + r.size === next.addr) {
    r = { addr: r.addr, size: r.size + next.size };
    list.splice(i, 1);
  }
  list.splice(i, 0, r);
}

/** The ranges of both lists, by address, overlapping and adjacent ones merged. */
export function union(a: readonly Range[], b: readonly Range[]): Range[] {
  const out: Range[] = [];
  for (const r of [...a, ...b].sort((x, y) => x.addr - y.addr)) {
    const last = out[out.length - 1];
    if (last !== undefined && r.addr <= last.addr + last.size) {
      out[out.length - 1] = { addr: last.addr, size: Math.max(last.size, r.addr + r.size - last.addr) };
    } else {
      out.push(r);
    }
  }
  return out;
}

/** `ranges` without what `cuts` covers (both by address, each list's ranges disjoint). */
export function subtract(ranges: readonly Range[], cuts: readonly Range[]): Range[] {
  const out: Range[] = [];
  let j = 0;
  for (const r of ranges) {
    let at = r.addr;
    const end = r.addr + r.size;
    while (j < cuts.length && cuts[j]!.addr + cuts[j]!.size <= at) j++;
    for (let k = j; k < cuts.length && cuts[k]!.addr < end; k++) {
      const c = cuts[k]!;
      if (c.addr > at) out.push({ addr: at, size: c.addr - at });
      at = Math.max(at, c.addr + c.size);
    }
    if (at < end) out.push({ addr: at, size: end - at });
  }
  return out;
}

const total = (rs: readonly Range[]): number => rs.reduce((n, r) => n + r.size, 0);

export function takeCheckpoint(segments: readonly Segment[], live: ReadonlyMap<number, PoolBlock>, inUse: number, held: number): PoolCheckpoint {
  return {
    segments: segments.filter((s) => s.touched).map((s) => ({ seg: s, free: s.free.slice(), held: s.held.slice() })),
    live: [...live].map(([addr, pb]) => [addr, { ...pb }] as const),
    inUse,
    held,
  };
}

/**
 * Puts checkpoint `c` back on its segments (each still the pool's: the caller checked; the
 * pool's blocks on other segments it freed already): `live` becomes the checkpoint's blocks.
 * What record_stream holds now stays held: a range held now, or a live recorded block's, is
 * not made free (a checkpoint's block there is live again, recorded). Returns the pool's
 * [inUse, held] bytes after.
 */
export function restoreCheckpoint(c: PoolCheckpoint, segments: readonly Segment[], live: Map<number, PoolBlock>): [number, number] {
  const rangesBySegment = (blocks: Iterable<readonly [number, PoolBlock]>, only: (pb: PoolBlock) => boolean): Map<Segment, Range[]> => {
    const m = new Map<Segment, Range[]>();
    for (const [addr, pb] of blocks) if (only(pb)) m.set(pb.seg, union(m.get(pb.seg) ?? [], [{ addr, size: pb.size }]));
    return m;
  };
  const recordedNow = rangesBySegment(live, (pb) => pb.recorded);
  const blocks = rangesBySegment(c.live, () => true);
  live.clear();
  for (const s of c.segments) {
    const holding = union(s.seg.held, recordedNow.get(s.seg) ?? []);
    s.seg.free.splice(0, s.seg.free.length, ...subtract(s.free, holding));
    s.seg.held.splice(0, s.seg.held.length, ...union(s.held, subtract(holding, blocks.get(s.seg) ?? [])));
    for (const [addr, pb] of c.live) {
      if (pb.seg !== s.seg) continue;
      const r = { addr, size: pb.size };
      live.set(addr, { ...pb, recorded: pb.recorded || subtract([r], holding)[0]?.size !== r.size });
    }
  }
  let inUse = 0;
  for (const pb of live.values()) inUse += pb.size;
  let held = 0;
  for (const s of segments) held += total(s.held);
  return [inUse, held];
}
