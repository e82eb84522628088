import { describe, expect, it } from "vitest";
import { SimDriver, withCapacity } from "@gmlake/vmm";
import { EventKind } from "@gmlake/trace";
import { Allocator } from "../src/index.js";
import { MiB } from "./helpers.js";

const maps = (a: Allocator) => {
  const out: [string, number, number][] = [];
  const l = a.recorder!;
  let base = -1;
  for (let i = 0; i < l.length; i++) {
    const k = l.kind[i];
    if (k === EventKind.reserve && base < 0) base = l.addr[i]!;
    if (k === EventKind.segmentMap) out.push(["map", l.addr[i]! - base, l.size[i]!]);
    if (k === EventKind.segmentUnmap) out.push(["unmap", l.addr[i]! - base, l.size[i]!]);
  }
  return out;
};

describe("expandable policy (PyTorch's expandable segments)", () => {
  it("maps whole 20 MiB pages for large requests, each its own handle", () => {
    const d = new SimDriver();
    const a = new Allocator("expandable", d, { checkInvariants: 1 });
    const x = a.malloc(130 * MiB); // 7 pages of 20 MiB where cudaMalloc would take 132 MiB
    expect(a.stats.reservedBytes).toBe(140 * MiB);
    expect(maps(a)).toEqual([["map", 0, 140 * MiB]]);
    const s = d.stats().calls;
    expect(s.memCreate).toBe(7);
    expect(s.memMap).toBe(7);
    expect(s.memSetAccess).toBe(1);
    expect(s.memAddressReserve).toBe(1);
    // reserved range: ceil(9/8 x device memory / page) pages
    const l = a.recorder!;
    let reserved = 0;
    for (let i = 0; i < l.length; i++) if (l.kind[i] === EventKind.reserve) reserved = l.size[i]!;
    const t = d.device.totalBytes;
    expect(reserved).toBe(Math.ceil((t + Math.floor(t / 8)) / (20 * MiB)) * 20 * MiB);
    // the 10 MiB left in the last page is a free block: the next request uses it, then grows
    const y = a.malloc(25 * MiB);
    expect(y.addr).toBe(x.addr + 130 * MiB);
    expect(maps(a)).toEqual([["map", 0, 140 * MiB], ["map", 140 * MiB, 20 * MiB]]);
    a.close([x, y]);
  });

  it("uses 2 MiB pages for the small pool and splits any remainder >= 512 B", () => {
    const a = new Allocator("expandable", new SimDriver(), { checkInvariants: 1 });
    const s = a.malloc(1000);
    expect(s.size).toBe(1024);
    expect(a.stats.reservedBytes).toBe(2 * MiB);
    const l = a.malloc(11 * MiB); // split in expandable mode even though 9 MiB ... remains
    expect(l.size).toBe(11 * MiB);
    expect(a.stats.reservedBytes).toBe(2 * MiB + 20 * MiB);
    a.close([s, l]);
  });

  it("prefers a mapped free block over growing the tail (size + unmapped next)", () => {
    const a = new Allocator("expandable", new SimDriver(), { checkInvariants: 1 });
    const p = a.malloc(30 * MiB);
    const q = a.malloc(8 * MiB); // tail: 40 - 38 = 2 MiB free before the unmapped rest
    const pAddr = p.addr;
    a.free(p); // 30 MiB free block at the start (the Block object belongs to the policy again)
    const r = a.malloc(1.5 * MiB); // the 2 MiB tail block has a huge expandable size: the 30 MiB block wins
    expect(r.addr).toBe(pAddr);
    a.close([q, r]);
  });

  it("peekCached says where malloc lands from mapped free memory (the walk's best fit), null when it would map", () => {
    const d = new SimDriver();
    const a = new Allocator("expandable", d, { checkInvariants: 1, recorder: null });
    expect(a.peekCached(8 * MiB, 0)).toBeNull(); // nothing mapped
    const p = a.malloc(30 * MiB);
    const q = a.malloc(8 * MiB);
    const pAddr = p.addr;
    a.free(p);
    const calls = d.stats().totalCalls;
    const at = a.peekCached(1.5 * MiB, 0); // the 30 MiB block, not the growable 2 MiB tail
    expect(at).toBe(pAddr);
    expect(a.peekCached(1.5 * MiB, 3)).toBeNull(); // no free memory of that stream
    expect(a.peekCached(64 * MiB, 0)).toBeNull(); // it would map more pages
    expect(d.stats().totalCalls).toBe(calls);
    const r = a.malloc(1.5 * MiB);
    expect(r.addr).toBe(at);
    a.close([q, r]);
  });

  it("unmaps only on empty_cache or the OOM path, only pages wholly inside free blocks", () => {
    const d = withCapacity(new SimDriver(), 100 * MiB);
    const a = new Allocator("expandable", d, { checkInvariants: 1 });
    const p = a.malloc(50 * MiB); // pages 0-2
    const q = a.malloc(10 * MiB); // 50-60 MiB: page 2
    const pAddr = p.addr;
    a.free(p);
    expect(a.stats.reservedBytes).toBe(60 * MiB);
    a.emptyCache(); // pages 0 and 1 lie wholly in the free block [0, 50 MiB)
    expect(maps(a)).toEqual([["map", 0, 60 * MiB], ["unmap", 0, 40 * MiB]]);
    expect(a.stats.reservedBytes).toBe(20 * MiB);
    // OOM path: 90 MiB needs the cached pages back; maps from the lowest unmapped block
    const r = a.malloc(30 * MiB);
    expect(r.addr).toBe(pAddr);
    a.close([q, r]);
    expect(d.liveBytes).toBe(0);
  });
});
