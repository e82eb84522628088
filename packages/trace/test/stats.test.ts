import { describe, expect, it } from "vitest";
import { computeStats, EventKind } from "../src/index.js";
import { K, logOf, MiB } from "./helpers.js";

describe("computeStats", () => {
  const log = logOf([
    [K.segmentAlloc, 0x1000_0000, 20 * MiB, 10],
    [K.alloc, 0x1000_0000, 3000, 11], // rounded 3072
    [K.alloc, 0x1000_1000, 5 * MiB, 12, 7], // stream 7
    [K.freeRequested, 0x1000_0000, 3000, 13],
    [K.alloc, 0x1100_0000, 100, 14], // rounded 512 -> peak here: 3072 + 5 MiB + 512
    [K.freeCompleted, 0x1000_0000, 3000, 15],
    [K.segmentAlloc, 0x2000_0000, 2 * MiB, 16],
    [K.freeCompleted, 0x1000_1000, 5 * MiB, 17, 7],
    [K.segmentFree, 0x1000_0000, 20 * MiB, 18],
    [K.freeCompleted, 0x9999, 64, 19], // never allocated
    [K.physicalCreate, 0, 4 * MiB, 20],
    [K.physicalRelease, 0, 4 * MiB, 21],
  ]);

  it("peaks of allocated (rounded), requested and reserved, with where they happened", () => {
    const s = computeStats(log);
    expect(s.peakAllocatedBytes).toBe(3072 + 5 * MiB + 512);
    expect(s.byDevice[0].peakAllocatedIndex).toBe(4);
    expect(s.peakRequestedBytes).toBe(3000 + 5 * MiB + 100);
    expect(s.peakReservedBytes).toBe(22 * MiB);
    expect(s.byDevice[0].peakReservedIndex).toBe(6);
    expect(s.utilization).toBeCloseTo((3000 + 5 * MiB + 100) / (22 * MiB), 12);
    expect(s.allocatedBytes).toBe(512);
    expect(s.requestedBytes).toBe(100);
    expect(s.reservedBytes).toBe(2 * MiB);
    expect(s.unmatchedFrees).toBe(1);
    expect(s.firstTimeUs).toBe(10);
    expect(s.lastTimeUs).toBe(21);
  });

  it("counts per kind, stream and device", () => {
    const s = computeStats(log);
    expect(s.countsByKind).toEqual({ alloc: 3, freeRequested: 1, freeCompleted: 3, segmentAlloc: 2, segmentFree: 1, physicalCreate: 1, physicalRelease: 1 });
    expect(s.countsByStream).toEqual([{ stream: 0, events: 10 }, { stream: 7, events: 2 }]);
    expect(s.countsByDevice).toEqual({ 0: 12 });
    expect(s.events).toBe(12);
  });

  it("devices are separate memories: per-device peaks, summed at the top", () => {
    const two = logOf([
      [K.alloc, 1, 1024, 1, 0, 0],
      [K.freeCompleted, 1, 1024, 2, 0, 0],
      [K.alloc, 1, 2048, 1, 0, 1],
      [K.segmentAlloc, 0, 2 * MiB, 1, 0, 1],
    ]);
    const s = computeStats(two);
    expect(s.devices).toEqual([0, 1]);
    expect(s.byDevice.map((d) => d.peakAllocatedBytes)).toEqual([1024, 2048]);
    expect(s.peakAllocatedBytes).toBe(3072);
    expect(computeStats(two, { device: 1 }).peakAllocatedBytes).toBe(2048);
    expect(computeStats(two, { device: 1 }).countsByDevice).toEqual({ 1: 2 });
  });

  it("roundup_power2_divisions change the allocated figure", () => {
    const l = logOf([[K.alloc, 1, 1.1 * MiB, 1]]);
    const div = new Array<number>(16).fill(0);
    div[0] = 4;
    expect(computeStats(l).peakAllocatedBytes).toBe(Math.ceil((1.1 * MiB) / 512) * 512);
    expect(computeStats(l, { roundupPower2Divisions: div }).peakAllocatedBytes).toBe(1.25 * MiB);
  });

  it("an empty log", () => {
    const s = computeStats(logOf([]));
    expect(s.events).toBe(0);
    expect(s.peakAllocatedBytes).toBe(0);
    expect(s.utilization).toBe(0);
    expect(s.countsByKind).toEqual({});
  });

  it("an alloc at a live address replaces the old block", () => {
    const s = computeStats(logOf([[EventKind.alloc, 1, 512, 1], [EventKind.alloc, 1, 1024, 2]]));
    expect(s.allocatedBytes).toBe(1024);
  });
});
