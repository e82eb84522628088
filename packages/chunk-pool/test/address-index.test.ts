import { describe, expect, it } from "vitest";
import { AddressIndex } from "../src/address-index.js";

const MiB = 1 << 20;

/** A seeded generator, so a failure replays. */
function rng(seed: number): (n: number) => number {
  let s = seed >>> 0;
  return (n) => {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    return (s >>> 8) % n;
  };
}

describe("AddressIndex", () => {
  it("answers as a Map does over random churn (collisions, wrap-around, growth, deletion by shift)", () => {
    for (const seed of [1, 2, 3, 42]) {
      const rand = rng(seed);
      const g = 2 * MiB;
      const idx = new AddressIndex(g);
      const ref = new Map<number, number>();
      const wrong: string[] = [];
      // Few distinct granules, clustered, so probe runs are long and cross the table's end.
      const pool = Array.from({ length: 3000 }, (_, i) => 2 ** 44 + (i < 2000 ? i : 1e6 + 7 * i) * g);
      for (let op = 0; op < 40_000; op++) {
        const a = pool[rand(pool.length)]!;
        const r = rand(10);
        if (r < 5) {
          const id = rand(1 << 20);
          idx.set(a, id);
          ref.set(a, id);
        } else if (r < 8) {
          if (idx.delete(a) !== ref.delete(a)) wrong.push(`delete ${a} at op ${op}`);
        } else if (idx.get(a) !== (ref.get(a) ?? -1)) wrong.push(`get ${a} at op ${op}`);
        if (op % 4999 === 0) {
          expect(idx.size).toBe(ref.size);
          for (const [k, v] of ref) if (idx.get(k) !== v) wrong.push(`get ${k} at op ${op} (full check)`);
          expect(idx.addresses().sort((x, y) => x - y)).toEqual([...ref.keys()].sort((x, y) => x - y));
        }
      }
      expect(wrong).toEqual([]);
      for (const k of [...ref.keys()]) expect(idx.delete(k)).toBe(true);
      expect(idx.size).toBe(0);
      for (const a of pool) expect(idx.has(a)).toBe(false);
    }
  });

  it("keeps unaligned and out-of-range keys apart, as a Map would", () => {
    const idx = new AddressIndex(2 * MiB);
    const keys = [0, 1, 2 * MiB, 2 * MiB + 1, -2 * MiB, 0.5, 2 ** 53, NaN, Infinity];
    keys.forEach((k, i) => idx.set(k, i));
    expect(idx.size).toBe(keys.length);
    keys.forEach((k, i) => expect(idx.get(k)).toBe(i));
    expect(idx.get(4 * MiB)).toBe(-1);
    expect(idx.delete(NaN)).toBe(true);
    expect(idx.delete(NaN)).toBe(false);
    expect(idx.delete(1)).toBe(true);
    expect(idx.get(0)).toBe(0);
    expect(idx.get(2 * MiB + 1)).toBe(3);
    expect(idx.size).toBe(keys.length - 2);
  });
});
