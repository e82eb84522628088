import { readFileSync } from "node:fs";
import { computeStats, EventKind, exportMemoryViz, type EventLog } from "@gmlake/trace";
import { describe, expect, it } from "vitest";
import { readSnapshotBytes } from "../src/index.js";
import { fixture } from "./shared-dir.js";

/** addr -> requested size of blocks allocated and not completed-freed at the end. */
function liveAtEnd(log: EventLog): Map<number, number> {
  const live = new Map<number, number>();
  for (let i = 0; i < log.length; i++) {
    if (log.kind[i] === EventKind.alloc) live.set(log.addr[i], log.size[i]);
    else if (log.kind[i] === EventKind.freeCompleted) live.delete(log.addr[i]);
  }
  return live;
}

/** Lowest running live-block count and reserved bytes: negative means history is missing. */
function minima(log: EventLog): { blocks: number; reserved: number } {
  let blocks = 0, reserved = 0, minBlocks = 0, minReserved = 0;
  for (let i = 0; i < log.length; i++) {
    const k = log.kind[i];
    if (k === EventKind.alloc) blocks++;
    else if (k === EventKind.freeCompleted) blocks--;
    else if (k === EventKind.segmentAlloc || k === EventKind.segmentMap) reserved += log.size[i];
    else if (k === EventKind.segmentFree || k === EventKind.segmentUnmap) reserved -= log.size[i];
    minBlocks = Math.min(minBlocks, blocks);
    minReserved = Math.min(minReserved, reserved);
  }
  return { blocks: minBlocks, reserved: minReserved };
}

describe("ring-buffer overflow reconstruction", () => {
  // train_default with its oldest 700 of 1554 entries dropped (as an overflowed ring buffer
  // would); the full trace ends with 77 live blocks of 731,226,116 requested bytes.
  const bytes = readFileSync(fixture("train_default_overflow.pickle.gz"));

  it("without reconstruction, the history is visibly incomplete", () => {
    const raw = readSnapshotBytes(bytes, { reconstruct: false });
    expect(raw.events.length).toBe(1554 - 700);
    expect(raw.reconstructed.syntheticEvents).toBe(0);
    const m = minima(raw.events);
    expect(m.blocks).toBeLessThan(0);
  });

  it("restores frees' allocs and the dump-time live blocks and segments", () => {
    const snap = readSnapshotBytes(bytes);
    const r = snap.reconstructed;
    expect(r.missingAllocs).toBeGreaterThan(0);
    expect(r.syntheticEvents).toBe(r.missingAllocs + r.liveFromSegments + r.segments.length);
    expect(snap.events.length).toBe(1554 - 700 + r.syntheticEvents);
    // Running sums never go negative, and the end state is the full trace's.
    expect(minima(snap.events)).toEqual({ blocks: 0, reserved: 0 });
    const live = liveAtEnd(snap.events);
    expect(live.size).toBe(77);
    expect([...live.values()].reduce((a, b) => a + b, 0)).toBe(731226116);
    const stats = computeStats(snap.events);
    expect(stats.unmatchedFrees).toBe(0);
    expect(stats.reservedBytes).toBe(snap.segments.reduce((n, s) => n + s.totalSize, 0));
    // Synthetic events come first, at the first real event's time.
    const first = snap.events.timeUs[r.syntheticEvents];
    for (let i = 0; i < r.syntheticEvents; i++) expect(snap.events.timeUs[i]).toBe(first);
    // Segment events precede the synthetic allocs.
    const kinds = Array.from(snap.events.kind.subarray(0, r.syntheticEvents));
    const lastSeg = kinds.lastIndexOf(EventKind.segmentAlloc);
    const firstAlloc = kinds.indexOf(EventKind.alloc);
    if (lastSeg >= 0 && firstAlloc >= 0) expect(lastSeg).toBeLessThan(firstAlloc);
  });

  it("expandable: missing segment_map bytes come from the dump-time mapped ranges", () => {
    const snap = readSnapshotBytes(readFileSync(fixture("train_expandable_overflow.pickle.gz")));
    expect(snap.reconstructed.syntheticEvents).toBeGreaterThan(0);
    expect(minima(snap.events)).toEqual({ blocks: 0, reserved: 0 });
    const stats = computeStats(snap.events);
    expect(stats.countsByKind.segmentAlloc ?? 0).toBe(0);
    expect(stats.reservedBytes).toBe(snap.segments.reduce((n, s) => n + s.totalSize, 0));
  });

  it("frames stay aligned with their events after synthetic events are inserted", () => {
    const snap = readSnapshotBytes(bytes, { frames: true });
    expect(snap.frames?.length).toBe(snap.events.length);
  });

  it("a complete trace exported and re-read needs no reconstruction", () => {
    const snap = readSnapshotBytes(bytes);
    const again = readSnapshotBytes(exportMemoryViz(snap.events, snap.segments).bytes);
    expect(again.reconstructed.syntheticEvents).toBe(0);
    expect(again.events.length).toBe(snap.events.length);
  });
});
