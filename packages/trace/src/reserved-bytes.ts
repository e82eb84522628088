import { EventKind } from "./event-kind.js";
import type { EventLog } from "./event-log.js";

/**
 * Whether a log accounts its memory by physical handles (our engine's logs). Such a log
 * also carries segment_map/unmap events, so that PyTorch's viewer can draw its ranges, but
 * a stitched range maps handles that are already mapped elsewhere: counting the maps as
 * reserved would count the same bytes twice. Then reserved = physical handles + plain
 * segments (segment_alloc/free); in a PyTorch trace it is every segment event.
 */
export function accountsPhysically(log: EventLog): boolean {
  const kind = log.kind;
  for (let i = 0; i < log.length; i++) if (kind[i] === EventKind.physicalCreate) return true;
  return false;
}

/** +size, -size or 0: what an event does to reserved bytes under the rule above. */
export function reservedDelta(kind: number, size: number, physical: boolean): number {
  switch (kind) {
    case EventKind.segmentAlloc:
      return size;
    case EventKind.segmentFree:
      return -size;
    case EventKind.segmentMap:
      return physical ? 0 : size;
    case EventKind.segmentUnmap:
      return physical ? 0 : -size;
    case EventKind.physicalCreate:
      return size;
    case EventKind.physicalRelease:
      return -size;
    default:
      return 0;
  }
}
