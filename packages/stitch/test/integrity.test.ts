import { describe, expect, it } from "vitest";
import { DriverAdaptor, HostDriver, SimDriver, type VmmDriver } from "@gmlake/vmm";
import { EventKind, EventLog } from "@gmlake/trace";
import { readSnapshot } from "@gmlake/torch-trace";
import { Allocator, listPolicies, replay, type Block } from "../src/index.js";
import { MiB, rng, tracePath } from "./helpers.js";

/**
 * Integrity on real memory (host driver: memfd + mmap): every allocation is stamped with
 * a pattern derived from its id and checked at its free, over real traces and every
 * policy: 0 mismatches, and the bytes read back are counted. Then the checker is shown to
 * catch corruption written through a second mapping of the same physical chunk.
 * The larger runs (every public trace) are `node bench/fault-sweep.mjs --integrity`.
 */

const POLICIES = listPolicies().map((p) => p.name);
/** gmlake stitches only requests >= fragLimit (512 MiB by default): lower it so these small runs stitch. */
const STITCHY: Record<string, Record<string, unknown> | undefined> = { gmlake: { fragLimit: 2 * MiB } };

/** Counts the bytes the integrity checker reads back (its check at each free). */
class ReadCounter extends DriverAdaptor {
  bytesRead = 0;
  override read(address: number, size: number): Uint8Array {
    this.bytesRead += size;
    return super.read(address, size);
  }
}

async function small(name: string) {
  const p = tracePath(`small/${name}`);
  return p === null ? null : await readSnapshot(p);
}

/** Allocations that stitch: many 2-6 MiB blocks, every other one freed, then large requests. */
function fragmentingLog(seed: number): EventLog {
  const r = rng(seed);
  const l = new EventLog(512);
  const s = l.streamId(0);
  const live: [number, number][] = [];
  let addr = 0x100000;
  let t = 0;
  const alloc = (size: number) => {
    l.push(EventKind.alloc, addr, size, s, 0, t++);
    live.push([addr, size]);
    addr += size + 512;
  };
  const free = (k: number) => {
    const [a, size] = live.splice(k, 1)[0]!;
    l.push(EventKind.freeCompleted, a, size, s, 0, t++);
  };
  for (let i = 0; i < 10; i++) alloc((11 + Math.floor(r() * 4)) * MiB - Math.floor(r() * 4096));
  for (let k = live.length - 1; k >= 0; k -= 2) free(k);
  for (let i = 0; i < 6; i++) {
    if (live.length > 0 && r() < 0.3) free(Math.floor(r() * live.length));
    else alloc((20 + Math.floor(r() * 12)) * MiB + Math.floor(r() * 100000));
  }
  while (live.length) free(live.length - 1);
  return l;
}

describe("integrity on the host driver: 0 mismatches", () => {
  const cases: [string, "full" | true][] = [
    ["expandable.pickle", "full"],
    ["default.pickle", true],
    ["default_end.pickle", true],
    ["expandable_end.pickle", true],
    ["train_default.pickle", true],
    ["train_expandable.pickle", true],
  ];
  for (const policy of POLICIES) {
    it(`${policy}: small traces (full on one, ends + seams on the rest) and a stitching mix (full)`, async () => {
      let checked = 0;
      let bytes = 0;
      const runs: { log: EventLog; settings?: never; mode: "full" | true }[] = [{ log: fragmentingLog(3), mode: "full" }];
      for (const [name, mode] of cases) {
        const s = await small(name);
        if (s) runs.push({ log: s.events, settings: s.allocatorSettings as never, mode });
      }
      for (const run of runs) {
        const host = new HostDriver({ capacityBytes: 64 * 2 ** 30 });
        const d = new ReadCounter(host);
        const r = replay(run.log, { policy, driver: d, settings: run.settings, options: STITCHY[policy], integrity: run.mode, onOom: "continue", checkInvariants: 1024, recorder: null });
        expect(r.integrityErrors).toBe(0);
        expect(r.integrityChecked).toBeGreaterThan(0);
        checked += r.integrityChecked;
        bytes += d.bytesRead;
        expect(host.leaks()).toEqual({ reservations: 0, mappings: 0, liveBytes: 0 });
      }
      console.log(`integrity host ${policy}: ${checked} blocks checked, ${bytes} bytes read back, 0 mismatches`);
      expect(bytes).toBeGreaterThan(checked * 8);
    });
  }
});

