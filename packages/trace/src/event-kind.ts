/**
 * Every kind of event the project speaks of, as small integers so that an event stream
 * can live in typed arrays (a 1.6 M-event trace is a few typed arrays, not 1.6 M objects).
 *
 * - Allocation events: what the program asked for (PyTorch's own trace actions).
 * - Segment events: what an allocator decided (PyTorch records these too).
 * - Allocator events: what our engine did with physical and virtual memory.
 */
export const EventKind = {
  // Allocation events (addr = block address, size = requested bytes).
  alloc: 0,
  freeRequested: 1,
  freeCompleted: 2,
  // Segment decisions (addr = segment or mapped range, size = bytes), as PyTorch records them.
  segmentAlloc: 3,
  segmentFree: 4,
  segmentMap: 5,
  segmentUnmap: 6,
  // Markers PyTorch records.
  snapshot: 7,
  oom: 8,
  emptyCache: 9,
  // Allocator events of our engine (aux: handle count, chunk count or call id as stated).
  physicalCreate: 10,
  physicalRelease: 11,
  reserve: 12,
  reserveFree: 13,
  map: 14,
  unmap: 15,
  /** A stitched range was made: size = bytes, aux = number of physical chunks mapped. */
  stitch: 16,
  /** Stitched ranges were garbage-collected: size = virtual bytes freed, aux = ranges. */
  gc: 17,
  /** A driver call: aux = index into DRIVER_CALLS of @gmlake/vmm, size = bytes, addr = address. */
  driverCall: 18,
} as const;
export type EventKind = (typeof EventKind)[keyof typeof EventKind];

/** PyTorch snapshot action names -> kinds (others are tolerated and skipped by readers). */
export const TORCH_ACTIONS: Readonly<Record<string, EventKind>> = {
  alloc: EventKind.alloc,
  free_requested: EventKind.freeRequested,
  free_completed: EventKind.freeCompleted,
  segment_alloc: EventKind.segmentAlloc,
  segment_free: EventKind.segmentFree,
  segment_map: EventKind.segmentMap,
  segment_unmap: EventKind.segmentUnmap,
  snapshot: EventKind.snapshot,
  oom: EventKind.oom,
  empty_cache: EventKind.emptyCache,
};

export const EVENT_KIND_NAMES: readonly string[] = Object.entries(EventKind)
  .sort((a, b) => a[1] - b[1])
  .map(([name]) => name);

export function isAllocationEvent(kind: number): boolean {
  return kind <= EventKind.freeCompleted;
}

export function isSegmentEvent(kind: number): boolean {
  return kind >= EventKind.segmentAlloc && kind <= EventKind.segmentUnmap;
}
