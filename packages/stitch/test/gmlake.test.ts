import { describe, expect, it } from "vitest";
import { createDriver, SimDriver, withCapacity, type VmmDriver } from "@gmlake/vmm";
import { EventKind } from "@gmlake/trace";
import { Allocator, GmlakeAllocator, StitchError, type Block, type GmlakeOptions } from "../src/index.js";
import { MiB, rng } from "./helpers.js";

/**
 * BestFit's four states, StitchFree and GC on small hand-made sequences: exact driver
 * calls, reserved bytes and addresses; invariants checked at every operation.
 */
const SMALL_FRAG = { fragLimit: 4 * MiB };

function make(options: Partial<GmlakeOptions> = {}, driver: VmmDriver = new SimDriver()) {
  const a = new Allocator("gmlake", driver, { options, checkInvariants: 1 });
  return { a, g: a.instance as GmlakeAllocator, driver };
}

/** Memory driver calls made by f (non-zero ones only; the engine's syncs are stream-safety.test.ts's). */
function calls(driver: VmmDriver, f: () => void): Record<string, number> {
  const s0 = driver.stats().calls;
  f();
  const s1 = driver.stats().calls;
  const out: Record<string, number> = {};
  for (const k of Object.keys(s1) as (keyof typeof s1)[]) if (s1[k] !== s0[k] && !/^(event|stream|ctx)/.test(k)) out[k] = s1[k] - s0[k];
  return out;
}

/** Two free 10 MiB pBlocks (separate segments); returns their addresses (low, high). */
function twoFree(a: Allocator): [number, number] {
  const x = a.malloc(10 * MiB);
  const y = a.malloc(10 * MiB);
  a.free(x);
  a.free(y);
  return [x.addr, y.addr];
}

describe("gmlake set-access", () => {
  it("one cuMemSetAccess per chunk as the original (setAccessPerChunk), one per range without; same modelled cost", () => {
    const per = make();
    const range = make({ setAccessPerChunk: false });
    expect(calls(per.driver, () => per.a.malloc(10 * MiB))).toEqual({ memCreate: 5, memAddressReserve: 1, memMap: 5, memSetAccess: 5 });
    expect(calls(range.driver, () => range.a.malloc(10 * MiB))).toEqual({ memCreate: 5, memAddressReserve: 1, memMap: 5, memSetAccess: 1 });
    // the sim charges a set-access per mapping it covers: five 2 MiB calls cost one call over five mappings
    expect(per.driver.stats().timeUs.memSetAccess).toBeCloseTo(range.driver.stats().timeUs.memSetAccess, 9);
    expect(() => make({ setAccessPerChunk: 2 as unknown as boolean })).toThrow(StitchError);
  });

  it("its on/off knobs are booleans that take the original's 1/0 too (number or text), to the same decisions", () => {
    // the calls of one malloc after two free 10 MiB pBlocks: each knob changes them
    const run = (o: Record<string, unknown>, size: number) => {
      const { a, driver } = make({ ...SMALL_FRAG, ...o } as Partial<GmlakeOptions>);
      twoFree(a);
      return calls(driver, () => a.free(a.malloc(size)));
    };
    for (const [name, size] of [["setAccessPerChunk", 16 * MiB], ["vmmDefragment", 16 * MiB], ["reAlloc", 24 * MiB]] as const) {
      const on = run({ [name]: true }, size);
      const off = run({ [name]: false }, size);
      expect(on).not.toEqual(off);
      for (const v of [0, "0", " 0 "]) expect(run({ [name]: v }, size)).toEqual(off);
      for (const v of [1, "1", "true"]) expect(run({ [name]: v }, size)).toEqual(on);
      for (const v of [2, -1, 0.5, "yes", "1.0", ""]) expect(() => make({ [name]: v } as Partial<GmlakeOptions>)).toThrow(/accepts true or false \(or 1\/0\), not/);
    }
  });
});

