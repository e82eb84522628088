import { describe, expect, it } from "vitest";
import { DRIVER_CALLS, FAULT_CODES, HostDriver, SimDriver, withFaults, type DriverCall, type FaultDriver, type VmmDriver } from "@gmlake/vmm";
import { EventKind, EventLog } from "@gmlake/trace";
import { readSnapshot } from "@gmlake/torch-trace";
import { Allocator, listPolicies, replay, type Block } from "../src/index.js";
import { MiB, rng, tracePath } from "./helpers.js";

/**
 * Injected driver faults (withFaults), for every registered policy: a failed create /
 * alloc / reserve / map / set-access is rolled back, reported as out of memory (or
 * retried), the allocator serves the next request, and at teardown the driver holds
 * nothing. The full sweep is bench/fault-sweep.mjs; this is its CI-sized subset.
 */

interface SweepRow {
  policy: string;
  call: string;
  injected: number;
  survived: number;
  leaked: number;
}
interface SweepModule {
  ACQUIRE_CALLS: string[];
  syntheticLog(E: typeof EventLog, K: typeof EventKind, seed: number, ops: number): EventLog;
  runFaultSweep(
    api: unknown,
    o: {
      workloads: { name: string; log: EventLog; settings?: unknown; capacity?: number; options?: Record<string, Record<string, unknown>> }[];
      makeDriver: () => VmmDriver & { leaks(): { reservations: number; mappings: number; liveBytes: number } };
      perCall: number;
      integrity?: boolean | "full";
      checkProcMaps?: boolean;
      policies?: string[];
    },
  ): { rows: SweepRow[]; failures: { policy: string; workload: string; call: string; ordinal: number; what: string }[] };
}
const sweepPath = "../bench/fault-sweep.mjs";
const sweep = (await import(sweepPath)) as SweepModule;
const api = { listPolicies, replay, withFaults, FAULT_CODES, DRIVER_CALLS };
const POLICIES = listPolicies().map((p) => p.name);

async function smallTrace(name: string) {
  const p = tracePath(`small/${name}`);
  if (p === null) return [];
  const s = await readSnapshot(p);
  return [{ name, log: s.events, settings: s.allocatorSettings }];
}

describe("fault sweep (CI subset of bench/fault-sweep.mjs)", () => {
  it("sim: every policy, every acquire call site, first uses + mid-run + spread ordinals: all survive, 0 leaked", async () => {
    const workloads = [
      ...(await smallTrace("default.pickle")),
      ...(await smallTrace("expandable.pickle")),
      // gmlake stitches requests >= fragLimit (512 MiB by default): 2 MiB, so faults land inside stitches
      { name: "synthetic", log: sweep.syntheticLog(EventLog, EventKind, 7, 240), options: { gmlake: { fragLimit: 2 * MiB } } },
    ];
    const res = sweep.runFaultSweep(api, { workloads, makeDriver: () => new SimDriver(), perCall: 4 });
    expect(res.failures).toEqual([]);
    let injected = 0;
    for (const r of res.rows) {
      injected += r.injected;
      expect(r.leaked).toBe(0);
      expect(r.survived).toBe(r.injected);
    }
    // every policy was faulted at every acquire call it makes
    const seen = new Set(res.rows.map((r) => `${r.policy}:${r.call}`));
    for (const p of POLICIES) expect([...seen].some((s) => s.startsWith(`${p}:`))).toBe(true);
    for (const p of ["expandable", "vms", "gmlake"]) {
      for (const c of ["memCreate", "memAddressReserve", "memMap", "memSetAccess"]) expect(seen.has(`${p}:${c}`)).toBe(true);
    }
    expect(seen.has("caching:memAlloc")).toBe(true);
    expect(injected).toBeGreaterThan(150);
  });

  it("host: real mappings, integrity stamps on, /proc/self/maps back to baseline", async () => {
    const workloads = [...(await smallTrace("expandable.pickle")), { name: "synthetic", log: sweep.syntheticLog(EventLog, EventKind, 3, 90) }];
    const res = sweep.runFaultSweep(api, {
      workloads,
      makeDriver: () => new HostDriver({ capacityBytes: 8 * 2 ** 30 }),
      perCall: 2,
      integrity: true,
      checkProcMaps: true,
    });
    expect(res.failures).toEqual([]);
    expect(res.rows.reduce((a, r) => a + r.injected, 0)).toBeGreaterThan(40);
  });
});

/** Driver-side books next to the allocator's: a rolled-back failure leaves them equal. */
function booksMatch(a: Allocator, d: SimDriver | HostDriver): void {
  const c = a.ctx;
  expect(d.space.liveBytes).toBe(c.chunks.liveBytes + c.plainBytes);
  expect(d.space.mappingCount).toBe(c.chunks.mappingCount);
  expect(d.space.reservationCount).toBe(c.reservations.size + c.plainSegments.size);
  expect(a.stats.reservedBytes).toBe(c.chunks.liveBytes + c.plainBytes);
}

/** Live blocks that leave holes: 2-6 MiB blocks, every other one freed (stitch material). */
function fragment(a: Allocator, r: () => number): Block[] {
  const live: Block[] = [];
  for (let i = 0; i < 24; i++) live.push(a.malloc((2 + Math.floor(r() * 5)) * MiB));
  for (let i = live.length - 1; i >= 0; i -= 2) a.free(live.splice(i, 1)[0]!);
  return live;
}

describe("the kernel-side leak counter", () => {
  it("sees a host handle and its mapping, and their release", () => {
    const count = (sweep as unknown as { procMapsCount(): number }).procMapsCount;
    const d = new HostDriver();
    const n0 = count();
    const g = d.device.granularity.minimum;
    const h = d.memCreate(g);
    const va = d.memAddressReserve(g);
    d.memMap(va, g, 0, h);
    expect(count()).toBe(n0 + 2); // one memfd fd, one memfd mapping
    d.memUnmap(va, g);
    d.memAddressFree(va, g);
    d.memRelease(h);
    expect(count()).toBe(n0);
  });
});

