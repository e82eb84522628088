import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { Block, BlockPool } from "../src/index.js";

const key = (b: Block) => [b.stream, b.size, b.addr] as const;
const cmp = (a: Block, b: Block) => a.stream - b.stream || a.size - b.size || a.addr - b.addr;

describe("BlockPool", () => {
  it("matches a sorted array under random inserts, deletes and best-fit lookups", () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.tuple(fc.constantFrom("ins", "del", "seek"), fc.integer({ min: 0, max: 2 }), fc.integer({ min: 1, max: 60 }), fc.nat(5000)),
          { maxLength: 600 },
        ),
        (ops) => {
          const pool = new BlockPool("t", false);
          const model: Block[] = [];
          const used = new Set<number>();
          for (const [op, stream, size, a] of ops) {
            if (op === "ins") {
              const addr = a * 512;
              if (used.has(addr)) continue;
              used.add(addr);
              const b = new Block(addr, size * 512, stream, pool);
              pool.insert(b);
              model.push(b);
              model.sort(cmp);
            } else if (op === "del" && model.length > 0 && a % 4 === 0 && !used.has(a * 512 + 256)) {
              // a new block takes an old one's place (a merge): any key, the order must hold
              const old = model.splice(a % model.length, 1)[0]!;
              used.delete(old.addr);
              const b = new Block(a * 512 + 256, size * 512, stream, pool);
              used.add(b.addr);
              expect(pool.replace(old, b)).toBe(true);
              expect(pool.replace(old, b)).toBe(false);
              model.push(b);
              model.sort(cmp);
            } else if (op === "del" && model.length > 0) {
              const b = model.splice(a % model.length, 1)[0]!;
              used.delete(b.addr);
              expect(pool.delete(b)).toBe(true);
              expect(pool.delete(b)).toBe(false);
            } else if (op === "seek") {
              const want = model.find((b) => b.stream > stream || (b.stream === stream && b.size >= size * 512)) ?? null;
              const got = pool.seek(stream, size * 512);
              expect(got).toBe(want);
              if (got !== null) {
                const i = model.indexOf(got);
                if (a % 3 === 0) {
                  // take the best fit out at the cursor
                  expect(pool.takeAtCursor()).toBe(got);
                  model.splice(i, 1);
                  used.delete(got.addr);
                } else if (a % 3 === 1 && !used.has(got.addr + 512)) {
                  // re-key the block at the cursor (a split moves it up and shrinks it; any change must keep the order)
                  used.delete(got.addr);
                  got.addr += 512;
                  used.add(got.addr);
                  got.size = ((a * 7) % 60 + 1) * 512;
                  pool.rekeyAtCursor();
                  model.sort(cmp);
                } else if (a % 6 === 2 && !used.has(got.addr + 256)) {
                  // a new block takes the place of the one at the cursor (a split's rest): any key, the order must hold
                  const b = new Block(got.addr + 256, ((a * 5) % 60 + 1) * 512, (a >> 3) % 3, pool);
                  pool.replaceAtCursor(b);
                  model.splice(i, 1, b);
                  used.add(b.addr);
                  used.delete(got.addr);
                  model.sort(cmp);
                } else {
                  expect(pool.advance()).toBe(model[i + 1] ?? null);
                }
              }
            }
          }
          expect(pool.checkOrder()).toBeNull();
          expect(pool.size).toBe(model.length);
          expect(pool.toArray().map(key)).toEqual(model.map(key));
          for (const b of model) expect(pool.has(b)).toBe(true);
        },
      ),
      { numRuns: 150 },
    );
  });
});
