import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { SimDriver } from "@gmlake/vmm";
import { EventKind, EventLog } from "@gmlake/trace";
import {
  Allocator,
  Block,
  BUILTIN_POLICIES,
  cachingPolicy,
  getPolicy,
  loadPolicyModule,
  PolicyFault,
  registerPolicy,
  replay,
  StitchError,
  unregisterPolicy,
  type Policy,
  type PolicyContext,
  type PolicyInstance,
} from "../src/index.js";
import { freshChunks } from "./example-policy.js";
import { MiB, rng } from "./helpers.js";

/**
 * The engine does not trust a policy that is not a built-in: each way the probe of issue 33
 * found a module bending the results (an address handed out twice, a block smaller than its
 * request, memory its context never mapped, a look-alike object, a block changed while live,
 * a segment freed at the wrong size, memory unmapped under a live block, a chunk mapped
 * twice and both ranges handed out) stops the replay with one PolicyFault naming the policy
 * and the rule; throws in its calls name the call. The built-ins run unguarded, and guarded
 * they make the same decisions (no false alarm).
 */

const A = EventKind.alloc;
const FC = EventKind.freeCompleted;

/** n allocations of `size` live at once, then freed. */
function trace(n: number, size: number): EventLog {
  const l = new EventLog(2 * n + 1);
  l.streamId(0);
  for (let i = 0; i < n; i++) l.push(A, 0x100000 * (i + 1), size, 0, 0, i);
  for (let i = 0; i < n; i++) l.push(FC, 0x100000 * (i + 1), size, 0, 0, n + i);
  return l;
}

/** The README's fresh-chunks with `change` applied to its allocator: the bug under test. */
function buggy(name: string, change: (inst: PolicyInstance, ctx: PolicyContext) => void): Policy {
  return {
    ...freshChunks,
    name,
    create: (ctx, o) => {
      const inst = freshChunks.create(ctx, o);
      change(inst, ctx);
      return inst;
    },
  } as Policy;
}

function faultOf(f: () => unknown): PolicyFault {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(PolicyFault);
    expect((e as Error).message).not.toContain("\n");
    return e as PolicyFault;
  }
  throw new Error("no fault");
}

const onSim = (p: Policy, l = trace(4, 3 * MiB)) => replay(l, { policy: p, driver: new SimDriver(), recorder: null });