/** Writes `data` at `addr` of a live block through a second mapping of its physical chunk. */
function corruptThroughAlias(a: Allocator, d: VmmDriver, addr: number, data: Uint8Array): void {
  const t = a.ctx.chunks.translate(addr);
  if (t === null) {
    d.write(addr, data); // plain memAlloc'd memory (caching): its one mapping
    return;
  }
  const c = t.chunk;
  const va = d.memAddressReserve(c.size);
  d.memMap(va, c.size, 0, c.handle);
  d.memSetAccess(va, c.size);
  d.write(va + t.offset, data);
  d.memUnmap(va, c.size);
  d.memAddressFree(va, c.size);
}

describe("the integrity checker detects corruption", () => {
  for (const driverName of ["host", "sim"] as const) {
    for (const policy of POLICIES) {
      for (const mode of ["full", true] as const) {
        it(`${driverName} ${policy} ${mode === "full" ? "full" : "ends+seams"}: a byte written through another mapping is a mismatch`, () => {
          const d: HostDriver | SimDriver = driverName === "host" ? new HostDriver() : new SimDriver();
          const a = new Allocator(policy, d, { integrity: mode, recorder: null, options: STITCHY[policy] });
          const ic = a.integrity!;
          // fragment, so that gmlake and vms hand out stitched blocks with seams
          const held: Block[] = [];
          for (let i = 0; i < 6; i++) held.push(a.malloc(12 * MiB));
          for (let i = held.length - 1; i >= 0; i -= 2) a.free(held.splice(i, 1)[0]!);
          const victim = a.malloc(30 * MiB);
          const clean = a.malloc(5 * MiB);
          // a block left alone checks clean
          a.free(clean);
          expect(ic.errors).toBe(0);
          // corrupt the victim's first byte (stamped in both modes) and, where it has one, the byte after a seam
          const first = d.read(victim.addr, 1);
          corruptThroughAlias(a, d, victim.addr, Uint8Array.of(first[0]! ^ 0xff));
          const seam = victim.seams?.[0];
          if (seam !== undefined) {
            const at = victim.addr + seam;
            corruptThroughAlias(a, d, at, Uint8Array.of(d.read(at, 1)[0]! ^ 0x5a));
          }
          const checkedBefore = ic.checked;
          a.free(victim);
          expect(ic.checked).toBe(checkedBefore + 1);
          expect(ic.errors).toBe(1);
          expect(ic.messages[0]).toMatch(/lost its stamp/);
          a.close(held);
          expect(d.leaks()).toEqual({ reservations: 0, mappings: 0, liveBytes: 0 });
        });
      }
    }
  }

  it("gmlake: a stitched block's seam alone, corrupted, is caught in ends+seams mode", () => {
    const d = new HostDriver();
    const a = new Allocator("gmlake", d, { integrity: true, recorder: null, options: STITCHY.gmlake });
    const held: Block[] = [];
    for (let i = 0; i < 6; i++) held.push(a.malloc(12 * MiB));
    for (let i = held.length - 1; i >= 0; i -= 2) a.free(held.splice(i, 1)[0]!);
    const v = a.malloc(30 * MiB);
    expect(v.seams?.length ?? 0).toBeGreaterThan(0); // it is stitched
    const at = v.addr + v.seams![0]! - 1; // the last byte before the seam
    corruptThroughAlias(a, d, at, Uint8Array.of(d.read(at, 1)[0]! ^ 1));
    a.free(v);
    expect(a.integrity!.errors).toBe(1);
    a.close(held);
  });
});
