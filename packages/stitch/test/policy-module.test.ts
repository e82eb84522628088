import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { getPolicy, loadPolicyModule, loadPolicyModules, policyModuleOf, unregisterPolicy } from "../src/index.js";

/**
 * The one policy-module loader, of the CLI's --policy-module, apps/bench and the live
 * engine's policyModule (@gmlake/torch-alloc's tests hold its bridge to the same): a
 * module's default export is a policy or a list of them, found by path, file: URL or
 * package name. A module that is not there, does not load or exports no policy by default
 * is StitchError BAD_MODULE; a built-in's name, or another policy's, DUPLICATE_POLICY.
 */
const dir = mkdtempSync(join(import.meta.dirname, ".tmp-module-"));
const registered: string[] = [];
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
  for (const n of registered) unregisterPolicy(n);
});
const stitch = JSON.stringify(new URL("../src/index.ts", import.meta.url).href);

/** A file in `dir` importing stitch's getPolicy and registerPolicy; returns its ./ spec. */
function module(file: string, body: string): string {
  writeFileSync(join(dir, file), `import { getPolicy, registerPolicy } from ${stitch};\n${body}\n`);
  return `./${file}`;
}
/** A copy of caching named `name` (the module's text). */
const copy = (name: string) => `{ ...getPolicy("caching"), name: ${JSON.stringify(name)}, description: "caching under another name" }`;
const error = (code: string, message: RegExp) => ({ name: "StitchError", code, message: expect.stringMatching(message) });

describe("loadPolicyModule", () => {
  it("registers a default export of one policy, or of a list, and notes the module", async () => {
    const one = module("one.mjs", `export default ${copy("mod-one")};`);
    const [p] = await loadPolicyModule(one, dir);
    registered.push("mod-one");
    expect(p).toBe(getPolicy("mod-one"));
    expect(policyModuleOf(p!)).toBe(one);
    const list = module("list.mjs", `export default [${copy("mod-a")}, ${copy("mod-b")}];`);
    const got = await loadPolicyModule(list, dir);
    registered.push("mod-a", "mod-b");
    expect(got.map((x) => x.name)).toEqual(["mod-a", "mod-b"]);
  });

  it("by a file: URL too; loading a module again, or one that registered itself, changes nothing", async () => {
    const self = module("self.mjs", `export default registerPolicy(${copy("mod-self")});`);
    registered.push("mod-self");
    const [a] = await loadPolicyModule(self, dir);
    const [b] = await loadPolicyModule(pathToFileURL(join(dir, "self.mjs")).href, "/");
    expect(b).toBe(a);
    expect(await loadPolicyModules([self, self], dir)).toEqual(["mod-self"]);
  });

  it("BAD_MODULE: not there, not loading, no policy as its default export", async () => {
    await expect(loadPolicyModule("./nope.mjs", dir)).rejects.toMatchObject(error("BAD_MODULE", /^policy module \.\/nope\.mjs: no such file/));
    await expect(loadPolicyModule("no-such-package-here", dir)).rejects.toMatchObject(error("BAD_MODULE", /no package of that name installed/));
    await expect(loadPolicyModule("file://elsewhere/x.mjs", dir)).rejects.toMatchObject(error("BAD_MODULE", /not a file URL of this machine/));
    writeFileSync(join(dir, "broken.mjs"), "export default {;\n");
    await expect(loadPolicyModule("./broken.mjs", dir)).rejects.toMatchObject(error("BAD_MODULE", /^cannot load the policy module \.\/broken\.mjs: /));
    const none = /has no policy as its default export/;
    for (const [file, body] of [
      ["named.mjs", `export const policy = ${copy("mod-named")};`],
      ["empty.mjs", "export default [];"],
      ["number.mjs", "export default 42;"],
      ["mixed.mjs", `export default [${copy("mod-mixed")}, 42];`],
    ] as const) {
      await expect(loadPolicyModule(module(file, body), dir)).rejects.toMatchObject(error("BAD_MODULE", none));
    }
    expect(() => getPolicy("mod-named")).toThrow(/unknown policy/);
  });

  it("DUPLICATE_POLICY: a built-in's name, or another policy's", async () => {
    await expect(loadPolicyModule(module("fake.mjs", `export default ${copy("caching")};`), dir)).rejects.toMatchObject(
      error("DUPLICATE_POLICY", /caching is a built-in policy/),
    );
    const first = module("first.mjs", `export default ${copy("mod-twice")};`);
    await loadPolicyModule(first, dir);
    registered.push("mod-twice");
    await expect(loadPolicyModule(module("second.mjs", `export default ${copy("mod-twice")};`), dir)).rejects.toMatchObject(
      error("DUPLICATE_POLICY", /a policy named mod-twice is already registered/),
    );
  });
});
