import { EventKind, type EventLog } from "@gmlake/trace";

/**
 * What a replay needs to know about a trace beyond its events, computed once per log:
 * - ref[i]: for a free_requested / free_completed, the index of its alloc event (-1 when
 *   the alloc is not in the trace, e.g. a ring buffer that overflowed);
 * - emptyCache[i]: 1 where the program called empty_cache (a run of recorded
 *   segment_free / segment_unmap that no malloc explains: a malloc's release-and-retry is
 *   followed by the segment_alloc / segment_map it retried, or by its oom entry).
 */
export interface TracePlan {
  ref: Int32Array;
  emptyCache: Uint8Array;
  /** Number of emptyCache points found. */
  emptyCalls: number;
  /** Frees whose alloc is not in the trace. */
  unmatchedFrees: number;
  /** First alloc at an address still live on its device (no free between), or -1: a trace cannot hold one. */
  duplicateAlloc: number;
}

const plans = new WeakMap<EventLog, TracePlan>();

export function planTrace(log: EventLog): TracePlan {
  const cached = plans.get(log);
  if (cached && cached.ref.length === log.length) return cached;
  const n = log.length;
  const ref = new Int32Array(n).fill(-1);
  const emptyCache = new Uint8Array(n);
  const live: Map<number, number>[] = [];
  let unmatched = 0;
  let dup = -1;
  let emptyCalls = 0;
  const kind = log.kind;
  const addr = log.addr;
  const dev = log.device;
  for (let i = 0; i < n; i++) {
    const k = kind[i]!;
    if (k > EventKind.freeCompleted) continue;
    const d = dev[i]!;
    const m = live[d] ?? (live[d] = new Map());
    if (k === EventKind.alloc) {
      if (dup < 0 && m.has(addr[i]!)) dup = i;
      m.set(addr[i]!, i);
    } else {
      const a = m.get(addr[i]!);
      if (a === undefined) {
        unmatched++;
      } else {
        ref[i] = a;
        if (k === EventKind.freeCompleted) m.delete(addr[i]!);
      }
    }
  }
  for (let i = 0; i < n; i++) {
    const k = kind[i]!;
    if (k === EventKind.emptyCache) {
      emptyCache[i] = 1;
      emptyCalls++;
      continue;
    }
    if (k !== EventKind.segmentFree && k !== EventKind.segmentUnmap) continue;
    let j = i;
    while (j < n && (kind[j] === EventKind.segmentFree || kind[j] === EventKind.segmentUnmap || kind[j] === EventKind.freeCompleted)) j++;
    const next = j < n ? kind[j]! : -1;
    const explained = next === EventKind.segmentAlloc || next === EventKind.segmentMap || next === EventKind.oom;
    // a recorded empty_cache marker just before the run already covers it
    const marked = i > 0 && kind[i - 1] === EventKind.emptyCache;
    if (!explained && !marked) {
      emptyCache[i] = 1;
      emptyCalls++;
    }
    i = j - 1;
  }
  const plan = { ref, emptyCache, emptyCalls, unmatchedFrees: unmatched, duplicateAlloc: dup };
  plans.set(log, plan);
  return plan;
}
