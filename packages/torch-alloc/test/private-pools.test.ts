import { describe, expect, it } from "vitest";

import type { Block } from "@gmlake/stitch";

import { subtract, union } from "../src/pool-ranges.js";
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

  describe("checkpoints (cudagraph trees' getCheckpointState / setCheckpointPoolState)", () => {
    /** Pool (8, 0) with one 8 MiB segment and blocks a, b, c of 1 MiB live (b on stream 7, asked 100 bytes less). */
    function pool() {
      const e = engine();
      const p = new PrivatePools(e);
      const g = p.begin(8, 0, true, 8 * MiB);
      const a = p.alloc(g, MiB, false, 5);
      const b = p.alloc(g, MiB - 100, false, 7);
      const c = p.alloc(g, MiB, false, 5);
      p.end(g);
      return { e, p, a, b, c };
    }
    const inUse = (p: PrivatePools): unknown => p.stats().private_pool_in_use_bytes;
    /** A window on pool (8, 0) as cudagraph trees' warm-up opens one: begin, allocations, end, a use released. */
    function window<T>(p: PrivatePools, fn: (g: number) => T): T {
      const g = p.begin(8, 0, true);
      const out = fn(g);
      p.end(g);
      p.releasePool(8, 0);
      return out;
    }

    it("puts the checkpoint's blocks back at their addresses after frees and allocations; freed blocks are not freed twice, restored ones free normally", () => {
      const { e, p, a, b, c } = pool();
      const id = p.checkpoint(8, 0);
      expect(p.free(b)).toBe(true);
      const [d, f] = window(p, (g) => [p.alloc(g, 512 * 1024, false, 9), p.alloc(g, 2 * MiB, false, 9)]);
      expect(d).toBe(b); // b's range, best fit
      const log = e.log.length;
      const r = p.restore(id);
      expect(r.freed.sort()).toEqual([a, b, c, f].sort()); // d is b's address: freed and allocated both, as PyTorch's may
      expect(r.allocated).toEqual([[a, MiB, 5], [b, MiB - 100, 7], [c, MiB, 5]]);
      expect(e.log.length).toBe(log); // no engine block taken or given
      expect(inUse(p)).toBe(3 * MiB);
      expect(p.live(8, 0, 0)).toBe(3);
      expect([a, b, c, f].map((x) => p.live(8, 0, x))).toEqual([1, 1, 1, 0]);
      expect(p.free(f)).toBe(false); // freed by the restore: a stale tensor's free is no pool block's any more
      expect(p.free(b)).toBe(true); // a restored block frees as any
      expect(p.free(b)).toBe(false);
      // the memory after c is free again, merged: 5 MiB from c's end fit without the engine
      expect(window(p, (g) => [p.alloc(g, 5 * MiB, false), p.alloc(g, MiB, false)])).toEqual([c + MiB, b]);
      expect(e.log.length).toBe(log);
      expect(p.useCount(8, 0)).toBe(1);
      expect(p.stats().private_pool_calls).toMatchObject({ checkpoints: 1, restores: 1 });
    });

    it("after the pool grew: the blocks of the segment taken since are freed, the segment stays the pool's, all free", () => {
      const { e, p, a, b, c } = pool();
      const id = p.checkpoint(8, 0);
      const big = window(p, (g) => p.alloc(g, 16 * MiB, false)); // more than the pool has free: a segment more
      expect(e.held()).toBe(24 * MiB);
      expect(p.restore(id).freed.sort()).toEqual([a, b, c, big].sort());
      expect(e.held()).toBe(24 * MiB);
      expect(inUse(p)).toBe(3 * MiB);
      const log = e.log.length;
      expect(window(p, (g) => p.alloc(g, 16 * MiB, false))).toBe(big); // the new segment's whole range, no take
      expect(e.log.length).toBe(log);
      // the same checkpoint again: the same blocks, from any state
      expect(p.restore(id).allocated.map(([x]) => x)).toEqual([a, b, c]);
      for (const x of [a, b, c]) p.free(x);
      p.releasePool(8, 0);
      expect(e.held()).toBe(0); // books exact: the last free and release gave every segment back
    });

    it("a reserve untouched at the checkpoint may go back before the restore (it held no block)", () => {
      const { e, p, a, b, c } = pool();
      const g = p.begin(8, 0, true, 70 * MiB); // a window expecting more: 66 MiB taken ahead, in two pieces
      const id = p.checkpoint(8, 0);
      p.end(g); // untouched: back to the engine
      p.releasePool(8, 0);
      expect(e.log.slice(-2)).toEqual(["give 2", "give 64"]);
      p.free(b);
      expect(p.restore(id)).toEqual({ freed: [a, c], allocated: [[a, MiB, 5], [b, MiB - 100, 7], [c, MiB, 5]] });
      expect(e.held()).toBe(8 * MiB);
    });

    it("ranges: subtract and union keep order and merge", () => {
      const r = (addr: number, size: number) => ({ addr, size });
      expect(subtract([r(0, 10), r(20, 10)], [r(5, 2), r(9, 12), r(25, 10)])).toEqual([r(0, 5), r(7, 2), r(21, 4)]);
      expect(subtract([r(0, 10)], [])).toEqual([r(0, 10)]);
      expect(union([r(10, 5), r(0, 4)], [r(4, 2), r(12, 8)])).toEqual([r(0, 6), r(10, 10)]);
    });

    it("refuses a restore once the pool is gone (its memory went back), an unknown or dropped id, and a checkpoint of no pool", () => {
      const { e, p, a, b, c } = pool();
      const id = p.checkpoint(8, 0);
      const errOf = (fn: () => unknown): PoolError => {
        try {
          fn();
        } catch (caught) {
          return caught as PoolError;
        }
        throw new Error("no error");
      };
      for (const x of [a, b, c]) p.free(x);
      p.releasePool(8, 0);
      expect(e.held()).toBe(0);
      let err = errOf(() => p.restore(id));
      expect(err).toBeInstanceOf(PoolError);
      expect(err.status).toBe(-2);
      expect(err.message).toBe(`setCheckpointPoolState: pool (8, 0) of checkpoint #${id} is gone (its last use was released since)`);
      const g = p.begin(8, 0, true, 8 * MiB); // the same id again: another pool, other segments
      const x = p.alloc(g, MiB, false);
      p.end(g);
      expect(errOf(() => p.restore(id)).message).toMatch(/is gone/);
      expect(p.live(8, 0, x)).toBe(1); // nothing changed
      expect(p.dropCheckpoint(id)).toBe(true);
      expect(p.dropCheckpoint(id)).toBe(false);
      expect(errOf(() => p.restore(id)).message).toBe(`setCheckpointPoolState: no checkpoint #${id} (dropped, or never taken)`);
      expect(errOf(() => p.checkpoint(9, 9)).message).toBe("getCheckpointState: no pool (9, 9)");
      p.releasePool(8, 0); // x still live: the pool stays, with no use
      expect(errOf(() => p.checkpoint(8, 0)).message).toMatch(/no pool \(8, 0\) in use/);
      p.free(x);
      expect(e.held()).toBe(0);
    });

    it("what record_stream holds stays held: a recorded block freed by the restore, or freed after the checkpoint, is not reused", () => {
      const { e, p, a, b, c } = pool();
      const id = p.checkpoint(8, 0);
      p.free(c);
      const [r1, r2] = window(p, (g) => {
        const x = p.alloc(g, MiB, false); // c's range again, then used on another stream and freed
        p.recordStream(x);
        p.free(x);
        const y = p.alloc(g, MiB, false); // live and recorded at the restore
        p.recordStream(y);
        return [x, y];
      });
      expect(r1).toBe(c);
      p.restore(id);
      expect(inUse(p)).toBe(3 * MiB);
      // c is live again (the checkpoint's), recorded: its range stays held after its free
      p.free(c);
      const log = e.log.length;
      const got = window(p, (g) => [1, 2, 3, 4].map(() => p.alloc(g, MiB, false)));
      expect(got).not.toContain(c);
      expect(got).not.toContain(r2);
      expect(e.log.slice(log)).toEqual([]); // the 4 MiB free: 8, less a, b and what c and r2 hold
      window(p, (g) => p.alloc(g, MiB, false)); // none left: the pool grows
      expect(e.log.length).toBe(log + 1);
    });
  });
});