describe("a fault during one request: rolled back, the same request then succeeds", () => {
  const cases: { call: DriverCall; nth: number }[] = [
    { call: "memCreate", nth: 1 },
    { call: "memAlloc", nth: 1 },
    { call: "memAddressReserve", nth: 1 },
    { call: "memMap", nth: 1 },
    { call: "memMap", nth: 2 }, // the second chunk of a run: mid-stitch / mid-growth
    { call: "memSetAccess", nth: 1 },
    { call: "memSetAccess", nth: 2 }, // gmlake: the second chunk's own set-access, after its map
  ];
  for (const policy of POLICIES) {
    for (const { call, nth } of cases) {
      it(`${policy}: ${call} #${nth} of a request fails`, () => {
        // the uses of each call that the fragmenting prologue makes (deterministic), so the fault lands after it
        const dry = withFaults(new SimDriver(), {});
        fragment(new Allocator(policy, dry, { recorder: null }), rng(11));
        const sim = new SimDriver();
        const plan = withFaults(sim, { at: [{ call, ordinal: dry.ordinals[call] + nth }] });
        const b = new Allocator(policy, plan, { checkInvariants: 1, recorder: null });
        const live = fragment(b, rng(11));
        expect(plan.injected).toEqual([]);
        let injectedAt = -1;
        // sizes that need new memory, a stitch or a growth
        for (let k = 0; k < 12 && plan.injected.length === 0; k++) {
          const size = (8 + k * 7) * MiB + 4096;
          const got = b.tryMalloc(size);
          booksMatch(b, sim);
          b.check();
          if (got !== null) live.push(got);
          if (plan.injected.length > 0) {
            injectedAt = k;
            // still usable: the very same request now succeeds
            live.push(b.malloc(size));
            booksMatch(b, sim);
            b.check();
          }
        }
        // a call kind the policy never makes (caching: no memCreate) is not faulted
        if (plan.ordinals[call] >= dry.ordinals[call] + nth) expect(injectedAt).toBeGreaterThanOrEqual(0);
        b.close(live);
        expect(sim.leaks()).toEqual({ reservations: 0, mappings: 0, liveBytes: 0 });
      });
    }
  }
});

describe("random faults over a whole replay (seeded)", () => {
  for (const policy of POLICIES) {
    it(`${policy}: 3% of acquire calls fail at random; replay continues, 0 leaked`, async () => {
      const traces = await smallTrace("train_default.pickle");
      const w = traces[0] ?? { log: sweep.syntheticLog(EventLog, EventKind, 5, 600), settings: undefined };
      for (const seed of [1, 2]) {
        const sim = new SimDriver();
        const fd = withFaults(sim, {
          random: { seed, probability: 0.03, calls: ["memCreate", "memAlloc", "memAddressReserve", "memMap", "memSetAccess"] },
        });
        const r = replay(w.log, { policy, driver: fd, settings: w.settings as never, onOom: "continue", checkInvariants: 512, recorder: null });
        expect(fd.injected.length).toBeGreaterThan(0);
        // each injected fault fails at most the request it hit
        expect(r.ooms).toBeLessThanOrEqual(fd.injected.length);
        expect(sim.leaks()).toEqual({ reservations: 0, mappings: 0, liveBytes: 0 });
      }
    });
  }
});

describe("a driver error other than out-of-memory: surfaced, rolled back, the allocator still usable", () => {
  const calls: DriverCall[] = ["memCreate", "memAlloc", "memAddressReserve", "memMap", "memSetAccess"];
  let hit = 0;
  for (const policy of POLICIES) {
    for (const call of calls) {
      for (const nth of [1, 2]) {
        it(`${policy}: ${call} #${nth} fails with CUDA_ERROR_UNKNOWN`, () => {
          const options = policy === "gmlake" ? { fragLimit: 2 * MiB } : undefined; // so that gmlake stitches
          const frag = (a: Allocator) => {
            const l: Block[] = [];
            for (let i = 0; i < 6; i++) l.push(a.malloc(12 * MiB));
            for (let i = 5; i >= 0; i -= 2) a.free(l.splice(i, 1)[0]!);
            return l;
          };
          const dry = withFaults(new SimDriver(), {});
          frag(new Allocator(policy, dry, { recorder: null, options }));
          const sim = new SimDriver();
          const fd = withFaults(sim, { at: [{ call, ordinal: dry.ordinals[call] + nth, code: "CUDA_ERROR_UNKNOWN" }] });
          const a = new Allocator(policy, fd, { recorder: null, checkInvariants: 1, options });
          const live = frag(a);
          let threw: unknown = null;
          for (let k = 0; k < 10 && fd.injected.length === 0; k++) {
            try {
              const b = a.tryMalloc((30 + 9 * k) * MiB);
              if (b) live.push(b);
            } catch (e) {
              threw = e;
            }
          }
          if (fd.injected.length === 0) return; // the policy never makes this call here (caching: no memCreate)
          hit++;
          expect((threw as { code?: string } | null)?.code).toBe("CUDA_ERROR_UNKNOWN");
          booksMatch(a, sim);
          a.check();
          live.push(a.malloc(30 * MiB));
          a.close(live);
          expect(sim.leaks()).toEqual({ reservations: 0, mappings: 0, liveBytes: 0 });
        });
      }
    }
  }
  it("reached the faulted call in most cases", () => expect(hit).toBeGreaterThanOrEqual(20));
});
