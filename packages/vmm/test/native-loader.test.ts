// Where the addon comes from (src/native.ts): the source build, the prebuilt platform
// package, or nowhere — then sim still works and host/cuda fail with one line saying what
// to do. Child processes, because a process caches its first load.
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

import { describe, expect, it } from "vitest";

import { locateAddon, missingAddonHint, platformTriple, prebuiltPackage } from "../src/native.js";

const dist = fileURLToPath(new URL("../dist/index.js", import.meta.url));
const prebuiltHere = platformTriple() === "linux-x64-gnu";

/** Runs `body` (an async function of the built package `m`) in a fresh node; its JSON result. */
function inChild(body: string, env: Record<string, string> = {}): unknown {
  const code = `const m = await import(${JSON.stringify(dist)}); console.log(JSON.stringify(await (${body})(m)));`;
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", code], { encoding: "utf8", env: { ...process.env, ...env } });
  if (r.status !== 0) throw new Error(`child exited ${r.status}: ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split("\n").at(-1) ?? "null");
}

describe("locating the addon", () => {
  it("names this machine's platform package the way the prebuilt is published", () => {
    expect(platformTriple()).toMatch(/^[a-z0-9]+-[a-z0-9]+(-(gnu|musl))?$/);
    expect(prebuiltPackage("linux-x64-gnu")).toBe("@gmlake/vmm-linux-x64-gnu");
  });

  it("prefers $GMLAKE_VMM_ADDON, then a source build", () => {
    const where = locateAddon();
    expect(where.path).toBeDefined();
    if (!process.env.GMLAKE_VMM_ADDON) expect(where.from).toBe("source build");
  });

  it("without an addon: sim works, host fails with one VMM_ADDON_NOT_LOADED line that says what to do", () => {
    const r = inChild(
      `async (m) => {
        const sim = m.createDriver("sim"); const h = sim.memCreate(2 << 20); sim.memRelease(h);
        try { m.createDriver("host"); return { sim: true, host: "no error" }; }
        catch (e) { return { sim: true, code: e.code, message: e.message, isVmmError: e instanceof m.VmmError }; }
      }`,
      { GMLAKE_VMM_ADDON: "/nonexistent/gmlake_vmm.node" },
    ) as { sim: boolean; code: string; message: string; isVmmError: boolean };
    expect(r.sim).toBe(true);
    expect(r.code).toBe("VMM_ADDON_NOT_LOADED");
    expect(r.isVmmError).toBe(true);
    expect(r.message).not.toContain("\n");
    expect(r.message).toContain("GMLAKE_VMM_ADDON=/nonexistent/gmlake_vmm.node does not exist");
  });

  it("the hint for a platform with no prebuilt gives the source build's recipe in one line", () => {
    const h = missingAddonHint("linux-arm64-musl");
    expect(h).not.toContain("\n");
    expect(h).toContain("no prebuilt for linux-arm64-musl (there are: linux-x64-gnu)");
    expect(h).toContain("the sim driver needs none");
    expect(h).toMatch(/install cmake and a C\+\+17 compiler, then `npm i -D cmake-js(@[\d.]+)? node-addon-api(@[\d.]+)? && npm rebuild @gmlake\/vmm`/);
    expect(missingAddonHint("linux-x64-gnu")).toContain("@gmlake/vmm-linux-x64-gnu is not installed (optional dependencies omitted? `npm i @gmlake/vmm-linux-x64-gnu@");
  });

  it.skipIf(!prebuiltHere)("the prebuilt platform package resolves and runs the host driver (linux-x64-gnu)", () => {
    const path = createRequire(import.meta.url).resolve("@gmlake/vmm-linux-x64-gnu/gmlake_vmm.node");
    const r = inChild(
      `async (m) => {
        const d = m.createDriver("host"); const g = d.device.granularity.minimum;
        const a = d.memCreate(g), b = d.memCreate(g), va = d.memAddressReserve(2 * g);
        d.memMap(va, g, 0, a); d.memMap(va + g, g, 0, b); d.memSetAccess(va, 2 * g);
        d.write(va + g - 4, new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8]));
        const back = [...d.read(va + g - 4, 8)];
        d.memUnmap(va, 2 * g); d.memAddressFree(va, 2 * g); d.memRelease(a); d.memRelease(b);
        return back;
      }`,
      { GMLAKE_VMM_ADDON: path },
    );
    expect(r).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
  });
});
