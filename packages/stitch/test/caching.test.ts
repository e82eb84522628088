import { describe, expect, it } from "vitest";
import { SimDriver, withCapacity } from "@gmlake/vmm";
import { EventKind } from "@gmlake/trace";
import { Allocator } from "../src/index.js";
import { MiB } from "./helpers.js";

const segs = (a: Allocator) => {
  const out: [string, number][] = [];
  const l = a.recorder!;
  for (let i = 0; i < l.length; i++) {
    if (l.kind[i] === EventKind.segmentAlloc) out.push(["alloc", l.size[i]!]);
    if (l.kind[i] === EventKind.segmentFree) out.push(["free", l.size[i]!]);
  }
  return out;
};

describe("caching policy (PyTorch's caching allocator)", () => {
  it("follows the reference's split examples", () => {
    const a = new Allocator("caching", new SimDriver(), { checkInvariants: 1 });
    const x = a.malloc(11 * MiB); // 12 MiB segment, 1 MiB left is not > 1 MiB: not split
    expect(x.size).toBe(12 * MiB);
    const y = a.malloc(10 * MiB + 1); // 12 MiB segment split: 10486272 + 2096640 free
    expect(y.size).toBe(10486272);
    expect(a.stats.allocatedBytes).toBe(12 * MiB + 10486272);
    expect(a.stats.reservedBytes).toBe(24 * MiB);
    const s = a.malloc(1000); // small pool: 2 MiB segment, split at 512 B granularity
    expect(s.size).toBe(1024);
    expect(segs(a)).toEqual([["alloc", 12 * MiB], ["alloc", 12 * MiB], ["alloc", 2 * MiB]]);
    // another stream never reuses the 2096640 B remainder: a 20 MiB segment of its own
    const o = a.malloc(MiB + 1, 7);
    expect(segs(a).at(-1)).toEqual(["alloc", 20 * MiB]);
    // the same stream does (best fit: the smallest block that fits)
    const r = a.malloc(2096640 - 100);
    expect(r.addr).toBe(y.addr + y.size);
    expect(r.size).toBe(2096640);
    expect(segs(a).length).toBe(4);
    a.close([x, y, s, o, r]);
  });

  it("merges freed neighbours and reuses by best fit (stream, size, address)", () => {
    const a = new Allocator("caching", new SimDriver(), { checkInvariants: 1 });
    const p = a.malloc(4 * MiB);
    const q = a.malloc(4 * MiB); // same 20 MiB segment
    const r = a.malloc(4 * MiB);
    expect(q.addr).toBe(p.addr + 4 * MiB);
    a.free(p);
    a.free(r); // r merges with the free tail
    a.free(q); // q merges with both: one free 20 MiB block
    const big = a.malloc(19 * MiB);
    expect(big.addr).toBe(p.addr);
    expect(segs(a)).toEqual([["alloc", 20 * MiB]]);
    a.close([big]);
  });

  it("keeps a block whose free is pending from merging or being reused", () => {
    const a = new Allocator("caching", new SimDriver(), { checkInvariants: 1 });
    const p = a.malloc(4 * MiB);
    a.freeRequested(p);
    expect(a.stats.allocatedBytes).toBe(0);
    expect(a.stats.activeBytes).toBe(4 * MiB);
    const q = a.malloc(4 * MiB);
    expect(q.addr).not.toBe(p.addr);
    a.freeCompleted(p);
    expect(a.stats.activeBytes).toBe(4 * MiB);
    expect(() => a.freeCompleted(p)).toThrow(expect.objectContaining({ code: "BAD_ARGUMENT" }));
    a.close([q]);
  });

  it("releases every whole free segment of both pools and retries before OOM", () => {
    const d = withCapacity(new SimDriver(), 64 * MiB);
    const a = new Allocator("caching", d, { checkInvariants: 1 });
    const s = a.malloc(1000); // small 2 MiB segment
    const big = a.malloc(40 * MiB);
    const mid = a.malloc(12 * MiB); // 12 MiB segment
    a.free(s);
    a.free(mid);
    a.free(big);
    // 60 MiB reserved and cached; a 50 MiB request fits only after release_cached_blocks
    const x = a.malloc(50 * MiB);
    expect(a.stats.numAllocRetries).toBe(1);
    // large pool first, in pool order (size, address), then the small pool
    expect(segs(a)).toEqual([
      ["alloc", 2 * MiB],
      ["alloc", 40 * MiB],
      ["alloc", 12 * MiB],
      ["free", 12 * MiB],
      ["free", 40 * MiB],
      ["free", 2 * MiB],
      ["alloc", 50 * MiB],
    ]);
    expect(a.tryMalloc(20 * MiB)).toBeNull();
    expect(a.stats.numOoms).toBe(1);
    a.close([x]);
  });

  it("honours max_split_size and max_non_split_rounding", () => {
    const a = new Allocator("caching", new SimDriver(), { options: { maxSplitSize: 40 * MiB }, checkInvariants: 1 });
    const big = a.malloc(100 * MiB);
    const bigAddr = big.addr;
    a.free(big);
    // a request below max_split_size may not take a block at or above it
    const small = a.malloc(30 * MiB);
    expect(small.addr).not.toBe(bigAddr);
    // a request >= max_split_size may take it only when it is < request + 20 MiB
    const sixty = a.malloc(60 * MiB);
    expect(sixty.addr).not.toBe(bigAddr);
    const fit = a.malloc(90 * MiB);
    expect(fit.addr).toBe(bigAddr);
    expect(fit.size).toBe(100 * MiB); // not split: request >= max_split_size
    a.close([small, sixty, fit]);
  });

  it("peekCached says where malloc lands when it needs no cudaMalloc, and null when it would", () => {
    const a = new Allocator("caching", new SimDriver(), { options: { maxSplitSize: 40 * MiB }, checkInvariants: 1, recorder: null });
    expect(a.peekCached(MiB + 1, 0)).toBeNull(); // empty pools: a new segment
    const big = a.malloc(100 * MiB);
    const s = a.malloc(1000);
    const bigAddr = big.addr;
    a.free(big);
    expect(a.peekCached(30 * MiB, 0)).toBeNull(); // max_split_size: it may not take the 100 MiB block
    expect(a.peekCached(90 * MiB, 7)).toBeNull(); // another stream's block
    expect(a.peekCached(60 * MiB, 0)).toBeNull(); // >= request + max_non_split_rounding
    expect(a.peekCached(90 * MiB, 0)).toBe(bigAddr);
    const fit = a.malloc(90 * MiB);
    expect(fit.addr).toBe(bigAddr);
    // small pool: the rest of s's segment, split front
    const p = a.peekCached(4096, 0);
    expect(p).toBe(s.addr + s.size);
    expect(a.malloc(4096).addr).toBe(p);
    a.close();
  });

  it("rejects bad options and sizes with coded errors", () => {
    expect(() => new Allocator("caching", new SimDriver(), { options: { nope: 1 } })).toThrow(expect.objectContaining({ code: "BAD_OPTION" }));
    expect(() => new Allocator("caching", new SimDriver(), { options: { maxSplitSize: "big" } })).toThrow(/^caching\.maxSplitSize accepts a byte count from -1 to 1PiB .* or null \(the trace's recorded setting\), not 'big'$/);
    const a = new Allocator("caching", new SimDriver());
    expect(() => a.malloc(-1)).toThrow(expect.objectContaining({ code: "BAD_ARGUMENT" }));
    expect(() => new Allocator("nope", new SimDriver())).toThrow(expect.objectContaining({ code: "UNKNOWN_POLICY" }));
  });
});
