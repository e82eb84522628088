import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { createDriver, SimDriver } from "@gmlake/vmm";
import { Allocator, getPolicy, listPolicies, registerPolicy, replay, unregisterPolicy } from "../src/index.js";
import { noCachePolicy } from "./example-policy.js";
import { MiB } from "./helpers.js";

describe("the README's example policy", () => {
  it("is the code in the README", () => {
    const readme = readFileSync(new URL("../README.md", import.meta.url), "utf8");
    const file = readFileSync(new URL("./example-policy.ts", import.meta.url), "utf8").replace('from "../src/policy-kit.js";', 'from "@gmlake/stitch/policy";');
    expect(readme).toContain(file);
  });

  it("registers by name and serves allocations from fresh chunks", () => {
    expect(getPolicy("no-cache")).toBe(noCachePolicy);
    expect(listPolicies().map((p) => p.name)).toEqual(expect.arrayContaining(["caching", "expandable", "no-cache"]));
    const d = new SimDriver();
    const a = new Allocator("no-cache", d, { checkInvariants: 1, options: { chunkBytes: 4 * MiB } });
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
    const a = new Allocator("no-cache", driver, { integrity: true, checkInvariants: 1 });
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
    expect(() => registerPolicy(noCachePolicy)).toThrow(expect.objectContaining({ code: "DUPLICATE_POLICY" }));
    expect(() => registerPolicy({ ...noCachePolicy, name: "Bad Name" })).toThrow(expect.objectContaining({ code: "BAD_ARGUMENT" }));
    registerPolicy({ ...noCachePolicy, name: "tmp-policy" });
    expect(getPolicy("tmp-policy").description).toBe(noCachePolicy.description);
    registerPolicy({ ...noCachePolicy, name: "tmp-policy", description: "v2" }, { replace: true });
    expect(getPolicy("tmp-policy").description).toBe("v2");
    expect(unregisterPolicy("tmp-policy")).toBe(true);
    expect(() => getPolicy("tmp-policy")).toThrow(expect.objectContaining({ code: "UNKNOWN_POLICY" }));
  });
});