describe("gmlake state 1: a single pBlock", () => {
  it("creates whole-chunk pBlocks and splits cached ones without driver calls", () => {
    const { a, driver } = make();
    let x!: Block;
    expect(calls(driver, () => (x = a.malloc(10 * MiB)))).toEqual({ memCreate: 5, memAddressReserve: 1, memMap: 5, memSetAccess: 5 });
    expect(x.size).toBe(10 * MiB);
    expect(a.stats.reservedBytes).toBe(10 * MiB);
    const base = x.addr; // the freed block object lives on in the pool (it becomes the split's remainder)
    a.free(x);
    let y!: Block;
    let z!: Block;
    expect(calls(driver, () => (y = a.malloc(4 * MiB)))).toEqual({});
    expect([y.addr, y.size]).toEqual([base, 4 * MiB]);
    expect(calls(driver, () => (z = a.malloc(6 * MiB - 100)))).toEqual({});
    expect([z.addr, z.size]).toEqual([base + 4 * MiB, 6 * MiB]);
    // large requests round to whole chunks; 1-10 MiB ones open a 20 MiB pBlock as PyTorch's 20 MiB segments
    let w!: Block;
    expect(calls(driver, () => (w = a.malloc(MiB + 1)))).toEqual({ memCreate: 10, memAddressReserve: 1, memMap: 10, memSetAccess: 10 });
    expect(w.size).toBe(2 * MiB);
    expect(a.stats.allocatedBytes).toBe(12 * MiB);
    // small requests: PyTorch's small pool, a 2 MiB cudaMalloc'd segment
    let s!: Block;
    expect(calls(driver, () => (s = a.malloc(1000)))).toEqual({ memAlloc: 1 });
    expect(s.size).toBe(1024);
    expect(a.stats.reservedBytes).toBe(32 * MiB);
    a.close([y, z, w, s]);
  });
});

