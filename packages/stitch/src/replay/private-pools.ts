import { EventKind, type EventLog, type SegmentState } from "@gmlake/trace";

/**
 * Which allocations went to a private memory pool (torch.cuda.MemPool / graph pools).
 * Trace entries of torch 2.11 carry no pool id; the dump-time `segments` state does
 * (segment_pool_id != (0, 0)). An alloc is in private pool P when it lands in a segment
 * of P that a recorded segment_alloc (or, expandable, segment_map) had opened before it.
 * Returns per-event pool ordinals (0 = default pools) or null when no private pool exists.
 */
export function privatePoolTags(log: EventLog, segments: readonly SegmentState[] | undefined): Uint32Array | null {
  if (!segments) return null;
  const { priv, poolOf } = privatePools(segments);
  if (priv.length === 0) return null;
  // Per device, the private segments sorted by address: live segments of one device are
  // disjoint (the reader checks), so the one holding an address is found by binary search
  // and tagging costs O(events x log segments) (a scan of every segment per event was
  // quadratic: 20k pools took 81 s).
  const byDev = new Map<number, number[]>();
  priv.forEach((s, j) => {
    let l = byDev.get(s.device);
    if (l === undefined) byDev.set(s.device, (l = []));
    l.push(j);
  });
  for (const l of byDev.values()) l.sort((x, y) => priv[x]!.address - priv[y]!.address);
  /** The private segment of device d holding address a, or -1. */
  const find = (a: number, d: number): number => {
    const l = byDev.get(d);
    if (l === undefined) return -1;
    let lo = 0;
    let hi = l.length - 1;
    let at = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (priv[l[mid]!]!.address <= a) {
        at = mid;
        lo = mid + 1;
      } else hi = mid - 1;
    }
    if (at < 0) return -1;
    const j = l[at]!;
    return a < priv[j]!.address + priv[j]!.totalSize ? j : -1;
  };
  const active = new Uint8Array(priv.length);
  const tags = new Uint32Array(log.length);
  for (let i = 0; i < log.length; i++) {
    const k = log.kind[i]!;
    if (k !== EventKind.segmentAlloc && k !== EventKind.segmentMap && k !== EventKind.segmentFree && k !== EventKind.alloc) continue;
    const a = log.addr[i]!;
    const j = find(a, log.device[i]!);
    if (j < 0) continue;
    if (k === EventKind.segmentAlloc || k === EventKind.segmentMap) active[j] = 1;
    else if (k === EventKind.segmentFree) {
      if (priv[j]!.address === a) active[j] = 0;
    } else if (active[j] === 1) tags[i] = poolOf[j]!;
  }
  return tags;
}

/** The private segments, each one's pool ordinal (1-based, in order of first sight) and each ordinal's pool. */
function privatePools(segments: readonly SegmentState[]): { priv: SegmentState[]; poolOf: number[]; pools: { device: number; poolId: [number, number] }[] } {
  const priv = segments.filter((s) => s.poolId !== null && (s.poolId[0] !== 0 || s.poolId[1] !== 0));
  const ids = new Map<string, number>();
  const pools: { device: number; poolId: [number, number] }[] = [];
  const poolOf = priv.map((s) => {
    const key = `${s.device}:${s.poolId![0]},${s.poolId![1]}`;
    let id = ids.get(key);
    if (id === undefined) {
      ids.set(key, (id = ids.size + 1));
      pools.push({ device: s.device, poolId: [s.poolId![0], s.poolId![1]] });
    }
    return id;
  });
  return { priv, poolOf, pools };
}

/**
 * For an export of a replay's log: the stream value and private pool a poolStreamKey
 * stands for (a stream value of the trace itself gives undefined). A snapshot records the
 * real stream with the segment's pool id, so the export must not write the key itself.
 */
export function poolStreamsOf(source: EventLog, segments: readonly SegmentState[] | undefined): (raw: number) => { stream: number; poolId: [number, number] } | undefined {
  const { pools } = privatePools(segments ?? []);
  return (raw) => {
    if (!(raw < 0)) return undefined;
    const v = -raw - 1;
    const pool = pools[Math.floor(v / 2 ** 32) - 1];
    const stream = source.streams[v % 2 ** 32];
    return pool === undefined || stream === undefined ? undefined : { stream, poolId: pool.poolId };
  };
}

/** The stream key an allocator sees for (pool, stream): private pools get keys of their own (blocks are reused per key). */
export function poolStreamKey(pool: number, streamIndex: number): number {
  return -(pool * 2 ** 32 + streamIndex + 1);
}
