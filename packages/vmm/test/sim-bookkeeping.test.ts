/**
 * The sim's mapping bookkeeping (address-space.ts: sorted parallel arrays, a live window
 * [head, length) advanced by front unmaps, a cached last reservation) against a naive
 * model, over random map / unmap / set-access / free sequences: every call must succeed
 * or fail exactly as the model says, and the live mappings must agree after each call.
 */
import { describe, expect, it } from "vitest";
import { SimDriver, VmmError, type PhysicalHandle } from "../src/index.js";

const G = 2 * 1024 * 1024;

function rng(seed: number): (n: number) => number {
  let s = seed >>> 0;
  return (n) => {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    return (s >>> 8) % n;
  };
}

interface ModelMapping {
  start: number;
  end: number;
  handle: PhysicalHandle;
}

describe("sim bookkeeping", () => {
  it("agrees with a naive model over random map/unmap/setAccess sequences", () => {
    for (const seed of [7, 8, 9]) {
      const rand = rng(seed);
      const d = new SimDriver({ capacityBytes: 4096 * G });
      const handles = [1, 1, 2, 3].flatMap((k) => Array.from({ length: 24 }, () => d.memCreate(k * G)));
      const reservations = Array.from({ length: 3 }, () => ({ base: 0, size: 96 * G, maps: [] as ModelMapping[] }));
      for (const r of reservations) r.base = d.memAddressReserve(r.size);
      const problems: string[] = [];
      const outcome = (f: () => void): string => {
        try {
          f();
          return "ok";
        } catch (e) {
          return e instanceof VmmError ? e.code : String(e);
        }
      };
      for (let op = 0; op < 6000; op++) {
        const r = reservations[rand(reservations.length)]!;
        const kind = rand(10);
        if (kind < 5) {
          // map a whole handle somewhere (often free space, sometimes overlapping)
          const h = handles[rand(handles.length)]!;
          const at = r.base + rand(r.size / G - h.size / G + 1) * G;
          const overlaps = r.maps.some((m) => m.start < at + h.size && at < m.end);
          const want = overlaps ? "CUDA_ERROR_INVALID_VALUE" : "ok";
          const got = outcome(() => d.memMap(at, h.size, 0, h));
          if (got !== want) problems.push(`op ${op}: map ${at - r.base} got ${got}, want ${want}`);
          if (got === "ok") r.maps.push({ start: at, end: at + h.size, handle: h });
        } else if (kind < 8) {
          // unmap a range: usually the leftmost mappings (a run torn down left to right)
          const sorted = [...r.maps].sort((a, b) => a.start - b.start);
          let from: number;
          let to: number;
          if (sorted.length > 0 && rand(3) > 0) {
            const k = rand(Math.min(3, sorted.length)) + 1;
            from = sorted[0]!.start;
            to = sorted[k - 1]!.end;
          } else {
            from = r.base + rand(r.size / G) * G;
            to = Math.min(r.base + r.size, from + (1 + rand(6)) * G);
          }
          const cuts = r.maps.some((m) => (m.start < from && m.end > from) || (m.start < to && m.end > to));
          const want = cuts ? "CUDA_ERROR_INVALID_VALUE" : "ok";
          const got = outcome(() => d.memUnmap(from, to - from));
          if (got !== want) problems.push(`op ${op}: unmap [${from - r.base}, ${to - r.base}) got ${got}, want ${want}`);
          if (got === "ok") r.maps = r.maps.filter((m) => m.end <= from || m.start >= to);
        } else {
          // set access over a range: fine only when mappings tile it exactly
          const from = r.base + rand(r.size / G) * G;
          const to = Math.min(r.base + r.size, from + (1 + rand(4)) * G);
          let cursor = from;
          for (const m of [...r.maps].sort((a, b) => a.start - b.start)) {
            if (m.end <= cursor || m.start >= to) continue;
            if (m.start !== cursor) break;
            cursor = m.end;
          }
          const want = cursor === to ? "ok" : "CUDA_ERROR_INVALID_VALUE";
          const got = outcome(() => d.memSetAccess(from, to - from));
          if (got !== want) problems.push(`op ${op}: setAccess [${from - r.base}, ${to - r.base}) got ${got}, want ${want}`);
        }
        const live = reservations.reduce((n, x) => n + x.maps.length, 0);
        if (d.space.mappingCount !== live) problems.push(`op ${op}: ${d.space.mappingCount} mappings, model ${live}`);
        if (problems.length > 0) break;
      }
      expect(problems).toEqual([]);
      // Freeing a reservation with mappings fails; unmapped whole, it frees.
      for (const r of reservations) {
        expect(outcome(() => d.memAddressFree(r.base, r.size))).toBe(r.maps.length > 0 ? "CUDA_ERROR_INVALID_VALUE" : "ok");
        if (r.maps.length > 0) {
          d.memUnmap(r.base, r.size);
          d.memAddressFree(r.base, r.size);
        }
      }
      for (const h of handles) d.memRelease(h);
      expect(d.leaks()).toEqual({ reservations: 0, mappings: 0, liveBytes: 0 });
    }
  });

  it("reads and writes through mappings left after the front of a run was unmapped", () => {
    const d = new SimDriver();
    const n = 80;
    const hs = Array.from({ length: n }, () => d.memCreate(G));
    const va = d.memAddressReserve(n * G);
    hs.forEach((h, i) => d.memMap(va + i * G, G, 0, h));
    d.memSetAccess(va, n * G);
    hs.forEach((_, i) => d.memset(va + i * G, i + 1, 16));
    for (let i = 0; i < 70; i++) d.memUnmap(va + i * G, G); // past the point where the dead prefix is cut off
    expect(d.space.mappingCount).toBe(10);
    for (let i = 70; i < n; i++) expect(d.read(va + i * G, 16)).toEqual(new Uint8Array(16).fill(i + 1));
    expect(() => d.read(va + 69 * G, 1)).toThrow(/is not mapped/);
    // The freed front maps again, and its bytes are the handle's.
    d.memMap(va, G, 0, hs[3]!);
    d.memSetAccess(va, G);
    expect(d.read(va, 16)).toEqual(new Uint8Array(16).fill(4));
    expect(() => d.memSetAccess(va, 2 * G)).toThrow(/is not mapped/);
    d.memUnmap(va, n * G);
    d.memAddressFree(va, n * G);
    for (const h of hs) d.memRelease(h);
    expect(d.leaks()).toEqual({ reservations: 0, mappings: 0, liveBytes: 0 });
  });
});
