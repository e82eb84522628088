import { describe, expect, it } from "vitest";
import { createDriver, SimDriver, withCapacity, type VmmDriver } from "@gmlake/vmm";
import { readSnapshot } from "@gmlake/torch-trace";
import { Allocator, BUILTIN_POLICIES, poolStreamKey, replay, smallestCapacity, VmsAllocator, type Block } from "../src/index.js";
import { MiB, rng, tracePath } from "./helpers.js";

const host = (capacityBytes = 2048 * MiB): VmmDriver => createDriver("host", { capacityBytes });
const calls = (d: VmmDriver) => d.stats().calls;

describe("vms policy", () => {
  it("serves a request that fits no hole by moving whole free handles out of the holes, not by creating memory", () => {
    const d = host();
    try {
      // 2 MiB handles: every 4 MiB block owns two whole handles.
      const a = new Allocator("vms", d, { options: { maxHandleBytes: 2 * MiB }, checkInvariants: 1, integrity: "full" });
      const blocks: Block[] = [];
      for (let i = 0; i < 10; i++) blocks.push(a.malloc(4 * MiB));
      expect(a.stats.reservedBytes).toBe(40 * MiB);
      // Five 4 MiB holes between live blocks; none fits 12 MiB.
      for (let i = 0; i < 10; i += 2) a.free(blocks[i]!);
      const creates = calls(d).memCreate;
      const big = a.malloc(12 * MiB);
      const c = (a.instance as VmsAllocator).counters();
      expect(c.moved).toBe(6);
      expect(calls(d).memCreate).toBe(creates);
      expect(calls(d).memUnmap).toBe(6);
      expect(a.stats.reservedBytes).toBe(40 * MiB);
      expect(a.stats.peakReservedBytes).toBe(40 * MiB);
      // The stitched block spans non-adjacent handles: its seams are known to the integrity checker.
      expect(big.seams?.length).toBeGreaterThan(0);
      a.check();
      const live = [big, ...blocks.filter((_, i) => i % 2 === 1)];
      for (const b of live) a.free(b);
      // every byte of every live block kept its stamp through the moves
      expect(a.integrity!.errors, a.integrity!.messages.join("; ")).toBe(0);
      expect(a.integrity!.checked).toBe(11);
      a.close();
      expect(d.memGetInfo().freeBytes).toBe(d.memGetInfo().totalBytes);
    } finally {
      d.close();
    }
  });

  it("serves mallocCached from its pools only: a fit, or null with no driver call and nothing counted", () => {
    const d = new SimDriver();
    try {
      const a = new Allocator("vms", d, { options: { maxHandleBytes: 2 * MiB }, checkInvariants: 1 });
      expect(a.servesCached).toBe(true);
      const x = a.malloc(8 * MiB);
      const y = a.malloc(8 * MiB);
      a.free(x);
      const before = d.stats().totalCalls;
      const allocs = a.stats.allocations;
      // 12 MiB would need a grow or handles moved: refused, untouched
      expect(a.tryMallocCached(12 * MiB)).toBeNull();
      expect(d.stats().totalCalls).toBe(before);
      expect(a.stats.allocations).toBe(allocs);
      expect(a.stats.numOoms).toBe(0);
      // 6 MiB fits the freed 8 MiB block: served, counted like a malloc
      const z = a.tryMallocCached(6 * MiB)!;
      expect(z.addr).toBe(x.addr);
      expect(d.stats().totalCalls).toBe(before);
      expect(a.stats.allocations).toBe(allocs + 1);
      // a small request carves a small segment from free mapped memory when it can
      expect(a.tryMallocCached(1000)).not.toBeNull();
      expect(d.stats().totalCalls).toBe(before);
      a.check();
      a.close([y, z]);
    } finally {
      d.close();
    }
  });

  it("fills an unmapped hole inside a free run with handles moved from elsewhere (fewest new bytes)", () => {
    const d = new SimDriver();
    const a = new Allocator("vms", d, { options: { maxHandleBytes: 2 * MiB }, checkInvariants: 1 });
    const x = a.malloc(8 * MiB);
    const y = a.malloc(8 * MiB);
    const z = a.malloc(8 * MiB);
    a.free(y);
    // 10 MiB fits no free block: y's four handles move to the end, one 2 MiB handle is new.
    const w = a.malloc(10 * MiB);
    let k = (a.instance as VmsAllocator).counters();
    expect(k.moved).toBe(4);
    expect(a.stats.reservedBytes).toBe(26 * MiB);
    a.free(x);
    a.free(z);
    a.free(w);
    // Free: [0,8) mapped, [8,16) unmapped, [16,34) mapped, then unmapped. 24 MiB at 0 would
    // map the 8 MiB hole; ending at 34 (from 10) only 6 MiB of it, equal to starting at 16
    // (6 MiB past 34): the lower address wins; three handles move from [0,8): no new memory.
    const creates = calls(d).memCreate;
    const all = a.malloc(24 * MiB);
    k = (a.instance as VmsAllocator).counters();
    expect(all.addr).toBe(x.addr + 10 * MiB);
    expect(k.moved).toBe(7);
    expect(calls(d).memCreate).toBe(creates);
    expect(a.stats.peakReservedBytes).toBe(26 * MiB);
    a.close([all]);
    expect(d.leaks()).toEqual({ reservations: 0, mappings: 0, liveBytes: 0 });
  });

  it("reuses a block freed on another stream without a memory call (the new stream waits on an event of the old), and only when crossStream is on", () => {
    for (const crossStream of [true, false]) {
      const d = new SimDriver();
      const a = new Allocator("vms", d, { options: { crossStream }, checkInvariants: 1 });
      const b = a.malloc(64 * MiB, 1);
      a.free(b);
      const n = d.stats();
      const c = a.malloc(32 * MiB, 2);
      const s = d.stats();
      const made = s.totalCalls - n.totalCalls;
      const k = (a.instance as VmsAllocator).counters();
      if (crossStream) {
        expect(made).toBe(3);
        expect([s.calls.eventCreate - n.calls.eventCreate, s.calls.eventRecord - n.calls.eventRecord, s.calls.streamWaitEvent - n.calls.streamWaitEvent]).toEqual([1, 1, 1]);
        expect(c.stream).toBe(1); // the block keeps its stream: its free goes back to stream 1's arena
        expect(a.stats.numCrossStreamReuses).toBe(1);
        expect(k.crossStreamHits).toBe(1);
      } else {
        expect(made).toBeGreaterThan(0);
        expect(k.crossStreamHits).toBe(0);
      }
      a.close([c]);
      expect(d.leaks()).toEqual({ reservations: 0, mappings: 0, liveBytes: 0 });
    }
  });

  it("keeps private pools (negative stream keys) apart: no cross-stream hit into or out of them, no handle moved out of them", () => {
    const d = new SimDriver();
    const a = new Allocator("vms", d, { options: { maxHandleBytes: 2 * MiB }, checkInvariants: 1 });
    const key = poolStreamKey(1, 0);
    const p = a.malloc(16 * MiB, key);
    a.free(p);
    const q = a.malloc(8 * MiB, 0);
    expect(q.addr + q.size <= p.addr || q.addr >= p.addr + 16 * MiB).toBe(true);
    const big = a.malloc(40 * MiB, 0);
    const k = (a.instance as VmsAllocator).counters();
    expect(k.crossStreamHits).toBe(0);
    expect(k.moved).toBe(0);
    // the private pool's block is still mapped where a captured graph expects it
    const n = d.stats().totalCalls;
    const p2 = a.malloc(16 * MiB, key);
    expect(p2.addr).toBe(p.addr);
    expect(d.stats().totalCalls).toBe(n);
    a.close([q, big, p2]);
    expect(d.leaks()).toEqual({ reservations: 0, mappings: 0, liveBytes: 0 });
  });

  it("mallocHeld serves from free handles moved into place and never reserves a byte more (a pool's reserve)", () => {
    const d = new SimDriver();
    const a = new Allocator("vms", d, { options: { maxHandleBytes: 2 * MiB }, checkInvariants: 1 });
    const blocks: Block[] = [];
    for (let i = 0; i < 10; i++) blocks.push(a.malloc(4 * MiB));
    for (let i = 0; i < 10; i += 2) a.free(blocks[i]!); // five 4 MiB holes: 20 MiB free in whole handles
    const key = poolStreamKey(1, 0);
    const creates = calls(d).memCreate;
    // more than is free: nothing moves, nothing is made, no out-of-memory is counted
    expect(a.tryMallocHeld(24 * MiB, key)).toBeNull();
    expect((a.instance as VmsAllocator).counters().moved).toBe(0);
    expect(a.stats.numOoms).toBe(0);
    // what is free: the pool's block is stitched from the holes' handles
    const r = a.tryMallocHeld(12 * MiB, key)!;
    expect(r.size).toBe(12 * MiB);
    expect((a.instance as VmsAllocator).counters().moved).toBe(6);
    expect(calls(d).memCreate).toBe(creates);
    expect(a.stats.reservedBytes).toBe(40 * MiB);
    expect(a.stats.peakReservedBytes).toBe(40 * MiB);
    // a plain malloc of what is left grows as before
    const more = a.malloc(24 * MiB, key);
    expect(calls(d).memCreate).toBeGreaterThan(creates);
    a.close([r, more, ...blocks.filter((_, i) => i % 2 === 1)]);
    expect(d.leaks()).toEqual({ reservations: 0, mappings: 0, liveBytes: 0 });
  });

  it("packs small requests into small segments carved from the arena's free memory", () => {
    const d = new SimDriver();
    const a = new Allocator("vms", d, { checkInvariants: 1 });
    const big = a.malloc(40 * MiB);
    a.free(big);
    const n = d.stats().totalCalls;
    const smalls: Block[] = [];
    for (let i = 0; i < 64; i++) smalls.push(a.malloc(1000 + i * 3000));
    expect(d.stats().totalCalls - n).toBe(0); // all from the 40 MiB already mapped
    for (const s of smalls) a.free(s);
    expect((a.instance as VmsAllocator).counters().smallSegments).toBe(0);
    a.close();
  });


  it("makes the room beyond a request at the arena's open end as one handle (minTailHandleBytes), so the next requests make no call", () => {
    const d = new SimDriver();
    const a = new Allocator("vms", d, { options: { minTailHandleBytes: 64 * MiB }, checkInvariants: 1 });
    const first = a.malloc(16 * MiB);
    // one 64 MiB handle (one create, one map, one set-access), not four of the request's 16 MiB
    expect(calls(d).memCreate).toBe(1);
    expect(calls(d).memSetAccess).toBe(1);
    expect(a.stats.reservedBytes).toBe(64 * MiB);
    const rest = [a.malloc(2 * MiB), a.malloc(2 * MiB), a.malloc(16 * MiB), a.malloc(28 * MiB)];
    expect(calls(d).memCreate).toBe(1);
    // past the room: the next open-end grow is one handle again
    rest.push(a.malloc(20 * MiB));
    expect(calls(d).memCreate).toBe(2);
    expect(a.stats.reservedBytes).toBe(128 * MiB);
    for (const b of [first, ...rest]) a.free(b);
    a.check();
    a.close();
  });
  it("stays correct under random mixes with tiny handles, several streams and a capacity (invariants at every op, host integrity)", () => {
    for (const [seed, maxHandle] of [
      [11, 2],
      [12, 4],
      [13, 64],
    ] as const) {
      const d = withCapacity(host(), 512 * MiB);
      const a = new Allocator("vms", d, { options: { maxHandleBytes: maxHandle * MiB }, checkInvariants: 1, integrity: true });
      const r = rng(seed);
      const live: Block[] = [];
      const pending: Block[] = [];
      const streams = [0, 7, 9];
      let ooms = 0;
      for (let i = 0; i < 1500; i++) {
        const x = r();
        if (x < 0.52 || live.length === 0) {
          const u = r();
          const size = u < 0.3 ? 1 + Math.floor(r() * 600_000) : u < 0.8 ? MiB + Math.floor(r() * 24 * MiB) : 20 * MiB + Math.floor(r() * 100 * MiB);
          const b = a.tryMalloc(size, streams[Math.floor(r() * 3)]!);
          if (b === null) ooms++;
          else live.push(b);
        } else if (x < 0.95) {
          const j = Math.floor(r() * live.length);
          const b = live[j]!;
          live[j] = live[live.length - 1]!;
          live.pop();
          a.freeRequested(b);
          if (r() < 0.85) a.freeCompleted(b);
          else pending.push(b);
        } else if (x < 0.99) {
          while (pending.length > 0) a.freeCompleted(pending.pop()!);
        } else {
          a.emptyCache();
        }
        expect(a.stats.reservedBytes).toBeLessThanOrEqual(512 * MiB);
      }
      a.check();
      const k = (a.instance as VmsAllocator).counters();
      expect(k.moved).toBeGreaterThan(0);
      expect(ooms).toBeGreaterThan(0);
      for (const b of pending) a.freeCompleted(b);
      a.close(live);
      expect(a.integrity!.errors, a.integrity!.messages.join("; ")).toBe(0);
      expect(d.memGetInfo().freeBytes).toBe(512 * MiB);
      d.close();
    }
  });

  it("under a budget below the device's memory makes handles of budget / budgetHandleDivisor; without one, as before", () => {
    const creates = (d: VmmDriver, options: Record<string, unknown>) => {
      const a = new Allocator("vms", d, { options, checkInvariants: 1, recorder: null });
      a.malloc(40 * MiB);
      const n = calls(d).memCreate;
      a.close();
      return n;
    };
    // a 16 GiB budget on an H200-sized sim: 1 MiB shares, so granules of 2 MiB
    expect(creates(withCapacity(new SimDriver(), 16384 * MiB), {})).toBe(20);
    // without it the capacity's own share (16 GiB / 2048: 8 MiB handles)
    expect(creates(withCapacity(new SimDriver(), 16384 * MiB), { budgetHandleDivisor: 0 })).toBe(5);
    // the device's own memory is no budget: one 40 MiB handle
    expect(creates(new SimDriver(), {})).toBe(1);
    // a 16 GiB device: its capacity share only (8 MiB handles), no budget cap
    expect(creates(new SimDriver({ capacityBytes: 16384 * MiB }), {})).toBe(5);
  });

  it("peekCached answers a small request whose segment went back whole: where the new segment lands", () => {
    const a = new Allocator("vms", host(), { checkInvariants: 1, recorder: null });
    a.malloc(8 * MiB); // the arena holds memory beyond the small segment
    const s = a.malloc(1 * MiB); // a small segment of its own
    a.free(s); // wholly free: back to the arena, the small pool is empty
    const p = a.peekCached(1 * MiB, 0);
    expect(p).not.toBeNull();
    expect(a.malloc(1 * MiB).addr).toBe(p);
    a.close();
  });

  it("never carves a small segment out of another stream's free block (its small blocks would skip the stream wait)", () => {
    const d = host();
    const a = new Allocator("vms", d, { options: { crossStream: true }, checkInvariants: 1, recorder: null });
    const other = a.malloc(2 * MiB, 7); // one small segment's worth, freed on stream 7
    a.malloc(4 * MiB, 7); // keeps it a block of its own
    a.free(other);
    const waits = calls(d).streamWaitEvent;
    const small = a.malloc(512, 0);
    expect((a.instance as VmsAllocator).counters().crossStreamHits).toBe(0);
    expect(small.addr === other.addr).toBe(false);
    expect(calls(d).streamWaitEvent).toBe(waits);
    a.close();
  });

  it("under pressure releases a free handle that fits no gap and creates one sized to the gap, where moving it could not serve the request", () => {
    // No handle caps from the capacity: the shapes below are exact.
    const run = () => {
      const d = withCapacity(new SimDriver(), 1024 * MiB);
      const a = new Allocator("vms", d, { options: { capacityHandleDivisor: 0, headroomHandleDivisor: 0, budgetHandleDivisor: 0 }, checkInvariants: 1, recorder: null });
      const p = a.malloc(40 * MiB); // [0, 40): one 40 MiB handle
      const base = p.addr;
      const m = a.malloc(10 * MiB); // [40, 50)
      a.malloc(4 * MiB); // [50, 54)
      const x = a.malloc(36 * MiB); // [54, 90): the handle that will fit no gap
      a.malloc(4 * MiB); // [90, 94) keeps x's block bounded
      a.free(p);
      a.emptyCache(); // [0, 40) unmapped: a hole bounded by m
      a.free(m);
      a.free(x);
      expect(a.stats.reservedBytes).toBe(54 * MiB);
      // The budget drops to 2 MiB above what is held (a lowered memory fraction).
      d.setCapacity(56 * MiB);
      // 44 MiB fits no free block; the window needing fewest new bytes is [6, 50): 34 new
      // bytes in a hole whose room ends at 40, too small for the 36 MiB handle.
      const b = a.tryMalloc(44 * MiB);
      return { a, d, b, base };
    };
    const { a, b, d, base } = run();
    const c = (a.instance as VmsAllocator).counters();
    expect(b).not.toBeNull();
    expect(c.released).toBe(1);
    expect(c.releasedBytes).toBe(36 * MiB);
    expect(c.moved).toBe(0);
    // served in the window with fewest new bytes, not at the open end by moving every free
    // handle there (what the out-of-memory retry does: 54 MiB held)
    expect(b!.addr - base).toBe(6 * MiB);
    expect(a.stats.reservedBytes).toBe(52 * MiB); // 54 - 36 + 34
    expect(a.stats.numOoms).toBe(0);
    a.check();
    a.close();
    expect(d.liveBytes).toBe(0);
  });

  it("keeps handles a small share of a tight capacity, so freed memory next to live blocks can serve a large request", () => {
    // 6 MiB blocks, every other one freed, then a request of more than what is free in
    // whole handles plus the headroom unless the freed blocks' handles can move.
    const serve = (capacityHandleDivisor: number) => {
      const d = new SimDriver({ capacityBytes: 256 * MiB });
      // the open end makes 48 MiB handles (8 blocks each) unless the capacity caps them
      const a = new Allocator("vms", d, { options: { capacityHandleDivisor, headroomHandleDivisor: 0, minTailHandleBytes: 48 * MiB }, checkInvariants: 1, recorder: null });
      const blocks: Block[] = [];
      for (let i = 0; i < 40; i++) blocks.push(a.malloc(6 * MiB));
      for (let i = 0; i < 40; i += 2) a.free(blocks[i]!);
      const big = a.tryMalloc(130 * MiB);
      const out = { served: big !== null, reserved: a.stats.reservedBytes, moved: (a.instance as VmsAllocator).counters().moved };
      a.close();
      return out;
    };
    // capacity / 2048 is under the granularity: 2 MiB handles, the 60 freed ones move, 10 MiB are new
    expect(serve(2048)).toEqual({ served: true, reserved: 250 * MiB, moved: 60 });
    // no cap: every 48 MiB handle holds live blocks, nothing can move, and 16 MiB of headroom is short
    expect(serve(0).served).toBe(false);
  });

  it("reserves an arena for every stream however many there are, and takes the documented largest arenaBytes", () => {
    // 112 TiB of address space on the modelled H200 held 408 arenas of 2 x its memory
    const d = new SimDriver();
    const a = new Allocator("vms", d, { recorder: null });
    for (let s = 1; s <= 2000; s++) a.malloc(2 * MiB, s);
    expect(a.stats.numOoms).toBe(0);
    a.close();
    expect(d.leaks()).toEqual({ reservations: 0, mappings: 0, liveBytes: 0 });
    const big = new Allocator("vms", new SimDriver(), { options: { arenaBytes: 2 ** 47 }, recorder: null });
    for (let s = 1; s <= 3; s++) big.free(big.malloc(64 * MiB, s));
    expect(big.stats.numOoms).toBe(0);
    big.close();
  });

  it("rejects bad options with a coded error", () => {
    expect(() => new Allocator("vms", new SimDriver(), { options: { maxHandleBytes: 3 * MiB } })).toThrow(
      expect.objectContaining({ code: "BAD_OPTION" }),
    );
    expect(() => new Allocator("vms", new SimDriver(), { options: { smallSegmentBytes: 1024 } })).toThrow(
      expect.objectContaining({ code: "BAD_OPTION" }),
    );
  });
});

