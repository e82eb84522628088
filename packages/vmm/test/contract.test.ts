/**
 * The contract every VmmDriver keeps, run over cuda, host and sim alike: what passes
 * here on host and sim passed on an H200 too (bench/RESULTS.md), so host and sim can
 * stand in for CUDA. cuda skips cleanly where no driver or device is present.
 */
import { readFileSync } from "node:fs";

import { afterAll, beforeAll, describe, expect, it } from "vitest";

import {
  CudaDriver,
  HostDriver,
  MISUSE_CODES,
  SimDriver,
  cudaAvailable,
  type PhysicalHandle,
  type VmmDriver,
} from "../src/index.js";
import { codeOf } from "./helpers.js";

const PiB = 2 ** 50;
const INVALID = "CUDA_ERROR_INVALID_VALUE";
const INVALID_HANDLE = "CUDA_ERROR_INVALID_HANDLE";
/** CU_STREAM_PER_THREAD: a second stream every driver knows without creating one. */
const PER_THREAD_STREAM = 2;
const OOM = "CUDA_ERROR_OUT_OF_MEMORY";

interface Case {
  readonly name: "cuda" | "host" | "sim";
  readonly skip: boolean;
  readonly make: () => VmmDriver;
}

const hasCuda = cudaAvailable();
const cases: Case[] = [
  { name: "host", skip: false, make: () => new HostDriver() },
  { name: "sim", skip: false, make: () => new SimDriver() },
  { name: "cuda", skip: !hasCuda, make: () => new CudaDriver() },
];

/** Byte equality without a deep-equal diff over megabytes; -1 when equal, else the first index that differs. */
function firstDiff(a: Uint8Array, b: Uint8Array): number {
  if (a.length !== b.length) return Math.min(a.length, b.length);
  return Buffer.compare(a, b) === 0 ? -1 : a.findIndex((x, i) => x !== b[i]);
}

/**
 * Lines of /proc/self/maps that are ours: our memfds, or PROT_NONE reservations inside
 * ranges we reserved (the process may reuse freed ranges for its own read-write memory).
 */
function ourMaps(ranges: Array<[number, number]>): string[] {
  return readFileSync("/proc/self/maps", "utf8")
    .split("\n")
    .filter((line) => {
      if (line.includes("memfd:gmlake-vmm")) return true;
      const m = /^([0-9a-f]+)-([0-9a-f]+) ---p/.exec(line);
      if (!m) return false;
      const lo = parseInt(m[1]!, 16);
      const hi = parseInt(m[2]!, 16);
      return ranges.some(([a, b]) => lo < b && hi > a);
    });
}

