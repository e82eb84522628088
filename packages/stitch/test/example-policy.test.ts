import { spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { createDriver, SimDriver } from "@gmlake/vmm";
import { Allocator, POLICY_REGISTRY_VERSION, getPolicy, listPolicies, registerPolicy, replay, unregisterPolicy } from "../src/index.js";
import { freshChunks } from "./example-policy.js";
import { MiB } from "./helpers.js";

describe("the README's example policy (examples/my-policy)", () => {
  it("registers by name and serves allocations from fresh chunks", () => {
    expect(getPolicy("fresh-chunks")).toBe(freshChunks);
    expect(listPolicies().map((p) => p.name)).toEqual(expect.arrayContaining(["caching", "expandable", "fresh-chunks"]));
    const d = new SimDriver();
    const a = new Allocator("fresh-chunks", d, { checkInvariants: 1, options: { chunkBytes: 4 * MiB } });
    const x = a.malloc(5 * MiB);
    expect(x.size).toBe(8 * MiB);
    expect(a.stats.reservedBytes).toBe(8 * MiB);
    a.free(x);
    expect(a.stats.reservedBytes).toBe(0);
    expect(d.stats().calls.memCreate).toBe(2);
    a.close();
  });

  it("replays with integrity on the host driver", () => {
    const driver = createDriver("host", { capacityBytes: 512 * MiB });
    const a = new Allocator("fresh-chunks", driver, { integrity: true, checkInvariants: 1 });
    const blocks = [a.malloc(3 * MiB), a.malloc(100), a.malloc(7 * MiB)];
    for (const b of blocks) a.free(b);
    expect(a.integrity!.errors).toBe(0);
    a.close();
    driver.close();
    expect(typeof replay).toBe("function");
  });
});

describe("the registry", () => {
  it("rejects duplicates and bad names, allows replacing and removing", () => {
    registerPolicy(freshChunks); // the same object again: nothing changes
    expect(() => registerPolicy({ ...freshChunks })).toThrow(expect.objectContaining({ code: "DUPLICATE_POLICY" }));
    expect(() => registerPolicy({ ...freshChunks, name: "Bad Name" })).toThrow(expect.objectContaining({ code: "BAD_ARGUMENT" }));
    registerPolicy({ ...freshChunks, name: "tmp-policy" });
    expect(getPolicy("tmp-policy").description).toBe(freshChunks.description);
    registerPolicy({ ...freshChunks, name: "tmp-policy", description: "v2" }, { replace: true });
    expect(getPolicy("tmp-policy").description).toBe("v2");
    expect(unregisterPolicy("tmp-policy")).toBe(true);
    expect(() => getPolicy("tmp-policy")).toThrow(expect.objectContaining({ code: "UNKNOWN_POLICY" }));
  });
});

describe("one registry per process", () => {
  it("lives on globalThis under Symbol.for: a second copy of the package sees the same policies", async () => {
    const g = globalThis as Record<symbol, { version: number; policies: Map<string, unknown> }>;
    const shared = g[Symbol.for("@gmlake/stitch/policy-registry")]!;
    expect(shared.version).toBe(POLICY_REGISTRY_VERSION);
    expect(shared.policies.get("fresh-chunks")).toBe(freshChunks);
  });

  it("a copy of another registry version refuses to share it, in one line", () => {
    const index = new URL("../dist/index.js", import.meta.url).href;
    const script = `globalThis[Symbol.for("@gmlake/stitch/policy-registry")] = { version: 1, policies: new Map() };
const s = await import(${JSON.stringify(index)});
try { s.listPolicies(); console.log("shared"); } catch (e) { console.log(e.code + ": " + e.message); }`;
    const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" });
    expect(r.stdout.trim()).toBe(
      `BAD_ARGUMENT: two copies of @gmlake/stitch with different policy registries (version 1 and ${POLICY_REGISTRY_VERSION}) are loaded in this process; install one version (e.g. pnpm dedupe)`,
    );
  });
});
