import { EventKind, EventLog, type SegmentState } from "@gmlake/trace";
import { mulberry32 } from "@gmlake/vmm";
import { describe, expect, it } from "vitest";
import { privatePoolTags } from "../src/index.js";

/** The definition, written the slow way: every segment is tested for every event. */
function reference(log: EventLog, segs: readonly SegmentState[]): Uint32Array {
  const priv = segs.filter((s) => s.poolId !== null && (s.poolId[0] !== 0 || s.poolId[1] !== 0));
  const ids = new Map<string, number>();
  const poolOf = priv.map((s) => {
    const key = `${s.device}:${s.poolId![0]},${s.poolId![1]}`;
    if (!ids.has(key)) ids.set(key, ids.size + 1);
    return ids.get(key)!;
  });
  const active = new Uint8Array(priv.length);
  const tags = new Uint32Array(log.length);
  const inside = (s: SegmentState, a: number, d: number) => s.device === d && a >= s.address && a < s.address + s.totalSize;
  for (let i = 0; i < log.length; i++) {
    const k = log.kind[i]!, a = log.addr[i]!, d = log.device[i]!;
    priv.forEach((s, j) => {
      if ((k === EventKind.segmentAlloc || k === EventKind.segmentMap) && inside(s, a, d)) active[j] = 1;
      else if (k === EventKind.segmentFree && s.address === a && s.device === d) active[j] = 0;
      else if (k === EventKind.alloc && active[j] === 1 && inside(s, a, d)) tags[i] = poolOf[j]!;
    });
  }
  return tags;
}

function segment(device: number, address: number, totalSize: number, pool: [number, number]): SegmentState {
  return { device, address, totalSize, allocatedSize: 0, activeSize: 0, requestedSize: 0, stream: 0, segmentType: "large", isExpandable: false, poolId: pool, blocks: [] };
}

describe("privatePoolTags", () => {
  it("matches the per-segment definition on random disjoint segments of two devices", () => {
    const rnd = mulberry32(7);
    for (let round = 0; round < 50; round++) {
      const segs: SegmentState[] = [];
      for (const d of [0, 1]) {
        let a = 1 << 20;
        for (let s = 0; s < 40; s++) {
          a += Math.floor(rnd() * 4) << 20; // gaps between segments
          const size = (1 + Math.floor(rnd() * 4)) << 20;
          segs.push(segment(d, a, size, rnd() < 0.3 ? [0, 0] : [1, 1 + Math.floor(rnd() * 5)]));
          a += size;
        }
      }
      const log = new EventLog();
      const kinds = [EventKind.segmentAlloc, EventKind.segmentMap, EventKind.segmentFree, EventKind.alloc, EventKind.alloc, EventKind.freeCompleted];
      for (let i = 0; i < 400; i++) {
        const s = segs[Math.floor(rnd() * segs.length)]!;
        const k = kinds[Math.floor(rnd() * kinds.length)]!;
        const inside = k === EventKind.segmentFree && rnd() < 0.7 ? s.address : s.address + Math.floor(rnd() * s.totalSize * 1.2);
        log.push(k, inside, 512, 0, s.device, i);
      }
      expect(privatePoolTags(log, segs)).toEqual(reference(log, segs));
    }
  });

  it("is null without private pools", () => {
    expect(privatePoolTags(new EventLog(), [segment(0, 0, 1 << 20, [0, 0])])).toBeNull();
    expect(privatePoolTags(new EventLog(), undefined)).toBeNull();
  });
});
