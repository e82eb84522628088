import { describe, expect, it } from "vitest";
import { SimDriver } from "@gmlake/vmm";
import { readSnapshot } from "@gmlake/torch-trace";
import { replay, type ReplayResult } from "../src/index.js";
import { tracePath } from "./helpers.js";

/**
 * The public traces replayed with gmlake (defaults: fragLimit 512 MiB, reuseLimit 10,
 * defragLevel 0, autoGC 1000 GiB, 2 MiB chunks) with invariants on, next to caching from
 * the same run. On these traces stitching helps: gmlake must never reserve more than
 * PyTorch's caching allocator (opt1b_generate barely fragments: equal there).
 */
const TRACES = ["gpt2_ft", "gpt2_ft_ckpt", "llama1b_fsdp", "llama1b_lora", "opt1b_generate"];
const GiB = 2 ** 30;
const fmt = (r: ReplayResult) =>
  `reserved ${(r.peakReservedBytes / GiB).toFixed(2)} GiB, allocated ${(r.peakAllocatedBytes / GiB).toFixed(2)} GiB, util ${r.utilization.toFixed(3)}, ` +
  `driver ${(r.driverTimeUs / 1000).toFixed(0)} ms, calls ${Object.entries(r.driverCalls)
    .filter(([, v]) => v > 0)
    .map(([k, v]) => `${k}=${v}`)
    .join(" ")}`;

describe("gmlake on the public traces (sim driver)", () => {
  for (const name of TRACES) {
    const path = tracePath(`${name}.pickle.gz`);
    it.skipIf(path === null)(name, async () => {
      const snap = await readSnapshot(path!);
      const run = (policy: string, checkInvariants: number | false) =>
        replay(snap.events, { policy, driver: new SimDriver(), settings: snap.allocatorSettings, checkInvariants, recorder: null });
      const g = run("gmlake", 4096); // full structure check every 4096 operations, and at the end; teardown checked
      const c = run("caching", false);
      console.log(`${name}: gmlake ${fmt(g)} | counters ${JSON.stringify(g.counters)}\n${name}: caching ${fmt(c)}`);
      expect(g.oom).toBeNull();
      expect(g.peakReservedBytes).toBeGreaterThanOrEqual(g.peakAllocatedBytes);
      // allocated is charged in whole 2 MiB chunks: a little above PyTorch's rounding, never below
      expect(g.peakAllocatedBytes).toBeGreaterThanOrEqual(c.peakAllocatedBytes);
      expect(g.peakAllocatedBytes).toBeLessThan(c.peakAllocatedBytes * 1.02);
      expect(g.peakReservedBytes).toBeLessThanOrEqual(c.peakReservedBytes);
      // reserved is physical chunks (+ small-pool segments): stitching never creates memory
      expect(g.driverCalls.memCreate).toBe(g.counters.chunksCreated);
      expect(g.driverCalls.memMap).toBe(g.counters.chunksCreated + g.counters.stitchedChunks);
      if (name !== "opt1b_generate") {
        // requests >= 512 MiB that no single pBlock fits are stitched, and stitching pays off
        expect(g.counters.stitches).toBeGreaterThan(0);
        expect(g.peakReservedBytes).toBeLessThan(c.peakReservedBytes * 0.96);
      }
    });
  }
});

describe("gmlake under a device capacity", () => {
  const path = tracePath("llama1b_lora.pickle.gz");
  it.skipIf(path === null)("llama1b_lora in 12 GiB: caching runs out of memory, gmlake fits (defragLevel 0 and 1)", async () => {
    const snap = await readSnapshot(path!);
    const run = (policy: string, options: Record<string, unknown> = {}) =>
      replay(snap.events, { policy, options, driver: new SimDriver(), settings: snap.allocatorSettings, capacity: 12 * GiB, recorder: null, checkInvariants: policy === "gmlake" ? 8192 : false });
    expect(run("caching").oom).not.toBeNull();
    for (const defragLevel of [0, 1]) {
      const g = run("gmlake", { defragLevel });
      expect(g.oom).toBeNull();
      expect(g.counters.stitches).toBeGreaterThan(0);
      expect(g.peakReservedBytes).toBeLessThanOrEqual(12 * GiB);
    }
  });
});