describe("the policy guard: every block an outside policy returns is checked", () => {
  const cases: [rule: string, policy: Policy, message: RegExp][] = [
    [
      "overlap",
      buggy("same-address", (inst) => {
        let first: Block | null = null;
        const m = inst.malloc.bind(inst);
        inst.malloc = (s, st) => {
          const b = m(s, st);
          if (first === null) return (first = b);
          return b === null ? null : Object.assign(b, { addr: first.addr });
        };
      }),
      /policy same-address \(not a built-in\) malloc\(3145728, stream 0\) returned \[0x[0-9a-f]+, \+4194304\) overlapping the live block/,
    ],
    ["too-small", buggy("too-small", (inst) => wrap(inst, (b) => Object.assign(b, { size: 512 }))), /returned 512 B .* less than the request rounded to 512 B \(3145728 B\)/],
    ["bad-block", buggy("nan-size", (inst) => wrap(inst, (b) => Object.assign(b, { size: NaN }))), /not integers/],
    ["too-small", buggy("negative-size", (inst) => wrap(inst, (b) => Object.assign(b, { size: -4096 }))), /returned -4096 B/],
    ["unmapped", buggy("made-up", (inst) => wrap(inst, (b) => Object.assign(b, { addr: 0x1000 }))), /0x1000 is not memory its context mapped/],
    ["misaligned", buggy("odd", (inst) => wrap(inst, (b) => Object.assign(b, { addr: b.addr + 8 }))), /not 512 B aligned/],
    ["not-a-block", buggy("plain", (inst) => wrap(inst, (b) => ({ ...b }) as Block)), /returned a plain object, not a Block or null/],
    ["not-a-block", buggy("undefined", (inst) => wrap(inst, () => undefined as unknown as Block)), /returned undefined/],
  ];
  it.each(cases.map(([rule, p, m]) => [`${rule} (${p.name})`, rule, p, m] as const))("%s", (_, rule, policy, message) => {
    const f = faultOf(() => onSim(policy));
    expect(f.code).toBe("BAD_POLICY");
    expect(f.rule).toBe(rule);
    expect(f.policy).toBe(policy.name);
    expect(f.message).toMatch(message);
  });

  it("a block changed while live is refused at its free, before the books use it", () => {
    let live: Block | null = null;
    const p = buggy("mutator", (inst) => {
      const m = inst.malloc.bind(inst);
      inst.malloc = (s, st) => {
        if (live !== null) live.size += 2 * MiB; // grows the block it handed out before
        return (live = m(s, st));
      };
    });
    expect(faultOf(() => onSim(p)).rule).toBe("mutated");
  });

  it("a chunk mapped at two addresses cannot back two live blocks", () => {
    const p: Policy = {
      ...freshChunks,
      name: "alias",
      create: (ctx) => {
        let chunk: ReturnType<PolicyContext["createChunk"]> = null;
        const ranges: number[] = [];
        return {
          malloc(size, stream) {
            chunk ??= ctx.createChunk(4 * MiB);
            const va = ctx.reserve(4 * MiB);
            ctx.mapChunks(va, [chunk!], stream);
            ranges.push(va);
            return size <= 4 * MiB ? new Block(va, 4 * MiB, stream, null) : null;
          },
          free() {},
          emptyCache() {},
          teardown() {},
        };
      },
    };
    const f = faultOf(() => onSim(p, trace(2, MiB)));
    expect(f.rule).toBe("shared-physical");
  });
});

/** Replace the blocks the policy's malloc returns. */
function wrap(inst: PolicyInstance, f: (b: Block) => Block): void {
  const m = inst.malloc.bind(inst);
  inst.malloc = (s, st) => {
    const b = m(s, st);
    return b === null ? null : f(b);
  };
}

