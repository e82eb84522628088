import { describe, expect, it } from "vitest";
import { cudaAvailable, SimDriver } from "@gmlake/vmm";
import { Block, listPolicies, type Policy } from "../src/index.js";
import { PolicyContractError, runPolicyContract } from "../src/testing.js";
import { MiB } from "./helpers.js";
import "./example-policy.js";

/**
 * The contract of @gmlake/stitch/testing, run for every registered policy (the built-ins
 * and the README's example) on every driver here: the same suite an outside policy runs.
 */
const drivers = ["sim", "host", ...(cudaAvailable() ? ["cuda" as const] : [])] as const;

describe.each(listPolicies().map((p) => p.name))("policy %s", (policy) => {
  it.each(drivers)("keeps the contract on %s", (driver) => {
    const r = runPolicyContract(policy, { drivers: [driver] });
    expect(r.passed).toBe(true);
    expect(r.checks.map((c) => c.check)).toEqual(["mixes", "sequences", "out-of-memory"]);
  });
});

describe("the contract catches a broken policy", () => {
  const base = listPolicies().find((p) => p.name === "caching")!;
  const broken = (name: string, wrap: (i: ReturnType<Policy["create"]>) => ReturnType<Policy["create"]>): Policy => ({ ...base, name, create: (ctx, o) => wrap(base.create(ctx, o)) });

  it("a block over a live one (the invariant checker)", () => {
    let n = 0;
    let held: Block | null = null;
    const p = broken("overlaps", (i) => ({
      ...i,
      malloc: (size, stream) => {
        if (++n % 7 === 0 && held !== null && held.allocated) return new Block(held.addr, Math.ceil((size + 1) / 512) * 512, stream, null); // aliases a live block
        const b = i.malloc(size, stream);
        if (b !== null) held = b;
        return b;
      },
      free: (b) => i.free(b),
      emptyCache: () => i.emptyCache(),
      teardown: () => i.teardown(),
    }));
    expect(() => runPolicyContract(p, { drivers: ["sim"], seeds: [1], sequences: 2 })).toThrow(/policy overlaps fails its contract: mixes on sim: seed 1, operation \d+: .*overlap/i);
  });

  it("a mallocCached that grows (it must make no driver call on memory)", () => {
    const p = broken("grows-when-cached", (i) => ({ ...i, malloc: i.malloc.bind(i), mallocCached: i.malloc.bind(i), free: i.free.bind(i), emptyCache: i.emptyCache.bind(i), teardown: i.teardown.bind(i) }));
    expect(() => runPolicyContract(p, { drivers: ["sim"], seeds: [1], sequences: 2 })).toThrow(/mixes on sim: seed 1, operation \d+: mallocCached\(\d+\) made \d+ memAlloc call/);
  });

  it("a teardown that keeps its cache", () => {
    const p = broken("leaky", (i) => ({ ...i, malloc: i.malloc.bind(i), free: i.free.bind(i), emptyCache: () => {}, teardown: () => {} }));
    expect(() => runPolicyContract(p, { drivers: ["sim"], seeds: [1], sequences: 2 })).toThrow(PolicyContractError);
    try {
      runPolicyContract(p, { drivers: ["sim"], seeds: [1], sequences: 2 });
    } catch (e) {
      const r = (e as PolicyContractError).report;
      expect(r.checks.find((c) => c.check === "mixes")!.message).toMatch(/teardown left \d+ handles, \d+ mappings, [1-9]\d* segments/);
      expect((e as Error).message).toMatch(/^policy leaky fails its contract: mixes on sim: seed 1/);
    }
  });

  it("a block reported bigger than the memory behind it", () => {
    const p = broken("liar", (i) => ({
      ...i,
      malloc: (size, stream) => {
        const b = i.malloc(size, stream);
        if (b !== null && size > 20 * MiB) b.size += 2 * MiB; // claims bytes past its segment
        return b;
      },
      free: (b) => i.free(b),
      emptyCache: () => i.emptyCache(),
      teardown: () => i.teardown(),
    }));
    expect(() => runPolicyContract(p, { drivers: ["sim"], seeds: [1], sequences: 1 })).toThrow(/fails its contract/);
  });

  it("reports a driver it does not know as a bad argument", () => {
    expect(() => runPolicyContract("caching", { drivers: ["gpu" as "sim"] })).toThrow(expect.objectContaining({ code: "BAD_ARGUMENT" }));
    expect(new SimDriver().name).toBe("sim");
  });
});