describe("gmlake state 2: stitch, StitchFree, sPool reuse", () => {
  it("stitches free pBlocks largest first, splits the last, and maps only existing chunks", () => {
    const { a, g, driver } = make(SMALL_FRAG);
    const [lo, hi] = twoFree(a);
    let s!: Block;
    expect(calls(driver, () => (s = a.malloc(16 * MiB)))).toEqual({ memAddressReserve: 1, memMap: 8, memSetAccess: 8 });
    expect(s.size).toBe(16 * MiB);
    expect(s.seams).toEqual([10 * MiB]);
    expect(a.stats.reservedBytes).toBe(20 * MiB);
    expect(g.counters().stitches).toBe(1);
    expect(g.stitchedBytes).toBe(16 * MiB);
    const log = a.recorder!;
    const k = Array.from(log.kind.subarray(0, log.length)).lastIndexOf(EventKind.stitch);
    expect([log.addr[k], log.size[k], log.aux[k]]).toEqual([s.addr, 16 * MiB, 8]); // stitch event: range, bytes, chunks
    // chunk order: the high-address pBlock (taken first on the size tie), then 3 chunks of the low one
    const owner = (off: number) => a.ctx.chunks.translate(s.addr + off)!.chunk.mappings.find((m) => m !== s.addr + off);
    expect(owner(0)).toBe(hi);
    expect(owner(10 * MiB)).toBe(lo);
    expect(owner(14 * MiB)).toBe(lo + 4 * MiB);
    // the 4 MiB overshoot of the low pBlock stayed free and serves a request in place
    let r!: Block;
    expect(calls(driver, () => (r = a.malloc(4 * MiB)))).toEqual({});
    expect(r.addr).toBe(lo + 6 * MiB);
    a.free(r);

    // StitchFree: pBlocks back (merged), the sBlock cached in the sPool with its mapping
    expect(calls(driver, () => a.free(s))).toEqual({});
    expect(g.counters().freeSBlocks).toBe(1);
    expect(g.large.size).toBe(2);
    // a request no single pBlock fits reuses the cached sBlock: no driver call
    let s2!: Block;
    expect(calls(driver, () => (s2 = a.malloc(16 * MiB)))).toEqual({});
    expect(s2.addr).toBe(s.addr);
    expect(g.counters().sBlockReuses).toBe(1);
    a.close([s2]);
  });

  it("reuses a larger sBlock for its used prefix; others using its tail make it fragmented", () => {
    const { a, g, driver } = make(SMALL_FRAG);
    const [lo] = twoFree(a);
    const s = a.malloc(16 * MiB);
    a.free(s);
    let p!: Block;
    expect(calls(driver, () => (p = a.malloc(12 * MiB)))).toEqual({});
    expect([p.addr, p.size]).toEqual([s.addr, 12 * MiB]); // charged for what it uses, not the 16 MiB range
    expect(a.stats.allocatedBytes).toBe(12 * MiB);
    // the low pBlock was re-split: [1 chunk used through the sBlock][4 chunks free]
    let q!: Block;
    expect(calls(driver, () => (q = a.malloc(8 * MiB)))).toEqual({});
    expect(q.addr).toBe(lo + 2 * MiB);
    a.free(p);
    expect(g.counters()).toMatchObject({ fragmentedSBlocks: 1, freeSBlocks: 0 });
    // fragmented sBlocks are not handed out; 12 MiB of free pBlocks cannot cover 16 MiB: new memory
    let r!: Block;
    expect(calls(driver, () => (r = a.malloc(16 * MiB)))).toEqual({ memCreate: 8, memAddressReserve: 1, memMap: 8, memSetAccess: 8 });
    a.free(r);
    a.free(q);
    expect(g.counters()).toMatchObject({ fragmentedSBlocks: 0, freeSBlocks: 1 });
    a.close([]);
  });

  it("peekCached says where malloc lands without new memory or a mapping: a pBlock, a cached sBlock, the small pool; null where it would stitch", () => {
    const { a, driver } = make(SMALL_FRAG);
    expect(a.peekCached(4 * MiB, 0)).toBeNull(); // empty pools: new memory
    const [lo] = twoFree(a);
    let p: number | null = null;
    expect(calls(driver, () => (p = a.peekCached(16 * MiB, 0)))).toEqual({}); // nothing asked of the driver
    expect(p).toBeNull(); // no pBlock of 16 MiB, no sBlock: it would stitch
    expect(a.peekCached(4 * MiB, 1)).toBeNull(); // another stream's pBlocks
    expect(a.peekCached(4 * MiB, 0)).toBe(lo); // the best fit (the lower address of the size tie), split low
    const r = a.malloc(4 * MiB);
    expect(r.addr).toBe(lo);
    a.free(r);
    const s = a.malloc(16 * MiB); // stitched
    a.free(s);
    expect(a.peekCached(16 * MiB, 0)).toBe(s.addr); // the cached sBlock, reused
    const s2 = a.malloc(16 * MiB);
    expect(s2.addr).toBe(s.addr);
    const small = a.malloc(1000);
    expect(a.peekCached(4096, 0)).toBe(small.addr + small.size); // the small pool, split front
    expect(a.malloc(4096).addr).toBe(small.addr + small.size);
    a.close();
  });

  it("reuseLimit bounds the sBlock handed out; a new stitch fragments the cached one", () => {
    const { a, g } = make({ ...SMALL_FRAG, reuseLimit: 1.2 });
    twoFree(a);
    a.free(a.malloc(16 * MiB));
    const b = a.malloc(12 * MiB); // 16 > 12 x 1.2: stitch anew
    expect(g.counters()).toMatchObject({ stitches: 2, sBlockReuses: 0, fragmentedSBlocks: 1 });
    expect(b.size).toBe(12 * MiB);
    a.close([b]);
  });

  it("fragLimit: requests below it are never stitched (default 512 MiB)", () => {
    const { a, g, driver } = make();
    twoFree(a);
    expect(calls(driver, () => a.free(a.malloc(16 * MiB)))).toEqual({ memCreate: 8, memAddressReserve: 1, memMap: 8, memSetAccess: 8 });
    expect(g.counters().stitches).toBe(0);
    a.close([]);
  });

  it("vmmDefragment false: chunk-backed caching, no stitch", () => {
    const { a, g, driver } = make({ ...SMALL_FRAG, vmmDefragment: false });
    twoFree(a);
    let s!: Block;
    expect(calls(driver, () => (s = a.malloc(16 * MiB)))).toEqual({ memCreate: 8, memAddressReserve: 1, memMap: 8, memSetAccess: 8 });
    a.free(s);
    expect(calls(driver, () => a.free(a.malloc(16 * MiB)))).toEqual({});
    expect(g.counters().stitches).toBe(0);
    a.close([]);
  });
});

