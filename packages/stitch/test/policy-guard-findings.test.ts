import { describe, expect, it } from "vitest";
import { SimDriver } from "@gmlake/vmm";
import { Allocator, Block, PolicyFault, type Policy, type PhysicalChunk } from "../src/index.js";
import { freshChunks } from "./example-policy.js";
import { MiB } from "./helpers.js";

/**
 * What the fuzz target of generated outside policies (apps/cli/fuzz/policy-target.mjs) found
 * past the guard: each ends in a PolicyFault now, never an engine error or a block handed out
 * in memory that is not mapped, or across two reservations or segments.
 */

function faultOf(f: () => unknown): PolicyFault {
  try {
    f();
  } catch (e) {
    expect(e, String(e)).toBeInstanceOf(PolicyFault);
    return e as PolicyFault;
  }
  throw new Error("no fault");
}

/** fresh-chunks with its malloc's blocks passed through `f` (the previous block as well). */
function withMalloc(name: string, f: (b: Block, prev: Block | null) => Block): Policy {
  return {
    ...freshChunks,
    name,
    create: (ctx, o) => {
      const inst = freshChunks.create(ctx, o);
      const m = inst.malloc.bind(inst);
      let prev: Block | null = null;
      inst.malloc = (s, st) => {
        const b = m(s, st);
        if (b === null) return null;
        const out = f(b, prev);
        prev = b;
        return out;
      };
      return inst;
    },
  } as Policy;
}

describe("the guard past the probe's cases", () => {
  it("a frozen block (the engine writes its fields into it) is the policy's fault, not a TypeError", () => {
    const a = new Allocator(withMalloc("frozen", (b) => Object.freeze(b)), new SimDriver(), { recorder: null });
    expect(faultOf(() => a.malloc(MiB)).rule).toBe("not-a-block");
  });

  it.each([
    ["pendingFree", (p: Block): void => void (p.pendingFree = true)],
    ["requested", (p: Block): void => void (p.requested = 1)],
    ["allocated", (p: Block): void => void (p.allocated = false)],
  ] as const)("the engine's field %s of a live block changed by the policy: 'mutated' at its free", (_, change) => {
    const p = withMalloc("engine-fields", (b, prev) => {
      if (prev !== null) change(prev);
      return b;
    });
    const a = new Allocator(p, new SimDriver(), { recorder: null });
    const x = a.malloc(MiB);
    a.malloc(MiB);
    expect(faultOf(() => a.free(x)).rule).toBe("mutated");
  });

  it("a block across two reservations (each mapped, neither live) is refused: no copy or kernel may cross", () => {
    const kept: Block[] = [];
    const p = {
      ...freshChunks,
      name: "spans",
      create: (ctx, o) => {
        const inst = freshChunks.create(ctx, o);
        const m = inst.malloc.bind(inst);
        inst.malloc = (s, st) => {
          if (kept.length === 2) return new Block(kept[0]!.end - 512, 1024, st, null);
          const b = m(s, st);
          if (b !== null) kept.push(b);
          return b;
        };
        inst.free = () => {}; // keeps its memory mapped
        return inst;
      },
    } as Policy;
    const a = new Allocator(p, new SimDriver(), { recorder: null });
    a.free(a.malloc(MiB));
    a.free(a.malloc(MiB));
    expect(kept[1]!.addr).toBe(kept[0]!.end); // side by side: only the reservations' bounds tell them apart
    expect(faultOf(() => a.malloc(1024)).rule).toBe("spans");
  });

  it("an unmap that fails part way takes what it unmapped off the books: that memory is not handed out again", () => {
    let freed: Block | null = null;
    const p = {
      ...freshChunks,
      name: "half-unmap",
      create: (ctx, o) => {
        const inst = freshChunks.create(ctx, o);
        const m = inst.malloc.bind(inst);
        inst.malloc = (s, st) => (freed !== null ? new Block(freed.addr, freed.size, st, null) : m(s, st));
        inst.free = (b) => {
          freed = b;
          // a list with a bad entry after the good chunk: the pool unmaps the chunk, then throws
          ctx.unmapChunks(b.addr, [...(b.data as PhysicalChunk[]), null as unknown as PhysicalChunk], b.stream);
        };
        return inst;
      },
    } as Policy;
    const a = new Allocator(p, new SimDriver(), { recorder: null });
    const x = a.malloc(MiB);
    expect(faultOf(() => a.free(x)).rule).toBe("threw");
    expect(faultOf(() => a.malloc(MiB)).rule).toBe("unmapped");
  });
});
