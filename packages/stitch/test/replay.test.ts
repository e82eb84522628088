import { describe, expect, it } from "vitest";
import { createDriver, SimDriver } from "@gmlake/vmm";
import { computeStats, EventKind, EventLog } from "@gmlake/trace";
import { Allocator, planTrace, replay } from "../src/index.js";
import { MiB } from "./helpers.js";

/** A tiny trace language: [kind, addr, size]. */
function log(events: [number, number, number][], stream = 0): EventLog {
  const l = new EventLog(events.length);
  const s = l.streamId(stream);
  events.forEach(([k, a, n], i) => l.push(k as EventKind, a, n, s, 0, i));
  return l;
}
const { alloc, freeRequested: req, freeCompleted: done, segmentFree, segmentAlloc, oom } = EventKind;

describe("replay", () => {
  it("releases memory at free_completed, not free_requested", () => {
    const l = log([
      [alloc, 0x1000, 30 * MiB],
      [req, 0x1000, 30 * MiB],
      [alloc, 0x2000, 30 * MiB], // cannot reuse the pending block: a second segment
      [done, 0x1000, 30 * MiB],
      [alloc, 0x3000, 30 * MiB], // reuses the first
      [req, 0x2000, 30 * MiB],
      [done, 0x2000, 30 * MiB],
      [req, 0x3000, 30 * MiB],
      [done, 0x3000, 30 * MiB],
    ]);
    const r = replay(l, { policy: "caching", driver: new SimDriver(), checkInvariants: 1 });
    expect(r.peakReservedBytes).toBe(60 * MiB);
    expect(r.peakAllocatedBytes).toBe(60 * MiB);
    expect(r.peakRequestedBytes).toBe(60 * MiB);
    expect(r.utilization).toBe(1);
    expect(r.driverCalls.memAlloc).toBe(2);
    expect(r.driverCallsSecondHalf.memAlloc).toBe(0);
    expect(r.events).toBe(9);
    expect(r.eventsPerSecond).toBeGreaterThan(0);
    expect(r.log!.length).toBeGreaterThan(9);
  });

  it("reports the first out-of-memory under a capacity, and stops or continues", () => {
    const l = log([
      [alloc, 0x1000, 40 * MiB],
      [alloc, 0x2000, 40 * MiB],
      [alloc, 0x3000, 40 * MiB],
      [req, 0x1000, 40 * MiB],
      [done, 0x1000, 40 * MiB],
      [alloc, 0x4000, 40 * MiB],
      [req, 0x3000, 40 * MiB], // the failed alloc's free is skipped
      [done, 0x3000, 40 * MiB],
    ]);
    const stop = replay(l, { policy: "caching", driver: new SimDriver(), capacity: 100 * MiB, checkInvariants: 1 });
    expect(stop.oom).toMatchObject({ eventIndex: 2, requestBytes: 40 * MiB, allocatedBytes: 80 * MiB, reservedBytes: 80 * MiB });
    expect(stop.events).toBe(2);
    const go = replay(l, { policy: "caching", driver: new SimDriver(), capacity: 100 * MiB, onOom: "continue", checkInvariants: 1 });
    expect(go.oom!.eventIndex).toBe(2);
    expect(go.ooms).toBe(1);
    expect(go.events).toBe(8);
  });

  it("replays a recorded oom as an allocation that fails again", () => {
    const l = log([
      [alloc, 0x1000, 40 * MiB],
      [oom, 0, 2 ** 41],
      [req, 0x1000, 40 * MiB],
      [done, 0x1000, 40 * MiB],
    ]);
    const r = replay(l, { policy: "expandable", driver: new SimDriver(), checkInvariants: 1 });
    expect(r.recordedOoms).toEqual({ reproduced: 1, served: 0 });
    expect(r.oom).toBeNull();
    expect(r.numAllocRetries).toBe(1);
  });

  it("finds empty_cache calls: segment frees no malloc explains", () => {
    const l = log([
      [segmentAlloc, 0x100000, 20 * MiB],
      [alloc, 0x100000, 4 * MiB],
      [req, 0x100000, 4 * MiB],
      [done, 0x100000, 4 * MiB],
      [segmentFree, 0x100000, 20 * MiB], // empty_cache
      [alloc, 0x900000, 4 * MiB],
      [segmentFree, 0x200000, 20 * MiB], // a malloc's release-and-retry: followed by its segment_alloc
      [segmentAlloc, 0x300000, 60 * MiB],
      [alloc, 0x300000, 60 * MiB],
    ]);
    const plan = planTrace(l);
    expect(plan.emptyCalls).toBe(1);
    expect([...plan.emptyCache.keys()].filter((i) => plan.emptyCache[i] === 1)).toEqual([4]);
    const r = replay(l, { policy: "caching", driver: new SimDriver(), checkInvariants: 1 });
    expect(r.emptyCacheCalls).toBe(1);
    expect(r.driverCalls.memFree).toBe(1);
    expect(r.driverCalls.memAlloc).toBe(3);
  });

  it("counts frees of allocations the trace does not hold", () => {
    const l = log([
      [req, 0x5000, 100],
      [done, 0x5000, 100],
      [alloc, 0x1000, 100],
    ]);
    const r = replay(l, { policy: "caching", driver: new SimDriver() });
    expect(r.unmatchedFrees).toBe(2);
  });

  it("stamps and checks every allocation on the host driver", () => {
    const events: [number, number, number][] = [];
    for (let i = 0; i < 40; i++) events.push([alloc, 0x1000 * (i + 1), (i * 977_777) % (24 * MiB) + 1]);
    for (let i = 0; i < 40; i += 2) events.push([req, 0x1000 * (i + 1), 0], [done, 0x1000 * (i + 1), 0]);
    for (let i = 40; i < 60; i++) events.push([alloc, 0x1000 * (i + 1), (i * 577_777) % (6 * MiB) + 1]);
    const driver = createDriver("host", { capacityBytes: 2048 * MiB });
    for (const policy of ["caching", "expandable"]) {
      const r = replay(log(events), { policy, driver, integrity: true, checkInvariants: 1 });
      expect(r.integrityErrors).toBe(0);
      expect(r.integrityChecked).toBe(60); // 20 frees + 40 live blocks freed at teardown
      expect(driver.memGetInfo().freeBytes).toBe(driver.memGetInfo().totalBytes);
    }
    driver.close();
  });

  it("checks every byte in full integrity mode, and catches a corrupted block", () => {
    const driver = createDriver("host", { capacityBytes: 512 * MiB });
    const a = new Allocator("caching", driver, { integrity: "full", checkInvariants: 1 });
    const x = a.malloc(3 * MiB + 5);
    const y = a.malloc(1000);
    driver.write(x.addr + MiB, new Uint8Array([1, 2, 3])); // a stray write in the middle
    a.free(x);
    a.free(y);
    expect(a.integrity!.errors).toBe(1);
    expect(a.integrity!.checked).toBe(2);
    a.close();
    // ends-only mode misses the middle but sees the ends
    const b = new Allocator("caching", driver, { integrity: true });
    const z = b.malloc(3 * MiB);
    driver.write(z.addr + z.size - 1, new Uint8Array([0xee ^ driver.read(z.addr + z.size - 1, 1)[0]!]));
    b.free(z);
    expect(b.integrity!.errors).toBe(1);
    b.close();
    driver.close();
  });

  it("runs one allocator per device", () => {
    const l = new EventLog();
    const s = l.streamId(0);
    l.push(alloc, 0x1000, 30 * MiB, s, 0, 0);
    l.push(alloc, 0x1000, 50 * MiB, s, 1, 1);
    l.push(req, 0x1000, 50 * MiB, s, 1, 2);
    l.push(done, 0x1000, 50 * MiB, s, 1, 3);
    l.push(alloc, 0x2000, 10 * MiB, s, 1, 4);
    const r = replay(l, { policy: "caching", driver: new SimDriver(), checkInvariants: 1 });
    expect(r.perDevice).toEqual([
      { device: 0, peakRequestedBytes: 30 * MiB, peakAllocatedBytes: 30 * MiB, peakReservedBytes: 30 * MiB },
      { device: 1, peakRequestedBytes: 50 * MiB, peakAllocatedBytes: 50 * MiB, peakReservedBytes: 50 * MiB },
    ]);
    // separate memories: the sums of the per-device peaks, as computeStats sums them
    expect([r.peakRequestedBytes, r.peakReservedBytes]).toEqual([80 * MiB, 80 * MiB]);
    expect(r.peakRequestedBytes).toBe(computeStats(l).peakRequestedBytes);
    const only0 = replay(l, { policy: "caching", driver: new SimDriver(), device: 0 });
    expect(only0.perDevice.length).toBe(1);
  });

  it("rejects a call without a driver", () => {
    expect(() => replay(new EventLog(), { policy: "caching" } as never)).toThrow(expect.objectContaining({ code: "BAD_ARGUMENT" }));
    expect(() => replay({} as never, { policy: "caching", driver: new SimDriver() })).toThrow(/Expected an EventLog/);
    expect(() => replay(new EventLog(), { policy: "caching", driver: new SimDriver(), capacity: -5 })).toThrow(/capacity/);
    expect(() => replay(new EventLog(), { policy: "nope", driver: new SimDriver() })).toThrow(expect.objectContaining({ code: "UNKNOWN_POLICY" }));
  });
});