describe("gmlake states 3 and 4, defragLevel, reAlloc", () => {
  it("defragLevel 1 stitches only after a new allocation fails", () => {
    const tight = make({ ...SMALL_FRAG, defragLevel: 1 }, withCapacity(new SimDriver(), 20 * MiB));
    twoFree(tight.a);
    const b = tight.a.malloc(16 * MiB);
    expect(tight.g.counters().stitches).toBe(1);
    expect(tight.a.stats.peakReservedBytes).toBe(20 * MiB);
    tight.a.close([b]);
    const roomy = make({ ...SMALL_FRAG, defragLevel: 1 });
    twoFree(roomy.a);
    expect(calls(roomy.driver, () => roomy.a.free(roomy.a.malloc(16 * MiB)))).toMatchObject({ memCreate: 8 });
    expect(roomy.g.counters().stitches).toBe(0);
    roomy.a.close([]);
  });

  it("out of memory: releases cached pBlocks, retries, then returns null", () => {
    const { a, driver } = make(SMALL_FRAG, withCapacity(new SimDriver(), 20 * MiB));
    const x = a.malloc(10 * MiB);
    a.free(a.malloc(10 * MiB));
    let r: Block | null = null;
    expect(calls(driver, () => (r = a.tryMalloc(16 * MiB)))).toMatchObject({ memUnmap: 5, memAddressFree: 1 });
    expect(r).toBeNull();
    expect(a.stats).toMatchObject({ numOoms: 1, numAllocRetries: 1, reservedBytes: 10 * MiB });
    a.free(x);
    const y = a.malloc(16 * MiB); // releasing the 10 MiB pBlock makes room
    expect(a.stats.reservedBytes).toBe(16 * MiB);
    a.close([y]);
  });

  it("reAlloc creates only the missing bytes and stitches them with the free pBlocks", () => {
    const on = make({ ...SMALL_FRAG, reAlloc: true });
    twoFree(on.a);
    let b!: Block;
    expect(calls(on.driver, () => (b = on.a.malloc(24 * MiB)))).toEqual({ memCreate: 10, memAddressReserve: 2, memMap: 22, memSetAccess: 22 });
    expect(on.a.stats.reservedBytes).toBe(40 * MiB);
    expect(on.g.counters().stitches).toBe(1);
    on.a.close([b]);
    const off = make(SMALL_FRAG);
    twoFree(off.a);
    expect(calls(off.driver, () => off.a.free(off.a.malloc(24 * MiB)))).toMatchObject({ memCreate: 12 });
    expect(off.a.stats.peakReservedBytes).toBe(44 * MiB);
    off.a.close([]);
  });
});

