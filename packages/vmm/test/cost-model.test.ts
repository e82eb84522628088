import { describe, expect, it } from "vitest";

import { H200_COSTS, H200_REPLAY_COSTS, SimDriver, curveUs } from "../src/index.js";

const MiB = 1024 * 1024;
const g = 2 * MiB;
// First touch (fitted to fresh-process runs; cost-model.ts says from which): charged on top of the curve.
const FT_CREATE = H200_REPLAY_COSTS.memCreateFirstTouch;
const FT_ALLOC = H200_REPLAY_COSTS.memAllocFirstTouch;

describe("curveUs", () => {
  it("returns the measured figure at each measured size", () => {
    expect(curveUs(H200_COSTS.memCreate, 2 * MiB)).toBeCloseTo(12.83);
    expect(curveUs(H200_COSTS.memCreate, 20 * MiB)).toBeCloseTo(9.17);
    expect(curveUs(H200_COSTS.memRelease, 512 * MiB)).toBeCloseTo(171.39);
  });
  it("interpolates linearly in bytes between measured sizes", () => {
    expect(curveUs(H200_COSTS.memRelease, 11 * MiB)).toBeCloseTo((10.43 + 15.34) / 2);
  });
  it("holds the first figure below the range and extends a rising last segment", () => {
    expect(curveUs(H200_COSTS.memCreate, 4096)).toBeCloseTo(12.83);
    const slope = (171.39 - 27.84) / (448 * MiB);
    expect(curveUs(H200_COSTS.memRelease, 1024 * MiB)).toBeCloseTo(171.39 + slope * 512 * MiB);
    // memMap's last segment falls (0.54 -> 0.65 rises; memCreate 9.75 -> 15.25 rises): a falling one stays flat.
    expect(curveUs([[1, 5], [2, 3]], 10)).toBe(3);
  });
});

/** Create, reserve, map, set access, unmap, free the range, release: each call once on a 2 MiB handle. */
function oneOfEach(d: SimDriver) {
  const h = d.memCreate(g);
  const va = d.memAddressReserve(4 * g);
  d.memMap(va, g, 0, h);
  d.memSetAccess(va, g);
  d.memUnmap(va, g);
  d.memAddressFree(va, 4 * g);
  d.memRelease(h);
  return d.stats().timeUs;
}

describe("SimDriver cost model", () => {
  it("charges the replay-measured H200 figures by default", () => {
    const d = new SimDriver();
    expect(d.costs).toBe(H200_REPLAY_COSTS);
    const t = oneOfEach(d);
    // a fresh driver's first create is memory new to the process: first touch on top
    expect(t.memCreate).toBeCloseTo(22 + FT_CREATE);
    expect(t.memMap).toBeCloseTo(3.3);
    expect(t.memSetAccess).toBeCloseTo(39);
    expect(t.memUnmap).toBeCloseTo(36);
    expect(t.memRelease).toBeCloseTo(20);
    expect(t.memAddressReserve).toBe(45);
  });

  it("replay costs: create flat in size, setAccess per mapping whatever its size", () => {
    const d = new SimDriver();
    const big = d.memCreate(32 * g);
    const small = d.memCreate(g);
    expect(d.stats().timeUs.memCreate).toBeCloseTo(2 * (22 + FT_CREATE));
    const va = d.memAddressReserve(33 * g);
    d.memMap(va, 32 * g, 0, big);
    d.memMap(va + 32 * g, g, 0, small);
    d.memSetAccess(va, 33 * g);
    // two mappings: 2 x 39 us, though one of them is 64 MiB
    expect(d.stats().timeUs.memSetAccess).toBeCloseTo(2 * 39);
  });

  it("charges first touch only for memory past the most the driver has held", () => {
    expect(FT_CREATE).toBeGreaterThan(0);
    expect(FT_ALLOC).toBeGreaterThan(0);
    const d = new SimDriver();
    d.memRelease(d.memCreate(4 * g));
    d.resetStats();
    // below the 8 MiB high-water: taken again, no first touch
    const a = d.memCreate(2 * g);
    const b = d.memCreate(2 * g);
    expect(d.stats().timeUs.memCreate).toBeCloseTo(2 * 22);
    // past it: new to the process
    const c = d.memCreate(g);
    expect(d.stats().timeUs.memCreate).toBeCloseTo(3 * 22 + FT_CREATE);
    for (const h of [a, b, c]) d.memRelease(h);
    d.memFree(d.memAlloc(32 * g)); // 64 MiB, past the 10 MiB high-water
    d.memFree(d.memAlloc(32 * g)); // taken again
    expect(d.stats().timeUs.memAlloc).toBeCloseTo(2 * 74.8 + FT_ALLOC);
    // the microbenchmark table has no first-touch figure
    const m = new SimDriver({ costs: H200_COSTS });
    m.memCreate(g);
    expect(m.stats().timeUs.memCreate).toBeCloseTo(12.83);
  });

  it("charges each call its modelled cost (the microbenchmark table)", () => {
    const d = new SimDriver({ costs: H200_COSTS });
    const t = oneOfEach(d);
    expect(t.memCreate).toBeCloseTo(12.83);
    expect(t.memMap).toBeCloseTo(1.12);
    expect(t.memSetAccess).toBeCloseTo(34.17);
    expect(t.memUnmap).toBeCloseTo(16.91);
    expect(t.memRelease).toBeCloseTo(10.43);
    expect(t.memAddressReserve).toBeCloseTo(H200_COSTS.memAddressReserve);
    expect(t.memAddressFree).toBeCloseTo(H200_COSTS.memAddressFree);
    expect(d.stats().totalTimeUs).toBeCloseTo(12.83 + 1.12 + 34.17 + 16.91 + 10.43 + H200_COSTS.memAddressReserve + H200_COSTS.memAddressFree);
  });

  it("charges setAccess and unmap per mapped handle in the range", () => {
    const d = new SimDriver({ costs: H200_COSTS });
    const n = 512;
    const handles = Array.from({ length: n }, () => d.memCreate(g));
    d.resetStats();
    // The stitch of vmm-costs.md: a 1 GiB view of 512 handles of 2 MiB.
    const va = d.memAddressReserve(n * g);
    handles.forEach((h, i) => d.memMap(va + i * g, g, 0, h));
    d.memSetAccess(va, n * g);
    const s = d.stats();
    expect(s.calls.memSetAccess).toBe(1);
    expect(s.timeUs.memSetAccess).toBeCloseTo(n * 34.17, 6);
    expect(s.totalTimeUs).toBeCloseTo(H200_COSTS.memAddressReserve + n * 1.12 + n * 34.17, 6);
    d.memUnmap(va, n * g);
    expect(d.stats().timeUs.memUnmap).toBeCloseTo(n * 16.91, 6);
  });

  it("takes overrides and leaves the rest at the H200 replay figures", () => {
    const d = new SimDriver({ costs: { memMap: [[g, 100]], memAddressReserve: 7 } });
    const h = d.memCreate(g);
    const va = d.memAddressReserve(g);
    d.memMap(va, g, 0, h);
    expect(d.stats().timeUs.memMap).toBe(100);
    expect(d.stats().timeUs.memAddressReserve).toBe(7);
    expect(d.stats().timeUs.memCreate).toBeCloseTo(22 + FT_CREATE);
  });

  it("counts failed calls and charges them nothing", () => {
    const d = new SimDriver();
    expect(() => d.memCreate(0)).toThrow();
    expect(d.stats().calls.memCreate).toBe(1);
    expect(d.stats().timeUs.memCreate).toBe(0);
  });
});
