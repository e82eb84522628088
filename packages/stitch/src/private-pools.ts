import { EventKind, type EventLog, type SegmentState } from "@gmlake/trace";

/**
 * Which allocations went to a private memory pool (torch.cuda.MemPool / graph pools).
 * Trace entries of torch 2.11 carry no pool id; the dump-time `segments` state does
 * (segment_pool_id != (0, 0)). An alloc is in private pool P when it lands in a segment
 * of P that a recorded segment_alloc (or, expandable, segment_map) had opened before it.
 * Returns per-event pool ordinals (0 = default pools) or null when no private pool exists.
 */
export function privatePoolTags(log: EventLog, segments: readonly SegmentState[] | undefined): Uint16Array | null {
  if (!segments) return null;
  const priv = segments.filter((s) => s.poolId !== null && (s.poolId[0] !== 0 || s.poolId[1] !== 0));
  if (priv.length === 0) return null;
  const ids = new Map<string, number>();
  const poolOf = priv.map((s) => {
    const key = `${s.device}:${s.poolId![0]},${s.poolId![1]}`;
    let id = ids.get(key);
    if (id === undefined) ids.set(key, (id = ids.size + 1));
    return id;
  });
  const active = new Uint8Array(priv.length);
  const tags = new Uint16Array(log.length);
  const inside = (j: number, a: number, d: number) => {
    const s = priv[j]!;
    return s.device === d && a >= s.address && a < s.address + s.totalSize;
  };
  for (let i = 0; i < log.length; i++) {
    const k = log.kind[i]!;
    const a = log.addr[i]!;
    const d = log.device[i]!;
    if (k === EventKind.segmentAlloc || k === EventKind.segmentMap) {
      for (let j = 0; j < priv.length; j++) if (inside(j, a, d)) active[j] = 1;
    } else if (k === EventKind.segmentFree) {
      for (let j = 0; j < priv.length; j++) if (priv[j]!.address === a && priv[j]!.device === d) active[j] = 0;
    } else if (k === EventKind.alloc) {
      for (let j = 0; j < priv.length; j++) if (active[j] === 1 && inside(j, a, d)) tags[i] = poolOf[j]!;
    }
  }
  return tags;
}

/** The stream key an allocator sees for (pool, stream): private pools get keys of their own (blocks are reused per key). */
export function poolStreamKey(pool: number, streamIndex: number): number {
  return -(pool * 2 ** 32 + streamIndex + 1);
}