describe("the policy guard: frees and segment calls against the engine's books", () => {
  /** cudaMalloc's a segment per block, as the caching allocator does. */
  const segments = (name: string, free: (ctx: PolicyContext, b: Block) => void): Policy => ({
    ...freshChunks,
    name,
    create: (ctx) => ({
      malloc(size, stream) {
        const bytes = Math.ceil(size / (2 * MiB)) * 2 * MiB;
        const a = ctx.segmentAlloc(bytes, stream);
        return a < 0 ? null : new Block(a, bytes, stream, null);
      },
      free: (b) => free(ctx, b),
      emptyCache() {},
      teardown() {},
    }),
  });

  it("a segment freed at the wrong size", () => {
    const f = faultOf(() => onSim(segments("short-free", (ctx, b) => ctx.segmentFree(b.addr, b.size / 2, b.stream))));
    expect([f.rule, f.message]).toEqual(["segment-free", expect.stringMatching(/freed the 4194304 B segment at 0x[0-9a-f]+ as 2097152 B/)]);
  });

  it("a segment freed twice, or one its context never allocated", () => {
    expect(faultOf(() => onSim(segments("stranger", (ctx, b) => ctx.segmentFree(b.addr + 2 * MiB, 2 * MiB, 0)))).rule).toBe("segment-free");
  });

  it("memory unmapped under a live block", () => {
    const p = buggy("unmaps-live", (inst, ctx) => {
      const blocks: Block[] = [];
      const m = inst.malloc.bind(inst);
      inst.malloc = (s, st) => {
        const b = m(s, st);
        if (b !== null) blocks.push(b);
        if (blocks.length === 2) ctx.unmapChunks(blocks[0]!.addr, blocks[0]!.data as never, 0); // the first is still live
        return b;
      };
    });
    const f = faultOf(() => onSim(p));
    expect(f.rule).toBe("freed-live");
    expect(f.message).toMatch(/threw in malloc|unmapped \[0x/);
  });

  it("an address range freed at the wrong size", () => {
    const p = buggy("short-range", (inst, ctx) => {
      inst.free = (b) => {
        ctx.unmapChunks(b.addr, b.data as never, b.stream);
        ctx.reserveFree(b.addr, b.size - 2 * MiB);
      };
    });
    expect(faultOf(() => onSim(p)).message).toMatch(/freed the 4194304 B address range at 0x[0-9a-f]+ as 2097152 B/);
  });
});

describe("an outside policy's errors name it and the call", () => {
  const throwing = (call: "create" | "malloc" | "free" | "teardown" | "emptyCache" | "counters"): Policy =>
    call === "create"
      ? { ...freshChunks, name: "throws-create", create: () => (null as unknown as { x: () => void }).x() as never }
      : buggy(`throws-${call.toLowerCase()}`, (inst) => {
          (inst as unknown as Record<string, () => unknown>)[call] = () => {
            throw new TypeError(`this.instance.${call} is not a function`);
          };
        });
  it.each(["create", "malloc", "free", "teardown", "counters"] as const)("a throw in %s", (call) => {
    const f = faultOf(() => onSim(throwing(call)));
    expect(f.rule).toBe("threw");
    expect(f.code).toBe("BAD_POLICY");
    expect(f.message).toMatch(new RegExp(`^policy throws-${call.toLowerCase()} \\(not a built-in\\) threw in ${call}: TypeError: `));
  });

  it("what the invariant checker finds (its own check() failing, or throwing) is the policy's fault", () => {
    const fails = buggy("check-fails", (inst) => Object.assign(inst, { check: () => "pool out of order" }));
    const check = (p: Policy) => faultOf(() => replay(trace(4, 3 * MiB), { policy: p, driver: new SimDriver(), recorder: null, checkInvariants: 1 }));
    expect([check(fails).rule, check(fails).message]).toEqual(["invariant", expect.stringMatching(/^policy check-fails \(not a built-in\) broke an invariant: check-fails: pool out of order/)]);
    const throws = buggy("check-throws", (inst) => Object.assign(inst, { check: () => (null as unknown as { x: string }).x }));
    expect(check(throws).message).toMatch(/broke an invariant: TypeError: Cannot read properties of null/);
  });

  it("a thrown value that cannot even be printed", () => {
    const p = buggy("throws-odd", (inst) => {
      inst.malloc = () => {
        throw Object.create(null);
      };
    });
    expect(faultOf(() => onSim(p)).message).toMatch(/threw in malloc: a value that cannot be printed \(object\)/);
  });

  it("counters that are not finite numbers", () => {
    const p = buggy("nan-counters", (inst) => Object.assign(inst, { counters: () => ({ stitches: NaN }) }));
    expect(faultOf(() => onSim(p)).message).toMatch(/counters\(\) gave stitches = NaN/);
  });

  it("an error names the module the policy came from", async () => {
    const dir = mkdtempSync(join(import.meta.dirname, ".tmp-guard-"));
    try {
      const url = new URL("../src/index.ts", import.meta.url).href;
      writeFileSync(
        join(dir, "bad.mjs"),
        `import { Block } from ${JSON.stringify(url)};
export default { name: "named-bad", description: "x", knobs: {}, create: () => ({ malloc: () => new Block(0x2000, 4096, 0, null), free() {}, emptyCache() {}, teardown() {} }) };`,
      );
      const [p] = await loadPolicyModule("./bad.mjs", dir);
      const f = faultOf(() => onSim(p!));
      expect(f.module).toBe("./bad.mjs");
      expect(f.message).toMatch(/^policy named-bad \(module \.\/bad\.mjs\) malloc\(3145728, stream 0\) returned/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
      unregisterPolicy("named-bad");
    }
  });
});

describe("live (the Allocator @gmlake/torch-alloc drives): a bad block is never handed out", () => {
  it("the allocation fails with the fault; the blocks handed out before stay whole and apart", () => {
    let first: Block | null = null;
    const p = buggy("live-same", (inst) => {
      const m = inst.malloc.bind(inst);
      inst.malloc = (s, st) => {
        const b = m(s, st);
        if (first === null) return (first = b);
        return b === null ? null : Object.assign(b, { addr: first.addr, size: first.size });
      };
    });
    const a = new Allocator(p, new SimDriver(), { recorder: null });
    const x = a.malloc(MiB);
    for (let i = 0; i < 20; i++) expect(() => a.malloc(MiB)).toThrow(PolicyFault);
    expect(a.liveBlocks).toBe(1);
    a.free(x);
    expect(a.stats.allocatedBytes).toBe(0);
  });
});

describe("a module cannot pass for a built-in", () => {
  it.each(BUILTIN_POLICIES.map((p) => p.name))("registerPolicy of another %s is refused, replace or not; unregister too", (name) => {
    const fake = { ...freshChunks, name } as Policy;
    for (const opts of [{}, { replace: true }]) {
      expect(() => registerPolicy(fake, opts)).toThrow(expect.objectContaining({ code: "DUPLICATE_POLICY", message: expect.stringMatching(/is a built-in policy/) }));
    }
    expect(() => unregisterPolicy(name)).toThrow(StitchError);
    expect(getPolicy(name)).toBe(BUILTIN_POLICIES.find((p) => p.name === name));
    registerPolicy(getPolicy(name), { replace: true }); // the built-in itself again: nothing changes
  });
});

describe("the guard on the built-ins: the same decisions, no false alarm", () => {
  /** Random allocations and frees on two streams, with empty_cache now and then. */
  function randomLog(seed: number, n: number): EventLog {
    const r = rng(seed);
    const l = new EventLog(2 * n + 8);
    l.streamId(0);
    l.streamId(7);
    const live: [number, number, number][] = [];
    let addr = 0x1000;
    for (let i = 0; i < n; i++) {
      if (live.length > 0 && r() < 0.45) {
        const [a, s, st] = live.splice(Math.floor(r() * live.length), 1)[0]!;
        l.push(FC, a, s, st, 0, i);
      } else if (r() < 0.02) l.push(EventKind.emptyCache, 0, 0, 0, 0, i);
      else {
        const s = r() < 0.5 ? Math.floor(r() * 4096) : Math.floor(r() * 64 * MiB);
        const st = r() < 0.8 ? 0 : 1;
        l.push(A, addr, s, st, 0, i);
        live.push([addr, s, st]);
        addr += 0x10000000;
      }
    }
    return l;
  }
  it.each(BUILTIN_POLICIES.map((p) => p.name))("%s guarded replays as unguarded", (name) => {
    for (const seed of [1, 2, 3]) {
      const l = randomLog(seed, 3000);
      const run = (guard: boolean) => {
        // a copy of the built-in is an outside policy: guarded by default
        const p = guard ? ({ ...getPolicy(name), name: `${name}-copy` } as Policy) : getPolicy(name);
        const r = replay(l, { policy: p, driver: new SimDriver(), checkInvariants: 512 });
        return [r.peakReservedBytes, r.peakAllocatedBytes, r.numAllocRetries, r.log!.length, JSON.stringify(r.counters)];
      };
      expect(run(true)).toEqual(run(false));
    }
  });
  it("a built-in is not guarded; a copy of it is", () => {
    expect(new Allocator(cachingPolicy as unknown as Policy, new SimDriver()).guard).toBeNull();
    expect(new Allocator({ ...cachingPolicy, name: "caching-copy" } as unknown as Policy, new SimDriver()).guard).not.toBeNull();
  });
});

/** FUZZ_RUNS scales the property (scripts/fuzz-long.sh); FUZZ_SEED replays a failure. */
const RUNS = process.env.FUZZ_RUNS === undefined ? null : Number(process.env.FUZZ_RUNS);
const SEED = process.env.FUZZ_SEED === undefined ? null : Number(process.env.FUZZ_SEED);

describe("a generated mix of buggy outside policies", () => {
  /** Bugs a module can have, each set off at its n-th call. */
  const BUGS: Record<string, (inst: PolicyInstance, ctx: PolicyContext, n: number) => void> = {
    shift: (i, _c, n) => onNth(i, n, (b) => Object.assign(b, { addr: b.addr + 512 * (1 + (n % 7)) })),
    shrink: (i, _c, n) => onNth(i, n, (b) => Object.assign(b, { size: b.size - 512 * (1 + (n % 5)) })),
    grow: (i, _c, n) => onNth(i, n, (b) => Object.assign(b, { size: b.size + 2 * MiB })),
    nan: (i, _c, n) => onNth(i, n, (b) => Object.assign(b, { size: NaN })),
    plain: (i, _c, n) => onNth(i, n, (b) => ({ ...b }) as Block),
    twice: (i, _c, n) => {
      let last: Block | null = null;
      onNth(i, n, (b) => last ?? b, (b) => (last = b));
    },
    throws: (i, _c, n) => onNth(i, n, () => {
      throw new RangeError("bug");
    }),
    mutateLive: (i, _c, n) => {
      let last: Block | null = null;
      onNth(i, n, (b) => (last !== null && (last.size += 512), b), (b) => (last = b));
    },
    unmapLive: (i, ctx, n) => {
      let last: Block | null = null;
      onNth(i, n, (b) => (last !== null && last.allocated && ctx.unmapChunks(last.addr, last.data as never, last.stream), b), (b) => (last = b));
    },
  };
  /** malloc's n-th block goes through `bad`; every block through `seen` first. */
  function onNth(inst: PolicyInstance, n: number, bad: (b: Block) => Block, seen: (b: Block) => void = () => {}): void {
    const m = inst.malloc.bind(inst);
    let k = 0;
    inst.malloc = (s, st) => {
      const b = m(s, st);
      if (b === null) return null;
      const out = ++k === n ? bad(b) : b;
      seen(b);
      return out;
    };
  }
  it("each run ends in a PolicyFault or in books that add up: never another error, never utilization above 1", () => {
    const ends = { fault: 0, done: 0 };
    fc.assert(
      fc.property(fc.constantFrom(...Object.keys(BUGS)), fc.integer({ min: 1, max: 60 }), fc.integer({ min: 1, max: 1 << 30 }), (bug, n, seed) => {
        const p = buggy(`fuzz-${bug}`, (inst, ctx) => BUGS[bug]!(inst, ctx, n));
        const r = rng(seed);
        const l = new EventLog(256);
        l.streamId(0);
        const live: [number, number][] = [];
        for (let i = 0; i < 120; i++) {
          if (live.length > 0 && r() < 0.45) {
            const [a, z] = live.splice(Math.floor(r() * live.length), 1)[0]!;
            l.push(FC, a, z, 0, 0, i);
          } else {
            const z = 1 + Math.floor(r() * 8 * MiB);
            l.push(A, 0x1000 * (i + 1) * 4096, z, 0, 0, i);
            live.push([0x1000 * (i + 1) * 4096, z]);
          }
        }
        try {
          const res = replay(l, { policy: p, driver: new SimDriver(), recorder: null });
          expect(res.utilization).toBeLessThanOrEqual(1);
          expect(res.peakAllocatedBytes).toBeGreaterThanOrEqual(res.peakRequestedBytes);
          ends.done++;
        } catch (e) {
          expect(e, String(e)).toBeInstanceOf(PolicyFault);
          ends.fault++;
        }
      }),
      { numRuns: RUNS ?? 300, seed: SEED ?? 33 },
    );
    // both ends happen: the bugs are set off (most runs) and some are harmless (a grow into its own chunk)
    expect(ends.fault).toBeGreaterThan(ends.done);
    expect(ends.fault + ends.done).toBe(RUNS ?? 300);
  });
});
