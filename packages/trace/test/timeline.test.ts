import { describe, expect, it } from "vitest";
import { EventLog, EventKind, sampleTimeline } from "../src/index.js";
import { K, logOf } from "./helpers.js";

/** A sawtooth of allocs and frees with one tall spike in the middle. */
function sawtooth(n: number): EventLog {
  const log = new EventLog(n * 2);
  const s = log.streamId(0);
  log.push(EventKind.segmentAlloc, 0, 1 << 30, s, 0, 0);
  for (let i = 0; i < n; i++) {
    const size = i === Math.floor(n / 2) ? 512 * 1000 : 512 * (1 + (i % 7));
    log.push(EventKind.alloc, 1000 + i, size, s, 0, i * 10 + 1);
    log.push(EventKind.freeCompleted, 1000 + i, size, s, 0, i * 10 + 5);
  }
  return log;
}

describe("sampleTimeline", () => {
  it("keeps at most maxPoints (+1 end point) and the exact peaks", () => {
    const log = sawtooth(50_000);
    for (const maxPoints of [4, 10, 100, 1000]) {
      const tl = sampleTimeline(log, { maxPoints });
      expect(tl.allocated.timeUs.length).toBeLessThanOrEqual(maxPoints + 1);
      expect(Math.max(...tl.allocated.bytes)).toBe(512 * 1000);
      expect(Math.min(...tl.allocated.bytes)).toBe(0);
      expect(tl.peakAllocatedBytes).toBe(512 * 1000);
      expect(tl.peakReservedBytes).toBe(1 << 30);
      // Time order is kept.
      for (let i = 1; i < tl.allocated.timeUs.length; i++) expect(tl.allocated.timeUs[i]).toBeGreaterThanOrEqual(tl.allocated.timeUs[i - 1]);
    }
  });

  it("short logs come back point for point; the last value is held to the end", () => {
    const log = logOf([
      [K.segmentAlloc, 0, 4096, 0],
      [K.alloc, 1, 1000, 10],
      [K.alloc, 2, 100, 20],
      [K.freeCompleted, 1, 1000, 30],
    ]);
    const tl = sampleTimeline(log, { maxPoints: 1000 });
    expect(Array.from(tl.allocated.timeUs)).toEqual([10, 20, 30]);
    expect(Array.from(tl.allocated.bytes)).toEqual([1024, 1536, 512]);
    expect(Array.from(tl.reserved.timeUs)).toEqual([0, 30]);
    expect(Array.from(tl.reserved.bytes)).toEqual([4096, 4096]);
    expect([tl.startUs, tl.endUs]).toEqual([0, 30]);
  });

  it("picks a device, and can bucket by event index", () => {
    const log = logOf([
      [K.alloc, 1, 512, 5, 0, 0],
      [K.alloc, 1, 4096, 5, 0, 3],
    ]);
    expect(sampleTimeline(log, { device: 3 }).peakAllocatedBytes).toBe(4096);
    expect(sampleTimeline(log).peakAllocatedBytes).toBe(512);
    const byIndex = sampleTimeline(sawtooth(1000), { byIndex: true, maxPoints: 50 });
    expect(byIndex.allocated.timeUs.length).toBeLessThanOrEqual(51);
    expect(byIndex.peakAllocatedBytes).toBe(512 * 1000);
  });

  it("an empty log", () => {
    const tl = sampleTimeline(new EventLog());
    expect(tl.allocated.timeUs.length).toBe(0);
    expect(tl.peakAllocatedBytes).toBe(0);
  });
});
