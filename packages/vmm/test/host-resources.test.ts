import { execFileSync } from "node:child_process";
import { readFileSync, readdirSync, readlinkSync, statSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

import { HostDriver, defaultHostCapacity } from "../src/index.js";
import { codeOf } from "./helpers.js";

const g = 2 * 1024 * 1024;
const dist = join(import.meta.dirname, "../dist/index.js");

/** What the kernel says this process holds of the host driver: memfd mappings and fds. */
function held(): { maps: number; fds: number; fdPaths: string[] } {
  const maps = readFileSync("/proc/self/maps", "utf8").split("\n").filter((l) => l.includes("memfd:gmlake-vmm")).length;
  const fdPaths: string[] = [];
  for (const f of readdirSync("/proc/self/fd")) {
    try {
      if (readlinkSync(`/proc/self/fd/${f}`).includes("memfd:gmlake-vmm")) fdPaths.push(`/proc/self/fd/${f}`);
    } catch {
      // readdir's own fd
    }
  }
  return { maps, fds: fdPaths.length, fdPaths };
}

describe("host driver resources", () => {
  it("holds one fd however many chunks are live, and none when idle", () => {
    const d = new HostDriver({ capacityBytes: 4096 * g });
    const before = held();
    const hs = Array.from({ length: 2000 }, () => d.memCreate(g));
    expect(held().fds - before.fds).toBe(1);
    for (const h of hs) d.memRelease(h);
    expect(held().fds - before.fds).toBe(0);
    d.close();
  });

  it("a released chunk's pages go back at once (punched), a mapped one's at its last unmap", () => {
    const d = new HostDriver({ capacityBytes: 64 * g });
    const keep = d.memCreate(g); // keeps the memfd open, so its block count is observable
    const h = d.memCreate(4 * g);
    const va = d.memAddressReserve(4 * g);
    d.memMap(va, 4 * g, 0, h);
    d.memSetAccess(va, 4 * g);
    d.memset(va, 0xab, 4 * g);
    const file = held().fdPaths.at(-1)!;
    const blocksOf = () => statSync(file).blocks * 512;
    expect(blocksOf()).toBeGreaterThanOrEqual(4 * g);
    d.memRelease(h); // still mapped: the data stays, as on CUDA
    expect(d.read(va + 4 * g - 1, 1)[0]).toBe(0xab);
    expect(blocksOf()).toBeGreaterThanOrEqual(4 * g);
    d.memUnmap(va, 4 * g);
    expect(blocksOf()).toBeLessThan(g);
    // the range is reused, and reads as zeroes like fresh memory
    const h2 = d.memCreate(4 * g);
    d.memMap(va, 4 * g, 0, h2);
    d.memSetAccess(va, 4 * g);
    expect(d.read(va, 16).every((b) => b === 0)).toBe(true);
    d.memUnmap(va, 4 * g);
    d.memRelease(h2);
    d.memRelease(keep);
    d.memAddressFree(va, 4 * g);
    d.close();
  });

  it("close() gives back everything a caller left (chunks, mappings, reservations, allocations): 0 mappings, 0 fds", () => {
    const before = held();
    const d = new HostDriver({ capacityBytes: 64 * g });
    const va = d.memAddressReserve(8 * g);
    for (let i = 0; i < 4; i++) {
      const h = d.memCreate(g);
      d.memMap(va + i * g, g, 0, h);
      if (i % 2 === 0) d.memRelease(h); // released while mapped
    }
    d.memSetAccess(va, 2 * g);
    d.memCreate(g); // never mapped, never released
    d.memAlloc(12345);
    d.memAddressReserve(g);
    expect(held().maps - before.maps).toBeGreaterThanOrEqual(1); // adjacent ranges of the memfd share a VMA
    expect(d.leaks().mappings).toBe(4);
    d.close();
    expect(held().maps).toBe(before.maps);
    expect(held().fds).toBe(before.fds);
    expect(d.leaks()).toEqual({ reservations: 0, mappings: 0, liveBytes: 0 });
    expect(d.fds).toBe(0);
    // and it is closed: a typed error, not a crash or a silent success
    expect(codeOf(() => d.memCreate(g))).toBe("CUDA_ERROR_DEINITIALIZED");
    expect(codeOf(() => d.read(va, 1))).toBe("CUDA_ERROR_DEINITIALIZED");
    d.close(); // twice is fine
  });

  it("the default capacity is half the memory free now, not all of RAM", () => {
    const d = new HostDriver();
    expect(d.device.totalBytes).toBe(defaultHostCapacity(g));
    expect(d.device.totalBytes).toBeLessThanOrEqual(Math.ceil(readMemAvailable() / 2));
    expect(d.device.totalBytes % g).toBe(0);
    d.close();
  });

  it.skipIf(!statSafe(dist))("under `ulimit -n 64`, thousands of chunks fit; an exhausted fd table is its own error, not an OOM", () => {
    const script = `
      import { openSync } from "node:fs";
      import { HostDriver } from ${JSON.stringify(dist)};
      const d = new HostDriver({ capacityBytes: 8192 * ${g} });
      const hs = [];
      for (let i = 0; i < 5000; i++) hs.push(d.memCreate(${g}));
      for (const h of hs) d.memRelease(h);
      const fds = [];
      try { for (;;) fds.push(openSync("/dev/null", "r")); } catch (e) { if (e.code !== "EMFILE") throw e; }
      let code = "no error";
      try { d.memCreate(${g}); } catch (e) { code = e.code + " | " + e.message; }
      console.log(JSON.stringify({ chunks: hs.length, code }));`;
    const out = execFileSync("sh", ["-c", `ulimit -n 64 && "${process.execPath}" --input-type=module -e '${script.replace(/'/g, `'"'"'`)}'`], { encoding: "utf8" });
    const r = JSON.parse(out) as { chunks: number; code: string };
    expect(r.chunks).toBe(5000);
    expect(r.code).toMatch(/^HOST_ERROR_TOO_MANY_OPEN_FILES \| hostMemCreate\(.*memfd_create: Too many open files/);
  });

  it.skipIf(!statSafe(dist))("under `ulimit -v`, a reservation past the limit is the machine's limit (HOST_ERROR_ADDRESS_SPACE), not an OOM; one that fits works", () => {
    const script = `
      import { HostDriver } from ${JSON.stringify(dist)};
      const d = new HostDriver({ capacityBytes: 64 * ${g} });
      const small = d.memAddressReserve(64 * ${g});
      let code = "no error";
      try { d.memAddressReserve(256 * 2 ** 30); } catch (e) { code = e.code + " | " + e.message; }
      console.log(JSON.stringify({ small: small > 0, code }));`;
    const out = execFileSync("sh", ["-c", `ulimit -v 8000000 && "${process.execPath}" --input-type=module -e '${script.replace(/'/g, `'"'"'`)}'`], { encoding: "utf8" });
    const r = JSON.parse(out) as { small: boolean; code: string };
    expect(r.small).toBe(true);
    expect(r.code).toMatch(/^HOST_ERROR_ADDRESS_SPACE \| cuMemAddressReserve\(size=274877906944.*address-space limit \(ulimit -v\) of 8192000000 bytes/);
  });
});

function readMemAvailable(): number {
  const m = /MemAvailable:\s+(\d+) kB/.exec(readFileSync("/proc/meminfo", "utf8"));
  return m ? Number(m[1]) * 1024 : Infinity;
}

function statSafe(p: string): boolean {
  try {
    statSync(p);
    return true;
  } catch {
    return false;
  }
}
