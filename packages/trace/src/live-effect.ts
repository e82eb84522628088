/**
 * What an event does to the live state a snapshot reports (its segments and their blocks):
 * a segment (or mapped range) comes or goes, a block comes, is pending free, or goes.
 * Every other kind changes nothing. One table, read by deriveSegments and by anything that
 * must keep the live state of events it drops (torch-alloc's bounded history).
 */
import { EventKind } from "./event-kind.js";

export const LiveEffect = {
  none: 0,
  segmentOn: 1,
  segmentOff: 2,
  blockOn: 3,
  blockPending: 4,
  blockOff: 5,
} as const;
export type LiveEffect = (typeof LiveEffect)[keyof typeof LiveEffect];

const EFFECT: LiveEffect[] = [];
EFFECT[EventKind.segmentAlloc] = LiveEffect.segmentOn;
EFFECT[EventKind.segmentMap] = LiveEffect.segmentOn;
EFFECT[EventKind.segmentFree] = LiveEffect.segmentOff;
EFFECT[EventKind.segmentUnmap] = LiveEffect.segmentOff;
EFFECT[EventKind.alloc] = LiveEffect.blockOn;
EFFECT[EventKind.freeRequested] = LiveEffect.blockPending;
EFFECT[EventKind.freeCompleted] = LiveEffect.blockOff;

/** The effect of an event of `kind` on the live state. */
export function liveEffect(kind: number): LiveEffect {
  return EFFECT[kind] ?? LiveEffect.none;
}

/**
 * A segment free or unmap against the live ranges, keyed `device:addr`: one that matches a range
 * exactly removes it; one of part of a range (expandable segments unmap page runs of a range
 * mapped whole, vms moves a handle out of a run it mapped at once) leaves the pieces outside
 * [addr, addr + size) live.
 */
export function cutRange<T extends { device: number; addr: number; size: number }>(segs: Map<string, T>, device: number, addr: number, size: number): void {
  const key = `${device}:${addr}`;
  if (segs.get(key)?.size === size) {
    segs.delete(key);
    return;
  }
  const end = addr + size;
  for (const [k, r] of [...segs]) {
    if (r.device !== device || r.addr >= end || r.addr + r.size <= addr) continue;
    segs.delete(k);
    if (r.addr < addr) segs.set(`${device}:${r.addr}`, { ...r, size: addr - r.addr });
    if (r.addr + r.size > end) segs.set(`${device}:${end}`, { ...r, addr: end, size: r.addr + r.size - end });
  }
}
