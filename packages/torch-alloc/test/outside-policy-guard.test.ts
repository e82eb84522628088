import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { createBridge } from "../src/index.js";
import { OP_ALLOC, OP_FREE, STATUS_ERROR, TEXT_LAST_ERROR } from "../src/bridge.js";

/**
 * Live, an outside policy is guarded as in a replay (@gmlake/stitch PolicyGuard): the
 * probe's module that handed 20 live tensors one address, and the one that handed out
 * 0x1000, now get an error for every such allocation (status STATUS_ERROR, the last error
 * naming the module and the rule) and the process is never given overlapping memory; a
 * module cannot stand in for a built-in.
 */
const MiB = 1024 * 1024;
const dir = mkdtempSync(join(tmpdir(), "gmlake-live-guard-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const stitch = JSON.stringify(new URL("../../stitch/dist/index.js", import.meta.url).href);

/** A module exporting caching under `name` whose malloc's blocks pass through `change`. */
function module(file: string, name: string, change: string): string {
  const path = join(dir, file);
  writeFileSync(
    path,
    `import { getPolicy } from ${stitch};
const base = getPolicy("caching");
export default { ...base, name: ${JSON.stringify(name)}, create: (ctx, o) => {
  const i = base.create(ctx, o);
  let first = null;
  const m = i.malloc.bind(i);
  i.malloc = (s, st) => { const b = m(s, st); if (b === null) return null; first ??= b; ${change} };
  return i;
} };
`,
  );
  return path;
}

describe("an outside policy, live", () => {
  it("one address for every tensor: the first is served, each other allocation fails naming the rule", async () => {
    const b = await createBridge({ policy: "one-address", driver: "sim", policyModule: module("one.mjs", "one-address", "return b === first ? b : Object.assign(b, { addr: first.addr });") });
    const first = b.call(OP_ALLOC, 4 * MiB, 0, 0);
    expect(first).toBeGreaterThan(0);
    for (let i = 0; i < 20; i++) {
      expect(b.call(OP_ALLOC, 4 * MiB, 0, 0)).toBe(STATUS_ERROR);
      expect(b.text(TEXT_LAST_ERROR, "")).toMatch(/^policy one-address \(module [^)]*one\.mjs\) malloc\(4194304, stream 0\) returned \[0x[0-9a-f]+, \+\d+\) overlapping the live block/);
    }
    expect(b.call(OP_FREE, first, 0, 0)).toBe(0);
    // the blocks it was refused are still its own: its teardown cannot give them back, and says so
    expect(() => b.live.close()).toThrow(/^policy one-address \(module [^)]*one\.mjs\) teardown left 0 handles, 0 mappings, \d+ segments/);
  });

  it("an address its context never mapped (0x1000) is never handed out", async () => {
    const b = await createBridge({ policy: "made-up", driver: "sim", policyModule: module("made-up.mjs", "made-up", "return Object.assign(b, { addr: 0x1000 });") });
    expect(b.call(OP_ALLOC, MiB, 0, 0)).toBe(STATUS_ERROR);
    expect(b.text(TEXT_LAST_ERROR, "")).toMatch(/0x1000 is not memory its context mapped/);
    expect(() => b.live.close()).toThrow(/teardown left/);
  });

  it("a module exporting a policy named caching is refused at start", async () => {
    const fake = module("fake.mjs", "caching", "return b;");
    await expect(createBridge({ policy: "caching", driver: "sim", policyModule: fake })).rejects.toMatchObject({ code: "DUPLICATE_POLICY", message: expect.stringMatching(/caching is a built-in policy/) });
  });
});
