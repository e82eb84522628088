import { describe, expect, it } from "vitest";

import type { Block } from "@gmlake/stitch";

import { PoolError, PrivatePools, STATUS_CAPTURE } from "../src/private-pools.js";

const MiB = 2 ** 20;

/** An engine that hands out blocks from a bump pointer (room: `limit` bytes) and logs every take and give. */
function engine(limit = 1024 * MiB) {
  let next = 2 ** 40;
  let held = 0;
  const log: string[] = [];
  return {
    log,
    held: () => held,
    take(size: number, key: number, capturing: boolean): Block | null {
      if (held + size > limit) return null;
      if (capturing && size > limit / 2) throw new PoolError(STATUS_CAPTURE, "would unmap");
      const b = { addr: next, size, stream: key } as unknown as Block;
      next += size + 64 * MiB;
      held += size;
      log.push(`take ${size / MiB} ${key}${capturing ? " capturing" : ""}`);
      return b;
    },
    give(b: Block): void {
      held -= b.size;
      log.push(`give ${b.size / MiB}`);
    },
  };
}

describe("PrivatePools", () => {
  it("carves a pool's blocks out of its engine blocks and merges them back when freed", () => {
    const e = engine();
    const p = new PrivatePools(e);
    const g = p.begin(1, 0, true, 4 * MiB);
    expect(e.log).toEqual([`take 4 ${-(2 ** 32 + 1)}`]); // the pool's own stream key
    const a = p.alloc(g, MiB, true);
    const b = p.alloc(g, MiB - 100, true); // rounded to 512 bytes
    expect(b - a).toBe(MiB);
    expect(p.free(a)).toBe(true);
    expect(p.free(b)).toBe(true);
    expect(p.alloc(g, 4 * MiB, true)).toBe(a); // merged: the whole block again
    expect(p.free(12345)).toBe(false); // not a pool's
  });

  it("keeps a pool's freed memory to itself; during a capture it grows by the engine's capturing take", () => {
    const e = engine(64 * MiB);
    const p = new PrivatePools(e);
    const g1 = p.begin(1, 0, true, 2 * MiB);
    const x = p.alloc(g1, 2 * MiB, true);
    p.free(x);
    p.end(g1);
    const g2 = p.begin(2, 0, true, 0);
    const calls = e.log.length;
    const y = p.alloc(g2, 2 * MiB, true); // its own block, taken during the capture, not pool 1's freed one
    expect(y).not.toBe(x);
    expect(e.log.slice(calls)).toEqual([`take 2 ${-(2 * 2 ** 32 + 1)} capturing`]); // pool 2's own stream key
    // what the engine refuses during the capture reaches the caller as its status, nothing carved
    const errOf = (size: number): PoolError => {
      try {
        p.alloc(g2, size, true);
      } catch (caught) {
        return caught as PoolError;
      }
      throw new Error("no error");
    };
    expect(errOf(40 * MiB).status).toBe(STATUS_CAPTURE);
    const oom = errOf(128 * MiB);
    expect(oom.status).toBe(-1);
    expect(oom.message).toMatch(/^CUDA out of memory\. Tried to allocate 128\.00 MiB in private pool \(2,0\) during CUDA-graph capture/);
    p.free(y);
    expect(p.alloc(g2, 2 * MiB, true)).toBe(y); // the pool's own freed block again
    expect(p.stats().private_pool_calls).toMatchObject({ captureGrows: 3 });
  });

  it("counts uses, gives the memory back at the last release once the last block is freed", () => {
    const e = engine();
    const p = new PrivatePools(e);
    const g = p.begin(0, 5, true, 2 * MiB);
    const out = p.alloc(g, MiB, true);
    p.end(g);
    p.end(g); // one end too many: nothing
    const g2 = p.begin(0, 5, true); // a second graph on the same handle
    expect(g2).toBe(g);
    expect(p.useCount(0, 5)).toBe(2);
    expect(() => p.begin(0, 5, true)).toThrow(/already allocating to pool \(0, 5\)/);
    p.end(g2);
    expect(p.releasePool(0, 5)).toBe(0);
    expect(p.releasePool(0, 5)).toBe(0); // the graph's output is still live
    expect(e.held()).toBe(2 * MiB); // the first window's reserve: the second needed no more than it left free
    p.free(out);
    expect(e.held()).toBe(0);
    expect(p.size).toBe(0);
    expect(p.useCount(0, 5)).toBe(0);
    expect(p.releasePool(0, 5)).toBe(0); // a release too many: nothing
  });

  it("gives back at the window's end what it took ahead and never touched; holds a recorded block's range", () => {
    const e = engine();
    const p = new PrivatePools(e, 8 * MiB);
    const g = p.begin(3, 0, true, MiB); // GMLAKE_POOL_RESERVE_BYTES: 8 MiB however little is expected
    expect(e.log).toEqual([`take 8 ${-(2 ** 32 + 1)}`]);
    p.end(g);
    expect(e.log[1]).toBe("give 8");
    const g2 = p.begin(3, 0, true, 0);
    const a = p.alloc(g2, 8 * MiB, true);
    expect(p.recordStream(a)).toBe(true);
    p.free(a);
    const b = p.alloc(g2, 8 * MiB, true);
    expect(b).not.toBe(a); // not reused (its other stream is not waited for): the pool grows
    p.free(b);
    expect(p.closeAll()).toBe(0);
    expect(e.held()).toBe(0);
  });

  it("takes a large reserve in pieces (of the largest allocation expected, at least 64 MiB) and gives back those never touched", () => {
    const e = engine();
    const p = new PrivatePools(e);
    const g = p.begin(5, 0, true, 300 * MiB, 10 * MiB);
    expect(e.log.map((l) => l.split(" ")[1])).toEqual(["64", "64", "64", "64", "44"]);
    const a = p.alloc(g, 10 * MiB, true);
    p.end(g);
    expect(e.held()).toBe(44 * MiB); // the piece the capture used (best fit: the smallest) stays the pool's
    p.free(a);
    const g2 = p.begin(6, 0, true, 100 * MiB, 80 * MiB); // an 80 MiB allocation expected: pieces of 80
    expect(e.log.slice(-2).map((l) => l.split(" ")[1])).toEqual(["80", "20"]);
    p.end(g2);
    p.releasePool(5, 0);
    p.releasePool(6, 0);
    expect(e.held()).toBe(0);
  });

  it("a new pool takes the stream key of a pool gone (its memory stays with that key in the engine)", () => {
    const e = engine();
    const p = new PrivatePools(e);
    const g = p.begin(1, 0, true, 2 * MiB);
    p.free(p.alloc(g, MiB, true));
    p.end(g);
    const other = p.begin(2, 0, true, 2 * MiB); // a second pool, still there
    p.releasePool(1, 0); // pool 1 gone
    const h = p.begin(3, 0, true, 2 * MiB);
    expect(h).toBe(g);
    expect(other).not.toBe(g);
    const key1 = -(2 ** 32 + 1);
    expect(e.log).toEqual([`take 2 ${key1}`, `take 2 ${-(2 * 2 ** 32 + 1)}`, "give 2", `take 2 ${key1}`]);
  });

  it("a capture that failed half-way: releasePool closes the window, the memory returns once its blocks are freed", () => {
    const e = engine();
    const p = new PrivatePools(e);
    const g = p.begin(4, 0, true, 4 * MiB);
    const a = p.alloc(g, MiB, true);
    expect(p.capturing).toBe(1);
    expect(p.releasePool(4, 0)).toBe(0);
    expect(p.capturing).toBe(0);
    p.free(a);
    expect(e.held()).toBe(0);
    const again = p.begin(4, 0, true, 0); // the id again: a new pool, a window of its own
    expect(p.useCount(4, 0)).toBe(1);
    p.end(again);
  });
});
