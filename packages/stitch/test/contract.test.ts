import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { cudaAvailable, createDriver, SimDriver, withCapacity, type VmmDriver } from "@gmlake/vmm";
import { Allocator, listPolicies, type Block } from "../src/index.js";
import "./example-policy.js";
import { MiB, rng } from "./helpers.js";

/**
 * One contract for every registered policy (new ones join through the registry): random
 * mixes of sizes and streams, two-phase frees, empty_cache, invariants on at every
 * operation, integrity on where memory exists, and a teardown that leaves nothing behind.
 */
const drivers: { name: string; make: () => VmmDriver; integrity: boolean; skip?: boolean }[] = [
  { name: "sim", make: () => new SimDriver(), integrity: false },
  { name: "host", make: () => createDriver("host", { capacityBytes: 8 * 1024 * MiB }), integrity: true },
  { name: "cuda", make: () => createDriver("cuda"), integrity: true, skip: !cudaAvailable() },
];

function size(r: () => number): number {
  const x = r();
  if (x < 0.35) return 1 + Math.floor(r() * 4096);
  if (x < 0.6) return Math.floor(r() * MiB) + 1;
  if (x < 0.85) return MiB + Math.floor(r() * 19 * MiB);
  if (x < 0.97) return 20 * MiB + Math.floor(r() * 120 * MiB);
  return r() < 0.5 ? 0 : 10 * MiB + 1;
}

function mix(a: Allocator, seed: number, ops: number): void {
  const r = rng(seed);
  const streams = [0, 0x5a5a00, 0x7b7b00];
  const live: Block[] = [];
  const pending: Block[] = [];
  for (let i = 0; i < ops; i++) {
    const x = r();
    if (x < 0.5 || live.length === 0) {
      const b = a.tryMalloc(size(r), streams[Math.floor(r() * streams.length)]!);
      if (b !== null) live.push(b);
    } else if (x < 0.9) {
      const j = Math.floor(r() * live.length);
      const b = live[j]!;
      live[j] = live[live.length - 1]!;
      live.pop();
      a.freeRequested(b);
      if (r() < 0.8) a.freeCompleted(b);
      else pending.push(b);
    } else if (x < 0.97) {
      while (pending.length > 0) a.freeCompleted(pending.pop()!);
    } else {
      a.emptyCache();
    }
  }
  a.check();
  for (const b of pending) a.freeCompleted(b);
  a.close(live);
}

describe.each(listPolicies().map((p) => p.name))("policy %s", (policy) => {
  describe.each(drivers)("on $name", ({ make, integrity, skip }) => {
    it.skipIf(!!skip)("serves random mixes with invariants and integrity, and tears down to nothing", () => {
      const driver = make();
      // Free memory before: a real GPU never reports all of it free (the context takes some).
      const before = driver.memGetInfo().freeBytes;
      try {
        for (const seed of [1, 2, 3]) {
          const a = new Allocator(policy, driver, { checkInvariants: 1, integrity });
          mix(a, seed * 7919, 400);
          if (a.integrity) {
            expect(a.integrity.errors, a.integrity.messages.join("; ")).toBe(0);
            expect(a.integrity.checked).toBeGreaterThan(50);
          }
          expect(a.stats.allocatedBytes).toBe(0);
          expect(a.stats.activeBytes).toBe(0);
          expect(a.stats.reservedBytes).toBe(0);
          expect(a.stats.peakReservedBytes).toBeGreaterThanOrEqual(a.stats.peakAllocatedBytes);
          expect(driver.memGetInfo().freeBytes).toBe(before);
        }
      } finally {
        driver.close();
      }
    });

    it.skipIf(!!skip || integrity)("keeps its invariants over any op sequence (fast-check, shrinking)", () => {
      const op = fc.oneof(
        fc.record({ t: fc.constant("alloc" as const), size: fc.oneof(fc.nat(4096), fc.nat(3 * MiB), fc.integer({ min: MiB, max: 90 * MiB })), s: fc.nat(2) }),
        fc.record({ t: fc.constant("free" as const), i: fc.nat(), late: fc.boolean() }),
        fc.record({ t: fc.constant("flush" as const) }),
        fc.record({ t: fc.constant("empty" as const) }),
      );
      fc.assert(
        fc.property(fc.array(op, { maxLength: 120 }), fc.boolean(), (ops, tight) => {
          const driver = withCapacity(make(), tight ? 160 * MiB : 4096 * MiB);
          const a = new Allocator(policy, driver, { checkInvariants: 1 });
          const live: Block[] = [];
          const pending: Block[] = [];
          for (const o of ops) {
            if (o.t === "alloc") {
              const b = a.tryMalloc(o.size, o.s * 0x1000);
              if (b !== null) live.push(b);
            } else if (o.t === "free" && live.length > 0) {
              const b = live.splice(o.i % live.length, 1)[0]!;
              a.freeRequested(b);
              if (o.late) pending.push(b);
              else a.freeCompleted(b);
            } else if (o.t === "flush") {
              for (const b of pending.splice(0)) a.freeCompleted(b);
            } else if (o.t === "empty") {
              a.emptyCache();
            }
          }
          a.check();
          for (const b of pending) a.freeCompleted(b);
          a.close(live);
          expect(a.stats.reservedBytes).toBe(0);
          expect(driver.liveBytes).toBe(0);
        }),
        { numRuns: 40 },
      );
    });

    it.skipIf(!!skip)("returns null on out-of-memory under a capacity, then recovers", () => {
      const driver = withCapacity(make(), 256 * MiB);
      const a = new Allocator(policy, driver, { checkInvariants: 1, integrity });
      const live: Block[] = [];
      let b: Block | null;
      while ((b = a.tryMalloc(30 * MiB)) !== null) live.push(b);
      expect(live.length).toBeGreaterThan(0);
      expect(live.length).toBeLessThanOrEqual(9);
      expect(a.stats.numOoms).toBe(1);
      expect(() => a.malloc(300 * MiB)).toThrow(expect.objectContaining({ code: "OUT_OF_MEMORY" }));
      for (const x of live.splice(0)) a.free(x);
      // everything cached must be releasable to serve a request of another shape
      const big = a.tryMalloc(200 * MiB);
      expect(big).not.toBeNull();
      a.close([big!]);
      expect(driver.liveBytes).toBe(0);
      driver.close();
    });
  });
});