describe("vms on recorded traces", () => {
  const small = tracePath("small/train_default.pickle");
  it.skipIf(!small)("replays small/train_default with invariants at every op, stamps checked on the sim, under 1.02 x peak", async () => {
    const snap = await readSnapshot(small!);
    const d = new SimDriver();
    const r = replay(snap.events, { policy: "vms", driver: d, settings: snap.allocatorSettings, checkInvariants: 1, integrity: true });
    expect(r.oom).toBeNull();
    expect(r.integrityErrors).toBe(0);
    expect(r.integrityChecked).toBeGreaterThan(100);
    expect(d.leaks()).toEqual({ reservations: 0, mappings: 0, liveBytes: 0 });
    const cap = replay(snap.events, { policy: "vms", driver: new SimDriver(), settings: snap.allocatorSettings, capacity: Math.floor(1.02 * r.peakAllocatedBytes) });
    expect(cap.oom).toBeNull();
    const exp = replay(snap.events, { policy: "expandable", driver: new SimDriver(), settings: snap.allocatorSettings });
    expect(r.utilization).toBeGreaterThanOrEqual(exp.utilization);
  });

  const fits = [tracePath("small/train_default.pickle"), tracePath("llama1b_lora.pickle.gz")].filter((p): p is string => p !== null);
  it.skipIf(fits.length === 0)("needs the smallest capacity of every built-in policy, within 1% of the peak requested bytes and below its own peak without one", async () => {
    for (const path of fits) {
      const snap = await readSnapshot(path);
      const smallest = (policy: string) => smallestCapacity(snap.events, { policy, driver: new SimDriver(), settings: snap.allocatorSettings }).smallestCapacityBytes!;
      const vms = smallest("vms");
      for (const p of BUILTIN_POLICIES) if (p.name !== "vms") expect(vms, `${path}: vms vs ${p.name}`).toBeLessThanOrEqual(smallest(p.name));
      const free = replay(snap.events, { policy: "vms", driver: new SimDriver(), settings: snap.allocatorSettings, recorder: null });
      expect(vms).toBeLessThanOrEqual(1.01 * free.peakRequestedBytes);
      // below its own peak without a capacity: the handles it makes for a tight capacity trap less
      expect(vms).toBeLessThan(free.peakReservedBytes);
    }
  }, 120_000);

  const lora = tracePath("llama1b_lora.pickle.gz");
  it.skipIf(!lora)("beats expandable on llama1b_lora with no driver call in the second half (periodic full invariant checks)", async () => {
    const snap = await readSnapshot(lora!);
    const r = replay(snap.events, { policy: "vms", driver: new SimDriver(), settings: snap.allocatorSettings, checkInvariants: 40000 });
    const exp = replay(snap.events, { policy: "expandable", driver: new SimDriver(), settings: snap.allocatorSettings, recorder: null });
    expect(r.utilization).toBeGreaterThanOrEqual(0.97);
    expect(r.utilization).toBeGreaterThan(exp.utilization);
    expect(Object.values(r.driverCallsSecondHalf).every((v) => v === 0)).toBe(true);
    const dur = snap.events.timeUs[snap.events.length - 1]! - snap.events.timeUs[0]!;
    expect(r.driverTimeUs).toBeLessThan(0.01 * dur);
  }, 60_000);
});
