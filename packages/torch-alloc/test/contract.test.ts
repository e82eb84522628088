/**
 * native/contract.h and src/ops.ts hold the same numbers: every kOp/kStatus/kText enumerator and
 * the free queue's layout has its SCREAMING_SNAKE twin in ops.ts with the same value, and ops.ts
 * has nothing contract.h does not.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import * as ops from "../src/ops.js";

const header = readFileSync(join(import.meta.dirname, "..", "native", "contract.h"), "utf8");

/** kOpAllocCached -> OP_ALLOC_CACHED, kTextLastError -> TEXT_LAST_ERROR, kFreeQueueSlots -> FREE_QUEUE_SLOTS. */
const snake = (camel: string) => camel.replace(/([a-z0-9])([A-Z])/g, "$1_$2").toUpperCase();

function contract(text: string, layout = true): Map<string, number> {
  const out = new Map<string, number>();
  const body = text.replace(/\/\/[^\n]*/g, "");
  for (const m of body.matchAll(/\bk(Op|Status|Text|Queue)(\w+)\s*=\s*(-?\d+)/g)) out.set(snake(`${m[1]}${m[2]}`), Number(m[3]));
  const consts = new Map<string, number>();
  if (!layout) return out;
  for (const m of body.matchAll(/constexpr int k(\w+)\s*=\s*([^;]+);/g)) {
    // the layout: plain numbers, or sums and products of the constants before it
    const expr = m[2]!.replace(/k(\w+)/g, (_, n: string) => String(consts.get(n) ?? NaN));
    if (!/^[\d\s+*()-]+$/.test(expr)) throw new Error(`contract.h: k${m[1]} = ${m[2]} is not arithmetic of earlier constants`);
    const v = Function(`return (${expr})`)() as number;
    consts.set(m[1]!, v);
    out.set(snake(m[1]!), v);
  }
  return out;
}

describe("contract.h and ops.ts", () => {
  const native = contract(header);
  const ts = new Map(Object.entries(ops).filter((e): e is [string, number] => typeof e[1] === "number"));

  it("hold the same numbers under the same names, both ways", () => {
    expect(native.size).toBeGreaterThan(30);
    // names: the statuses ops.ts leaves out are the native side's own (not started: no engine to ask)
    const nativeOnly = [...native.keys()].filter((n) => !ts.has(n));
    expect(nativeOnly).toEqual(["STATUS_NOT_STARTED"]);
    expect([...ts.keys()].filter((n) => !native.has(n))).toEqual([]);
    for (const [name, v] of ts) expect(v, name).toBe(native.get(name));
  });

  it("the native CUDAAllocator's own copies (built on the user's host from the Python package, without native/) agree", () => {
    const dir = join(import.meta.dirname, "..", "python", "gmlake_torch");
    const copies = contract(readFileSync(join(dir, "cuda_allocator.cc"), "utf8"), false);
    const shared = [...copies];
    expect(shared.map(([n]) => n).sort()).toEqual(["STATUS_OOM", "TEXT_STATS"]);
    for (const [name, v] of shared) expect(v, `cuda_allocator.cc ${name}`).toBe(native.get(name));
  });

  it("fails on a number changed on one side (the check can fail)", () => {
    const changed = contract(header.replace(/kOpPeek = \d+/, "kOpPeek = 99"));
    expect(changed.get("OP_PEEK")).toBe(99);
    expect(changed.get("OP_PEEK")).not.toBe(ops.OP_PEEK);
    expect(() => contract("constexpr int kBad = sizeof(int);")).toThrow(/not arithmetic/);
  });
});