describe("gmlake GC of stitched ranges", () => {
  it("autoGC (GiB) collects free stitched ranges after a stitch, never physical chunks", () => {
    const { a, g, driver } = make({ ...SMALL_FRAG, autoGC: 16 / 1024 });
    twoFree(a);
    a.free(a.malloc(16 * MiB)); // 16 MiB stitched: not past the limit
    expect(g.counters().gcRuns).toBe(0);
    let b!: Block;
    expect(calls(driver, () => (b = a.malloc(18 * MiB)))).toEqual({ memAddressReserve: 1, memMap: 9, memSetAccess: 9, memUnmap: 8, memAddressFree: 1 });
    expect(g.counters()).toMatchObject({ stitches: 2, gcRuns: 1, gcBlocks: 1, freeSBlocks: 0, fragmentedSBlocks: 0 });
    expect(g.stitchedBytes).toBe(18 * MiB);
    a.close([b]);
  });

  it("emptyCache unmaps stitched ranges and releases whole pBlocks", () => {
    const { a, g, driver } = make(SMALL_FRAG);
    twoFree(a);
    a.free(a.malloc(16 * MiB));
    expect(calls(driver, () => a.emptyCache())).toEqual({ memUnmap: 18, memAddressFree: 3, memRelease: 10 });
    expect(a.stats.reservedBytes).toBe(0);
    expect(g.stitchedBytes).toBe(0);
    a.close([]);
  });

  it("releasing a pBlock under an active sBlock's free tail unmaps it there; the sBlock is collected at its free", () => {
    const { a, g, driver } = make(SMALL_FRAG);
    const x = a.malloc(12 * MiB);
    const y = a.malloc(10 * MiB);
    const z = a.malloc(10 * MiB);
    for (const b of [x, y, z]) a.free(b);
    const s = a.malloc(32 * MiB); // x, z, y (largest first; ties by higher address)
    expect(a.ctx.chunks.translate(s.addr + 22 * MiB)!.chunk.mappings).toContain(y.addr);
    a.free(s);
    const p = a.malloc(14 * MiB); // reuses the sBlock: x wholly, 1 chunk of z; y untouched
    expect(p.addr).toBe(s.addr);
    expect(calls(driver, () => a.emptyCache())).toEqual({ memUnmap: 10, memAddressFree: 1, memRelease: 5 });
    expect(calls(driver, () => a.free(p))).toEqual({ memUnmap: 11, memAddressFree: 1 });
    expect(g.stitchedBytes).toBe(0);
    a.emptyCache();
    expect(a.stats.reservedBytes).toBe(0);
    a.close([]);
  });
});

describe("gmlake invariant checks", () => {
  it("report tampered structures", () => {
    const { a, g } = make(SMALL_FRAG);
    twoFree(a);
    const s = a.malloc(16 * MiB);
    a.check();
    g.stitchedBytes += MiB;
    expect(() => a.check()).toThrow(/stitched bytes/);
    g.stitchedBytes -= MiB;
    const S = s.segment as { free: number };
    S.free++;
    expect(() => a.check()).toThrow(/free 1 != 0/);
    S.free--;
    a.check();
    a.close([s]);
  });
});

describe("gmlake knobs", () => {
  it("chunkSize sets the handle size and the rounding", () => {
    const { a, driver } = make({ chunkSize: 4 * MiB });
    let b!: Block;
    expect(calls(driver, () => (b = a.malloc(5 * MiB)))).toEqual({ memCreate: 5, memAddressReserve: 1, memMap: 5, memSetAccess: 5 });
    expect(b.size).toBe(8 * MiB);
    expect(a.stats.reservedBytes).toBe(20 * MiB);
    a.close([b]);
  });

  it("rejects bad knobs with BAD_OPTION", () => {
    const bad = (o: Record<string, unknown>) => () => new Allocator("gmlake", new SimDriver(), { options: o });
    for (const o of [{ chunkSize: 3 * MiB }, { chunkSize: "2 apples" }, { chunkSize: 2.5 }, { vmmDefragment: 2 }, { reuseLimit: 0 }, { defragLevel: -1 }, { autoGc: 1 }]) {
      expect(bad(o)).toThrow(expect.objectContaining({ code: "BAD_OPTION" }));
    }
    expect(bad({ chunkSize: 3 * MiB })).toThrow(StitchError);
    // a size with a unit is a byte count, as on the command line
    const a = new Allocator("gmlake", new SimDriver(), { options: { chunkSize: "4MiB", fragLimit: "0" } });
    a.close();
  });
});