describe.each(cases)("$name driver", (c) => {
  describe.skipIf(c.skip)("contract", () => {
    let d: VmmDriver;
    let g: number;
    const reserved: Array<[number, number]> = [];
    let baselineFree = 0;
    let baselineMaps: string[] = [];

    /** Reserve and remember the range (for the /proc/self/maps check). */
    const reserve = (size: number) => {
      const va = d.memAddressReserve(size);
      reserved.push([va, va + size]);
      return va;
    };

    beforeAll(() => {
      d = c.make();
      g = d.device.granularity.minimum;
      // Warm the VMM path once so the driver's own first-use allocations are in the baseline.
      const h = d.memCreate(g);
      const va = d.memAddressReserve(g);
      d.memMap(va, g, 0, h);
      d.memSetAccess(va, g);
      d.memUnmap(va, g);
      d.memAddressFree(va, g);
      d.memRelease(h);
      baselineFree = d.memGetInfo().freeBytes;
      baselineMaps = ourMaps([]);
    });

    afterAll(() => d?.close());

    it("reports a power-of-two granularity and aligned reservations", () => {
      expect(g).toBeGreaterThan(0);
      expect(Number.isInteger(Math.log2(g))).toBe(true);
      expect(d.device.granularity.recommended % g).toBe(0);
      expect(d.device.vmmSupported).toBe(true);
      const va = reserve(4 * g);
      expect(va % g).toBe(0);
      d.memAddressFree(va, 4 * g);
    });

    it("runs the reserve / map / set-access / unmap / free / release life cycle", () => {
      d.resetStats();
      const h = d.memCreate(g);
      expect(h.size).toBe(g);
      const va = reserve(2 * g);
      d.memMap(va, g, 0, h);
      d.memSetAccess(va, g);
      d.memset(va, 0xab, g);
      expect([...d.read(va + g - 4, 4)]).toEqual([0xab, 0xab, 0xab, 0xab]);
      d.memUnmap(va, g);
      d.memAddressFree(va, 2 * g);
      d.memRelease(h);
      const s = d.stats();
      for (const call of ["memCreate", "memAddressReserve", "memMap", "memSetAccess", "memUnmap", "memAddressFree", "memRelease"] as const) {
        expect(s.calls[call], call).toBe(1);
      }
      expect(s.totalCalls).toBe(7);
      expect(s.totalTimeUs).toBeGreaterThan(0);
      d.resetStats();
      expect(d.stats().totalCalls).toBe(0);
    });

    it("maps one handle at two addresses: a write through one is read through the other", () => {
      const h = d.memCreate(g);
      const a = reserve(g);
      const b = reserve(g);
      d.memMap(a, g, 0, h);
      d.memMap(b, g, 0, h);
      d.memSetAccess(a, g);
      d.memSetAccess(b, g);
      const data = Uint8Array.from({ length: 4096 }, (_, i) => (i * 7 + 3) & 0xff);
      d.write(a + 12345, data);
      expect(d.read(b + 12345, data.length)).toEqual(data);
      d.memset(b, 0x5a, 16);
      expect([...d.read(a, 4)]).toEqual([0x5a, 0x5a, 0x5a, 0x5a]);
      d.memUnmap(a, g);
      d.memUnmap(b, g);
      d.memAddressFree(a, g);
      d.memAddressFree(b, g);
      d.memRelease(h);
    });

    it("stitches chunks into one range, data intact across every seam", () => {
      const n = 3;
      // A spacer between the chunks so they are not created back to back.
      const chunks: PhysicalHandle[] = [];
      const spacers: PhysicalHandle[] = [];
      for (let i = 0; i < n; i++) {
        chunks.push(d.memCreate(g));
        spacers.push(d.memCreate(g));
      }
      const va = reserve(n * g);
      chunks.forEach((h, i) => d.memMap(va + i * g, g, 0, h));
      d.memSetAccess(va, n * g); // one call over every mapping
      const pattern = new Uint8Array(n * g);
      for (let i = 0; i < pattern.length; i++) pattern[i] = (i % 251) ^ (i >>> 16);
      d.write(va, pattern);
      expect(firstDiff(d.read(va, n * g), pattern)).toBe(-1);
      // Each seam: bytes either side landed in the right chunk, seen through a second mapping.
      const view = reserve(g);
      for (let i = 1; i < n; i++) {
        const seam = va + i * g;
        expect(d.read(seam - 8, 16)).toEqual(pattern.subarray(i * g - 8, i * g + 8));
        d.memMap(view, g, 0, chunks[i]!);
        d.memSetAccess(view, g);
        expect(d.read(view, 8)).toEqual(pattern.subarray(i * g, i * g + 8));
        d.memUnmap(view, g);
      }
      d.memUnmap(va, n * g); // several mappings at once
      d.memAddressFree(va, n * g);
      d.memAddressFree(view, g);
      for (const h of [...chunks, ...spacers]) d.memRelease(h);
    });

    it("rejects misuse with CUDA's error codes", () => {
      const h = d.memCreate(2 * g);
      const h1 = d.memCreate(g);
      const va = reserve(4 * g);
      try {
        expect(codeOf(() => d.memCreate(g + 1))).toBe(INVALID);
        // Only whole handles map (CUDA 13 on an H200): part of a handle, an offset, or past its end.
        expect(codeOf(() => d.memMap(va, g, 0, h))).toBe(MISUSE_CODES.partialMap);
        expect(codeOf(() => d.memMap(va, g + 1, 0, h))).toBe(MISUSE_CODES.partialMap);
        expect(codeOf(() => d.memMap(va, g, g, h))).toBe(MISUSE_CODES.partialMap);
        expect(codeOf(() => d.memMap(va, 4 * g, 0, h))).toBe(MISUSE_CODES.partialMap);
        // Not asserted here: a map running past the reservation's end. Host and sim refuse it
        // (and CUDA did for a fresh reservation, see the misuse table), but an H200 once
        // accepted one that ran into address space it had handed out before (bench/RESULTS.md).
        expect(codeOf(() => d.memMap(va, 2 * g, 0, h))).toBe("no error");
        expect(codeOf(() => d.memMap(va, 2 * g, 0, h))).toBe(MISUSE_CODES.mapOverMapped);
        expect(codeOf(() => d.memMap(va + g, g, 0, h1))).toBe(MISUSE_CODES.mapOverMapped);
        expect(codeOf(() => d.memSetAccess(va, 3 * g))).toBe(INVALID); // a gap in the range
        expect(codeOf(() => d.memSetAccess(va + g, g))).toBe(INVALID); // half a mapping
        expect(codeOf(() => d.memUnmap(va + g, g))).toBe(MISUSE_CODES.unmapPartial);
        expect(codeOf(() => d.memAddressFree(va, 4 * g))).toBe(MISUSE_CODES.freeWithMappings);
        expect(codeOf(() => d.memAddressFree(va, 2 * g))).toBe(INVALID); // not the reserved size
        expect(codeOf(() => d.memFree(va))).toBe(INVALID); // not a memAlloc address
        expect(() => d.memMap(va + 2 * g, 2 * g, 0, { id: 1, size: 2 * g })).toThrow(TypeError);
      } finally {
        codeOf(() => d.memUnmap(va, 4 * g));
        codeOf(() => d.memAddressFree(va, 4 * g));
        codeOf(() => d.memRelease(h));
        codeOf(() => d.memRelease(h1));
      }
    });

    it("unmaps a range with gaps in it as CUDA does (nothing mapped there is no error)", () => {
      const h = d.memCreate(g);
      const va = reserve(3 * g);
      try {
        expect(codeOf(() => d.memUnmap(va, 3 * g))).toBe("no error"); // nothing mapped at all
        d.memMap(va + g, g, 0, h);
        d.memSetAccess(va + g, g);
        d.memset(va + g, 1, 8);
        expect(codeOf(() => d.memUnmap(va, 3 * g))).toBe("no error"); // gap, mapping, gap
        // It is gone: mapping it again works.
        d.memMap(va + g, g, 0, h);
        d.memUnmap(va + g, g);
      } finally {
        codeOf(() => d.memAddressFree(va, 3 * g));
        codeOf(() => d.memRelease(h));
      }
    });

    it("keeps a released handle's memory while it is mapped", () => {
      const h = d.memCreate(g);
      const va = reserve(g);
      d.memMap(va, g, 0, h);
      d.memSetAccess(va, g);
      d.memset(va, 9, 64);
      d.memRelease(h);
      expect([...d.read(va, 4)]).toEqual([9, 9, 9, 9]);
      expect(codeOf(() => d.memRelease(h))).toBe(INVALID);
      d.memUnmap(va, g);
      d.memAddressFree(va, g);
    });

    it("refuses a partial unmap of one mapping", () => {
      const h = d.memCreate(2 * g);
      const va = reserve(2 * g);
      d.memMap(va, 2 * g, 0, h);
      expect(codeOf(() => d.memUnmap(va, g))).toBe(INVALID);
      d.memUnmap(va, 2 * g);
      d.memAddressFree(va, 2 * g);
      d.memRelease(h);
    });

    it("answers 0 bytes and 1 PiB with a clear error and leaks nothing", () => {
      const before = d.memGetInfo().freeBytes;
      expect(codeOf(() => d.memCreate(0))).toBe(INVALID);
      expect(codeOf(() => d.memAlloc(0))).toBe(INVALID);
      expect(codeOf(() => d.memAddressReserve(0))).toBe(INVALID);
      expect([OOM, INVALID]).toContain(codeOf(() => d.memCreate(PiB)));
      expect([OOM, INVALID]).toContain(codeOf(() => d.memAddressReserve(PiB)));
      expect(codeOf(() => d.memAlloc(PiB))).toBe(OOM);
      expect(d.memGetInfo().freeBytes).toBe(before);
    });

    it("plain allocations work and are freed", () => {
      const p = d.memAlloc(3 * g + 100);
      d.memset(p, 7, 3 * g + 100);
      expect([...d.read(p + 3 * g + 96, 4)]).toEqual([7, 7, 7, 7]);
      d.memFree(p);
      expect(codeOf(() => d.memFree(p))).toBe(INVALID);
    });

    it("records, queries and waits on events over two streams, counting each call", () => {
      d.resetStats();
      const h = d.memCreate(g);
      const va = reserve(g);
      d.memMap(va, g, 0, h);
      d.memSetAccess(va, g);
      const a = d.eventCreate();
      const b = d.eventCreate();
      expect(a.id).not.toBe(b.id);
      expect(d.eventQuery(a)).toBe(true); // never recorded: complete, as in CUDA
      d.memset(va, 0x3c, g);
      d.eventRecord(a, 0);
      d.streamWaitEvent(PER_THREAD_STREAM, a); // the second stream's later work waits for the memset
      d.eventRecord(b, PER_THREAD_STREAM);
      d.eventSynchronize(b);
      expect(d.eventQuery(a)).toBe(true);
      expect(d.eventQuery(b)).toBe(true);
      expect([...d.read(va + g - 2, 2)]).toEqual([0x3c, 0x3c]);
      d.streamSynchronize(0);
      d.streamSynchronize(PER_THREAD_STREAM);
      d.ctxSynchronize();
      d.eventDestroy(a);
      d.eventDestroy(b);
      d.memUnmap(va, g);
      d.memAddressFree(va, g);
      d.memRelease(h);
      const s = d.stats();
      expect(s.calls.eventCreate).toBe(2);
      expect(s.calls.eventRecord).toBe(2);
      expect(s.calls.eventQuery).toBe(3);
      expect(s.calls.eventSynchronize).toBe(1);
      expect(s.calls.eventDestroy).toBe(2);
      expect(s.calls.streamWaitEvent).toBe(1);
      expect(s.calls.streamSynchronize).toBe(2);
      expect(s.calls.ctxSynchronize).toBe(1);
      expect(s.totalCalls).toBe(7 + 14);
    });

    it("refuses a destroyed or foreign event and a bad stream with CUDA_ERROR_INVALID_HANDLE", () => {
      const e = d.eventCreate();
      expect(codeOf(() => d.eventRecord(e, -1))).toBe(INVALID_HANDLE);
      expect(codeOf(() => d.eventRecord(e, 0.5))).toBe(INVALID_HANDLE);
      expect(codeOf(() => d.streamSynchronize(-1))).toBe(INVALID_HANDLE);
      d.eventDestroy(e);
      expect(codeOf(() => d.eventRecord(e, 0))).toBe(INVALID_HANDLE);
      expect(codeOf(() => d.eventQuery(e))).toBe(INVALID_HANDLE);
      expect(codeOf(() => d.eventSynchronize(e))).toBe(INVALID_HANDLE);
      expect(codeOf(() => d.streamWaitEvent(0, e))).toBe(INVALID_HANDLE);
      expect(codeOf(() => d.eventDestroy(e))).toBe(INVALID_HANDLE);
      const foreign = { id: e.id };
      expect(codeOf(() => d.eventRecord(foreign, 0))).toBe(INVALID_HANDLE);
      expect(codeOf(() => d.eventQuery(foreign))).toBe(INVALID_HANDLE);
      expect(codeOf(() => d.eventDestroy(foreign))).toBe(INVALID_HANDLE);
    });

    it("leaves nothing behind", () => {
      expect(d.memGetInfo().freeBytes).toBe(baselineFree);
      if (c.name === "host" || c.name === "sim") {
        expect((d as HostDriver | SimDriver).leaks()).toEqual({ reservations: 0, mappings: 0, liveBytes: 0 });
        expect((d as HostDriver | SimDriver).events.liveEvents).toBe(0);
      }
      if (c.name === "host") expect(ourMaps(reserved)).toEqual(baselineMaps);
    });
  });
});
