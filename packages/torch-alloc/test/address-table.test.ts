import { describe, expect, it } from "vitest";

import { AddressTable } from "../src/address-table.js";

describe("AddressTable", () => {
  it("agrees with a Map through random sets, gets, deletes and takes, across growth and wrap-around", () => {
    const t = new AddressTable<number>(16);
    const m = new Map<number, number>();
    let x = 0x9e3779b9;
    const rnd = (): number => {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      return x >>> 0;
    };
    // few distinct keys (long probe runs, many deletes inside runs), above and below 2^32
    const keys = Array.from({ length: 300 }, (_, i) => (i % 3 === 0 ? 0x7f00_0000_0000 + i * 2 ** 21 : 512 * (1 + i * 7)));
    for (let step = 0; step < 200_000; step++) {
      const k = keys[rnd() % keys.length]!;
      const op = rnd() % 4;
      if (op === 0) {
        t.set(k, step);
        m.set(k, step);
      } else if (op === 1) {
        expect(t.delete(k)).toBe(m.delete(k));
      } else if (op === 2) {
        const want = m.get(k);
        m.delete(k);
        expect(t.take(k)).toBe(want);
      } else {
        expect(t.get(k)).toBe(m.get(k));
      }
      if (step % 10_000 === 0) for (const kk of keys) expect(t.get(kk)).toBe(m.get(kk));
      expect(t.size).toBe(m.size);
    }
    t.clear();
    expect(t.size).toBe(0);
    expect(t.get(keys[0]!)).toBeUndefined();
  });

  it("refuses address 0 (its empty-slot mark) and non-numbers", () => {
    const t = new AddressTable<string>();
    expect(() => t.set(0, "a")).toThrow(RangeError);
    expect(() => t.set(Number.NaN, "a")).toThrow(RangeError);
    expect(t.get(0)).toBeUndefined();
    expect(t.delete(0)).toBe(false);
  });
});
