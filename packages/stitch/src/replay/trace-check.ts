import { EventKind, type EventLog } from "@gmlake/trace";
import { StitchError } from "../core/errors.js";
import type { TracePlan } from "./pairing.js";

/**
 * What replay refuses before it starts, each as one StitchError BAD_TRACE naming the
 * event: a stream index outside the log's streams, an alloc / oom size or an address
 * that is not a byte count (negative, NaN, fractional, > 2^53), an alloc at an address
 * still live, a second free_requested of one allocation. None of these can come from a
 * real snapshot, overflowed or not. What an overflowed history does contain (frees whose
 * alloc fell out of the ring buffer, a second free_completed) is skipped and counted as
 * unmatchedFrees; a free_completed without its free_requested is served as both.
 */
const checked = new WeakMap<EventLog, number>();
const MAX = Number.MAX_SAFE_INTEGER;

export function checkTrace(log: EventLog, plan: TracePlan): void {
  const n = log.length;
  if (checked.get(log) === n) return; // a log replayed again (compare runs every policy on one log)
  const { kind, size, addr, stream } = log;
  const ref = plan.ref;
  const streams = log.streams.length;
  let requested: Uint8Array | null = null;
  for (let i = 0; i < n; i++) {
    const k = kind[i]!;
    if (k > EventKind.freeCompleted && k !== EventKind.oom) continue;
    if (stream[i]! >= streams) bad(i, k, `stream index ${stream[i]} but the log has ${streams} streams`);
    const a = addr[i]!;
    // NaN fails every comparison; Math.floor(x) === x rejects fractions and infinities
    if (k !== EventKind.oom && !(a >= 0 && a <= MAX && Math.floor(a) === a)) bad(i, k, `address ${a} is not a non-negative integer`);
    if (k === EventKind.alloc || k === EventKind.oom) {
      const s = size[i]!;
      if (!(s >= 0 && s <= MAX && Math.floor(s) === s)) bad(i, k, `size ${s} is not a byte count (a non-negative integer below 2^53)`);
    } else if (k === EventKind.freeRequested) {
      const r = ref[i]!;
      if (r < 0) continue;
      requested ??= new Uint8Array(n);
      if (requested[r] === 1) bad(i, k, `second free_requested of the allocation at event ${r} (double free)`);
      requested[r] = 1;
    }
  }
  if (plan.duplicateAlloc >= 0) {
    const i = plan.duplicateAlloc;
    bad(i, EventKind.alloc, `alloc at 0x${addr[i]!.toString(16)}, an address still live (no free since its last alloc)`);
  }
  checked.set(log, n);
}

const NAMES: Record<number, string> = { [EventKind.alloc]: "alloc", [EventKind.freeRequested]: "free_requested", [EventKind.freeCompleted]: "free_completed", [EventKind.oom]: "oom" };

function bad(i: number, k: number, why: string): never {
  throw new StitchError("BAD_TRACE", `event ${i} (${NAMES[k] ?? k}): ${why}`);
}
