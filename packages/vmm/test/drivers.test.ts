import { describe, expect, it } from "vitest";

import {
  HostDriver,
  SIM_VA_BASE,
  SimDriver,
  VmmError,
  createDriver,
  cudaAvailable,
  describeProbe,
  probeCuda,
} from "../src/index.js";
import { loadNative } from "../src/native.js";
import { codeOf } from "./helpers.js";

const g = 2 * 1024 * 1024;

describe("createDriver", () => {
  it("makes each driver by name, and auto picks cuda only with a driver and a device", () => {
    expect(createDriver("sim").name).toBe("sim");
    expect(createDriver("host").name).toBe("host");
    expect(createDriver("auto").name).toBe(cudaAvailable() ? "cuda" : "host");
    expect(codeOf(() => createDriver("gpu" as "sim"))).toBe("CUDA_ERROR_INVALID_VALUE");
  });

  it.skipIf(cudaAvailable())("without a CUDA driver, cuda fails with a clear error", () => {
    let err: unknown;
    try {
      createDriver("cuda");
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(VmmError);
    expect((err as VmmError).code).toMatch(/^CUDA_DRIVER_NOT_FOUND$|^CUDA_ERROR_NO_DEVICE$/);
    expect((err as VmmError).message).toMatch(/libcuda|device/);
  });
});

describe("probeCuda", () => {
  it("reports in a child process what cuda would find", () => {
    const p = probeCuda({ memInfo: false });
    expect(p.isolated).toBe(true);
    expect(p.crashed).toBeUndefined();
    expect(p.addon.loaded).toBe(true);
    expect(p.ok).toBe(cudaAvailable());
    expect(describeProbe(p)).toMatch(/^cuda: /);
    if (!p.driver.found) expect(p.driver.error?.code).toBe("CUDA_DRIVER_NOT_FOUND");
  });
});

describe("the native layer", () => {
  it("throws VmmError instances with the CUDA error name and the call", () => {
    const n = loadNative();
    let err: unknown;
    try {
      n.hostMemAddressReserve(2 ** 50, g);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(VmmError);
    expect((err as VmmError).code).toBe("CUDA_ERROR_OUT_OF_MEMORY");
    expect((err as VmmError).call).toBe("hostMemAddressReserve");
    expect((err as VmmError).message).toMatch(/hostMemAddressReserve\(size=1125899906842624, alignment=2097152\) failed/);
  });

  it("rejects objects it did not make with a TypeError, and bad numbers with a RangeError", () => {
    const n = loadNative();
    const va = n.hostMemAddressReserve(g, g);
    expect(() => n.hostMemMap(va, g, 0, { id: 1, size: g })).toThrow(TypeError);
    expect(() => n.hostMemCreate(-1, 1)).toThrow(RangeError);
    expect(() => n.hostMemCreate(1.5, 1)).toThrow(RangeError);
    n.hostMemAddressFree(va, g);
  });

  it("does not take one driver's handle in another", () => {
    const a = new HostDriver();
    const b = new HostDriver();
    const s = new SimDriver();
    const h = a.memCreate(g);
    const vb = b.memAddressReserve(g);
    const vs = s.memAddressReserve(g);
    expect(() => b.memMap(vb, g, 0, h)).toThrow(TypeError);
    expect(() => s.memMap(vs, g, 0, h)).toThrow(TypeError);
    a.memRelease(h);
    b.memAddressFree(vb, g);
  });
});

describe("SimDriver", () => {
  it("hands out the same addresses run after run", () => {
    const run = () => {
      const d = new SimDriver();
      const a = d.memAddressReserve(4 * g);
      const b = d.memAddressReserve(g, 16 * g);
      d.memAddressFree(a, 4 * g);
      const c = d.memAlloc(100);
      return [a, b, c];
    };
    const first = run();
    expect(run()).toEqual(first);
    expect(first[0]).toBe(SIM_VA_BASE);
    expect(first[1]! % (16 * g)).toBe(0);
  });

  it("reuses freed virtual space once the top is reached", () => {
    const d = new SimDriver({ capacityBytes: 2 ** 50 });
    const huge = 2 ** 46;
    const a = d.memAddressReserve(huge);
    d.memAddressReserve(huge - 2 ** 44); // the top is now full
    expect(codeOf(() => d.memAddressReserve(huge))).toBe("CUDA_ERROR_OUT_OF_MEMORY");
    d.memAddressFree(a, huge);
    expect(d.memAddressReserve(huge)).toBe(a);
  });

  it("runs out of memory at its capacity (default: an H200's 143771 MiB)", () => {
    const d = new SimDriver();
    expect(d.device.totalBytes).toBe(143771 * 1024 * 1024);
    const big = d.memCreate(140 * 1024 * 1024 * 1024);
    expect(codeOf(() => d.memCreate(4 * 1024 * 1024 * 1024))).toBe("CUDA_ERROR_OUT_OF_MEMORY");
    d.memRelease(big);
    expect(d.memGetInfo().freeBytes).toBe(d.device.totalBytes);
  });

  it("with strictUnmap, refuses to unmap bytes that are not mapped", () => {
    const d = new SimDriver({ strictUnmap: true });
    const va = d.memAddressReserve(2 * g);
    expect(codeOf(() => d.memUnmap(va, g))).toBe("CUDA_ERROR_INVALID_VALUE");
    const h = new HostDriver({ strictUnmap: true });
    const vh = h.memAddressReserve(2 * g);
    expect(codeOf(() => h.memUnmap(vh, g))).toBe("CUDA_ERROR_INVALID_VALUE");
    h.memAddressFree(vh, 2 * g);
  });

  it("keeps memset of a large range cheap (fill pages, not bytes)", () => {
    const d = new SimDriver();
    const h = d.memCreate(1024 * g); // 2 GiB
    const va = d.memAddressReserve(1024 * g);
    d.memMap(va, 1024 * g, 0, h);
    d.memSetAccess(va, 1024 * g);
    d.memset(va, 0x11, 1024 * g);
    d.memset(va + 100, 0x22, 10);
    expect([...d.read(va + 98, 4)]).toEqual([0x11, 0x11, 0x22, 0x22]);
    expect([...d.read(va + 1024 * g - 2, 2)]).toEqual([0x11, 0x11]);
  });

  it("takes tens of thousands of maps with per-reservation sorted bookkeeping", () => {
    const d = new SimDriver();
    const n = 20000;
    const handles = Array.from({ length: n }, () => d.memCreate(g));
    const va = d.memAddressReserve(n * g);
    // Map in a scattered order so inserts land in the middle.
    for (let i = 0; i < n; i++) {
      const j = (i * 7919) % n;
      d.memMap(va + j * g, g, 0, handles[j]!);
    }
    d.memSetAccess(va, n * g);
    expect(d.space.mappingCount).toBe(n);
    d.memUnmap(va, n * g);
    d.memAddressFree(va, n * g);
    for (const h of handles) d.memRelease(h);
    expect(d.leaks()).toEqual({ reservations: 0, mappings: 0, liveBytes: 0 });
  });
});