describe("gmlake data through stitched blocks (host driver)", () => {
  it("bytes written through a stitched block read back through its pBlocks' addresses", () => {
    const driver = createDriver("host", { capacityBytes: 256 * MiB });
    try {
      const { a } = make(SMALL_FRAG, driver);
      twoFree(a);
      const s = a.malloc(16 * MiB);
      const data = new Uint8Array(16 * MiB);
      const r = rng(42);
      for (let i = 0; i < data.length; i += 4096) data[i] = 1 + Math.floor(r() * 255);
      for (let i = 1; i < data.length; i += 7919) data[i] = 1 + Math.floor(r() * 255);
      driver.write(s.addr, data);
      const C = 2 * MiB;
      for (let j = 0; j < 8; j++) {
        const chunk = a.ctx.chunks.translate(s.addr + j * C)!.chunk;
        const other = chunk.mappings.find((m) => m !== s.addr + j * C)!;
        expect(other).toBeDefined();
        // Buffer.equals: vitest's deep equality is far too slow on 2 MiB arrays
        expect(Buffer.from(driver.read(other, C)).equals(data.subarray(j * C, (j + 1) * C))).toBe(true);
      }
      a.close([s]);
    } finally {
      driver.close();
    }
  });
});

/** Random mixes that stitch, reuse and collect, on sim (invariants every op) and host (integrity). */
function mix(a: Allocator, seed: number, ops: number): void {
  const r = rng(seed);
  const streams = [0, 0x5a5a00];
  const live: Block[] = [];
  for (let i = 0; i < ops; i++) {
    const x = r();
    if (x < 0.5 || live.length === 0) {
      const size = r() < 0.2 ? 1 + Math.floor(r() * MiB) : 2 * MiB + Math.floor(r() * 40 * MiB);
      const b = a.tryMalloc(size, streams[Math.floor(r() * streams.length)]!);
      if (b !== null) live.push(b);
    } else if (x < 0.97) {
      const j = Math.floor(r() * live.length);
      a.free(live[j]!);
      live[j] = live[live.length - 1]!;
      live.pop();
    } else {
      a.emptyCache();
    }
  }
  a.check();
  a.close(live);
}

describe("gmlake random mixes", () => {
  it("keeps its structures consistent (sim, invariants at every op) and tears down to nothing", () => {
    let reuses = 0;
    let gcs = 0;
    for (const [seed, options] of [
      [1, { fragLimit: 8 * MiB }],
      [2, { fragLimit: 8 * MiB, autoGC: 64 / 1024, reuseLimit: 2 }],
      [3, { fragLimit: 8 * MiB, reAlloc: true, defragLevel: 1 }],
      [4, { fragLimit: 8 * MiB, maxSplitSize: 24 * MiB, defragLevel: 2 }],
    ] as const) {
      const driver = withCapacity(new SimDriver(), 400 * MiB);
      const a = new Allocator("gmlake", driver, { options, checkInvariants: 1 });
      mix(a, seed, 1500);
      const c = (a.instance as GmlakeAllocator).counters();
      expect(c.stitches).toBeGreaterThan(0);
      reuses += c.sBlockReuses;
      gcs += c.gcBlocks;
      expect(a.stats.reservedBytes).toBe(0);
      expect(driver.liveBytes).toBe(0);
    }
    expect(reuses).toBeGreaterThan(0);
    expect(gcs).toBeGreaterThan(0);
  });

  it("keeps every stamp intact through stitched blocks (host, integrity)", () => {
    const driver = createDriver("host", { capacityBytes: 400 * MiB });
    try {
      const a = new Allocator("gmlake", driver, { options: { fragLimit: 8 * MiB }, checkInvariants: 64, integrity: true });
      mix(a, 9, 800);
      expect((a.instance as GmlakeAllocator).counters().stitches).toBeGreaterThan(0);
      expect(a.integrity!.errors, a.integrity!.messages.join("; ")).toBe(0);
      expect(a.integrity!.checked).toBeGreaterThan(100);
    } finally {
      driver.close();
    }
  });
});
