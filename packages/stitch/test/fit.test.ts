import { describe, expect, it } from "vitest";
import { readSnapshot } from "@gmlake/torch-trace";
import { SimDriver } from "@gmlake/vmm";
import { FIT_RESOLUTION, memoryAtPeak, memoryState, privatePoolTags, replay, smallestCapacity } from "../src/index.js";
import { tracePath } from "./helpers.js";

const small = tracePath("small/train_default.pickle");
const medium = tracePath("gpt2_ft_stacks.pickle.gz");
const POLICIES = ["caching", "expandable", "gmlake", "vms"];

async function load(p: string) {
  const s = await readSnapshot(p);
  return { s, base: { driver: new SimDriver(), settings: s.allocatorSettings, pools: privatePoolTags(s.events, s.segments) } };
}

describe.skipIf(!small || !medium)("smallestCapacity on real traces", () => {
  // Two traces x every policy: the whole trace runs at the capacity found, and one 2 MiB
  // step below it the replay runs out of memory.
  it.each([
    ["small/train_default.pickle", small],
    ["gpt2_ft_stacks.pickle.gz", medium],
  ])("%s: runs at the smallest capacity, out of memory 2 MiB below", async (_name, p) => {
    const { s, base } = await load(p!);
    for (const policy of POLICIES) {
      const o = { ...base, policy };
      const free = replay(s.events, { ...o, recorder: null });
      const f = smallestCapacity(s.events, o);
      expect(f.smallestCapacityBytes, policy).not.toBeNull();
      const c = f.smallestCapacityBytes!;
      expect(c % FIT_RESOLUTION).toBe(0);
      expect(f.resolutionBytes).toBe(FIT_RESOLUTION);
      expect(c).toBeGreaterThanOrEqual(free.peakRequestedBytes);
      expect(c).toBeLessThanOrEqual(Math.ceil(free.peakReservedBytes / FIT_RESOLUTION) * FIT_RESOLUTION);
      const at = replay(s.events, { ...o, driver: new SimDriver(), capacity: c, recorder: null });
      expect(at.oom, `${policy} at ${c}`).toBeNull();
      expect(at.events).toBe(s.events.length);
      const below = replay(s.events, { ...o, driver: new SimDriver(), capacity: c - FIT_RESOLUTION, recorder: null });
      expect(below.oom, `${policy} at ${c - FIT_RESOLUTION}`).not.toBeNull();
      expect(f.failsAtBytes).toBe(c - FIT_RESOLUTION);
      // A capacity between two multiples of 2 MiB behaves as the lower one: every reservation is a multiple of 2 MiB.
      const odd = replay(s.events, { ...o, driver: new SimDriver(), capacity: c - 1, recorder: null });
      expect(odd.oom).not.toBeNull();
      expect(f.replays).toBeLessThanOrEqual(40);
    }
  });

  it("a capped search still returns a capacity that fits", async () => {
    const { s, base } = await load(small!);
    const f = smallestCapacity(s.events, { ...base, policy: "caching", maxReplays: 3 });
    expect(f.replays).toBeLessThanOrEqual(3);
    if (f.smallestCapacityBytes !== null) {
      const r = replay(s.events, { ...base, driver: new SimDriver(), policy: "caching", capacity: f.smallestCapacityBytes, recorder: null });
      expect(r.oom).toBeNull();
    }
  });
});

describe.skipIf(!medium)("memoryAtPeak", () => {
  it.each(POLICIES)("%s: the books at the tightest moment of the peak add up", async (policy) => {
    const { s, base } = await load(medium!);
    const full = replay(s.events, { ...base, policy, recorder: null });
    let stats: { reserved: number; active: number; allocated: number; requested: number } | null = null;
    let state = null as ReturnType<typeof memoryState> | null;
    replay(s.events, {
      ...base,
      driver: new SimDriver(),
      policy,
      recorder: null,
      until: full.peakReservedEventIndex + 1,
      probe: (p) => {
        const e = p.engines.find((x) => x !== undefined)!;
        stats = { reserved: e.stats.reservedBytes, active: e.stats.activeBytes, allocated: e.stats.allocatedBytes, requested: e.stats.requestedBytes };
        state = memoryState(p.engines, p.liveBlocks, p.events - 1);
      },
    });
    const m = memoryAtPeak(s.events, { ...base, driver: new SimDriver(), policy })!;
    expect(m).toEqual(state);
    // The state is taken at the peak: reserved there is the replay's peak reserved.
    expect(stats!.reserved).toBe(full.peakReservedBytes);
    expect(m.all.reservedBytes).toBe(stats!.reserved);
    expect(m.all.activeBytes).toBe(stats!.active);
    expect(m.all.allocatedBytes).toBe(stats!.allocated);
    expect(m.all.requestedBytes).toBe(stats!.requested);
    // pools partition the whole
    for (const k of ["allocatedBytes", "reservedBytes", "inactiveSplitBytes", "allocations", "segments"] as const) {
      expect(m.largePool[k] + m.smallPool[k]).toBe(m.all[k]);
    }
    // every reserved byte is either used by a live block or in a free piece (no double counting of stitched ranges)
    const free = m.freeBySize.reduce((n, b) => n + b.bytes, 0);
    expect(free).toBe(m.all.inactiveSplitBytes + m.releasableBytes);
    expect(free).toBeLessThanOrEqual(m.all.reservedBytes - m.all.requestedBytes);
    expect(free).toBeGreaterThanOrEqual(0);
    expect(free).toBe(m.all.reservedBytes - m.all.activeBytes);
  });
});

describe("smallestCapacity with several devices", () => {
  it("is the capacity every GPU needs: the largest of the per-device answers", async () => {
    const { fileURLToPath } = await import("node:url");
    const p = fileURLToPath(new URL("../../torch-trace/test/fixtures/multi_device.p4.pickle", import.meta.url));
    const s = await readSnapshot(p);
    expect(s.devices).toEqual([0, 2]);
    const o = { policy: "caching", driver: new SimDriver(), settings: s.allocatorSettings };
    const all = smallestCapacity(s.events, o);
    const per = [0, 2].map((device) => smallestCapacity(s.events, { ...o, device }).smallestCapacityBytes!);
    expect(all.smallestCapacityBytes).toBe(Math.max(...per));
    // every device runs at that capacity, its own answer - 2 MiB does not
    for (const [i, device] of [0, 2].entries()) {
      expect(replay(s.events, { ...o, driver: new SimDriver(), device, capacity: all.smallestCapacityBytes!, recorder: null }).oom).toBeNull();
      expect(replay(s.events, { ...o, driver: new SimDriver(), device, capacity: per[i]! - FIT_RESOLUTION, recorder: null }).oom).not.toBeNull();
    }
  });
});
