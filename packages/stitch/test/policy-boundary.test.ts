import { readdirSync, readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { SimDriver } from "@gmlake/vmm";
import { Allocator, BUILTIN_POLICIES, type Policy, type PolicyContext } from "../src/index.js";

const dir = new URL("../src/policies/", import.meta.url);
const kit = readFileSync(new URL("../src/policy-kit.ts", import.meta.url), "utf8");
/** The modules @gmlake/stitch/policy is made of, as a policy file imports them. */
const kitModules = new Set([...kit.matchAll(/from "\.\/([^"]+)"/g)].map((m) => `../${m[1]}`));
const kitPackages = new Set([...kit.matchAll(/from "(@[^"]+)"/g)].map((m) => m[1]));

describe("the policy boundary", () => {
  const files = readdirSync(dir).filter((f) => f.endsWith(".ts"));
  it.each(files)("src/policies/%s imports only the policy kit and its sibling policy files", (f) => {
    const src = readFileSync(new URL(f, dir), "utf8");
    const imports = [...src.matchAll(/^\s*(?:import|export)[^"';]*from\s+"([^"]+)"/gm)].map((m) => m[1]!);
    expect(imports.length).toBeGreaterThan(0);
    for (const m of imports) {
      const ok = kitModules.has(m) || kitPackages.has(m) || (m.startsWith("./") && files.includes(m.slice(2).replace(/\.js$/, ".ts")));
      expect(ok, `${f} imports ${m}`).toBe(true);
    }
    expect(src).not.toMatch(/@gmlake\/(vmm|chunk-pool)/);
  });

  it("the kit reaches neither the driver nor the chunk pool nor the engine", () => {
    for (const m of kitModules) expect(["../core/context.js", "../core/engine.js", "../core/stats.js", "../replay/replay.js"]).not.toContain(m);
    expect([...kitPackages]).toEqual(["@gmlake/trace"]);
  });

  it.each(BUILTIN_POLICIES.map((p) => p.name))("%s gets a context with no driver, chunk pool or statistics", (name) => {
    let seen: PolicyContext | null = null;
    const p = BUILTIN_POLICIES.find((x) => x.name === name)!;
    const spy: Policy = { ...p, name: `${name}-spy`, create: (ctx, o) => ((seen = ctx), p.create(ctx, o)) };
    const a = new Allocator(spy, new SimDriver());
    const ctx = seen as unknown as Record<string, unknown>;
    for (const k of ["driver", "chunks", "stats", "recorder", "plainSegments", "reservations"]) expect(k in ctx, k).toBe(false);
    // what it can read it cannot write
    expect(() => ((ctx as { reservedBytes: number }).reservedBytes = 1)).toThrow();
    expect(Object.isFrozen(ctx.device)).toBe(true);
    // the engine's own events come only from the engine's calls
    expect(() => (ctx as unknown as PolicyContext).record(0, 0, 1, 0)).toThrow(expect.objectContaining({ code: "BAD_ARGUMENT" }));
    a.close();
  });
});
