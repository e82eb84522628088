import { describe, expect, it } from "vitest";
import { createDriver, SimDriver, type VmmDriver } from "@gmlake/vmm";
import { ChunkPool, ChunkPoolError } from "../src/index.js";
import { fakeDriver } from "./fake-driver.js";

const MiB = 1 << 20;

/** The same tests on the tiny fake, the sim and the host driver (real memory: mapping proven by bytes). */
const DRIVERS: { name: string; make: (granularity?: number, total?: number) => VmmDriver }[] = [
  { name: "fake", make: (g, t) => fakeDriver(g, t) },
  { name: "sim", make: (g, t) => new SimDriver({ granularity: g, capacityBytes: t }) },
  { name: "host", make: (g, t) => createDriver("host", { granularity: g, capacityBytes: t ?? 256 * MiB }) },
];

describe.each(DRIVERS)("ChunkPool on $name", ({ name, make }) => {
  const fakeDriver = (g = 2 * MiB, t?: number) => make(g, t) as VmmDriver & { mapped?: Map<number, unknown> };
  it("creates granularity-aligned chunks of several sizes and releases them", () => {
    const d = fakeDriver(2 * MiB);
    const pool = new ChunkPool(d);
    const a = pool.create(2 * MiB);
    const b = pool.create(20 * MiB);
    expect(pool.liveChunks).toBe(2);
    expect(pool.liveBytes).toBe(22 * MiB);
    expect(a.id).not.toBe(b.id);
    pool.release(a);
    expect(pool.liveBytes).toBe(20 * MiB);
    expect(d.stats().calls.memRelease).toBe(1);
    expect(() => pool.release(a)).toThrow(ChunkPoolError);
  });

  it("follows the driver's granularity, not a hard-wired 2 MiB", () => {
    const pool = new ChunkPool(fakeDriver(64 * 1024));
    expect(pool.granularity).toBe(64 * 1024);
    expect(pool.create(64 * 1024).size).toBe(64 * 1024);
    expect(() => pool.create(100_000)).toThrow(/multiple of the granularity 65536/);
    const restricted = new ChunkPool(fakeDriver(), { chunkSizes: [2 * MiB, 8 * MiB] });
    expect(() => restricted.create(4 * MiB)).toThrow(ChunkPoolError);
    expect(() => new ChunkPool(fakeDriver(), { chunkSizes: [3 * MiB] })).toThrow(/granularity/);
  });

  it("tracks a chunk mapped at several addresses (stitching) and translates addresses", () => {
    const d = fakeDriver();
    const pool = new ChunkPool(d);
    const c1 = pool.create(2 * MiB);
    const c2 = pool.create(4 * MiB);
    const base1 = d.memAddressReserve(6 * MiB);
    const base2 = d.memAddressReserve(6 * MiB);
    expect(pool.mapRun(base1, [c1, c2])).toBe(6 * MiB);
    // stitched in the other order elsewhere
    expect(pool.mapRun(base2, [c2, c1])).toBe(6 * MiB);
    expect(c1.mappings.sort()).toEqual([base1, base2 + 4 * MiB].sort());
    expect(pool.mappedBytes).toBe(12 * MiB);
    expect(d.stats().calls.memSetAccess).toBe(2);
    expect(pool.translate(base1 + 3 * MiB)).toMatchObject({ chunk: c2, offset: MiB, base: base1 + 2 * MiB });
    if (name !== "fake") {
      // the same physical bytes through both ranges
      d.write(base1 + 2 * MiB + 5, new Uint8Array([7, 8, 9]));
      expect([...d.read(base2 + 5, 3)]).toEqual([7, 8, 9]);
    }
    expect(pool.translate(base2 + 5 * MiB)).toMatchObject({ chunk: c1, offset: MiB });
    expect(pool.translate(base1 - 1)).toBeNull();
    expect(() => pool.release(c1)).toThrow(/still mapped/);
    expect(() => pool.map(c1, base1)).toThrow(/already maps/);
    pool.unmapRun(base1, [c1, c2]);
    expect(pool.translate(base1)).toBeNull();
    expect(() => pool.unmap(c1, base1)).toThrow(/not mapped/);
    expect(pool.releaseAll()).toBe(2);
    expect(pool.liveChunks).toBe(0);
    expect(pool.mappingCount).toBe(0);
    if (d.mapped) expect(d.mapped.size).toBe(0);
    if (name !== "fake") expect(d.memGetInfo().freeBytes).toBe(d.memGetInfo().totalBytes);
  });

  it("passes driver out-of-memory through and keeps counts right", () => {
    const d = fakeDriver(2 * MiB, 4 * MiB);
    const pool = new ChunkPool(d);
    pool.create(4 * MiB);
    expect(() => pool.create(2 * MiB)).toThrow(expect.objectContaining({ code: "CUDA_ERROR_OUT_OF_MEMORY" }));
    expect(pool.liveChunks).toBe(1);
  });

  it("reuses ids densely after release", () => {
    const pool = new ChunkPool(fakeDriver());
    const a = pool.create(2 * MiB);
    pool.release(a);
    expect(pool.create(2 * MiB).id).toBe(a.id);
  });
});
