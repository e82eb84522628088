import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { CLI, REPO, TRACES, haveTraces, json } from "./run-cli.js";

/**
 * A policy written from the stitch README alone, in a folder outside the repo with its own
 * package.json (packages/stitch/examples/my-policy: the README's "Writing a policy" is its
 * my-policy.js). @gmlake/stitch is installed there as a copy of what the package ships
 * (package.json + dist, as from a tarball), its dependencies by path: so the policy runs
 * on a second copy of @gmlake/stitch beside the CLI's own, as a user's install can. It
 * passes the exported contract suite on sim and host, and runs in `gmlake compare`,
 * `gmlake replay` and apps/bench through --policy-module, by path and by package name.
 */
const EXAMPLE = join(REPO, "packages/stitch/examples/my-policy");
const BENCH = join(REPO, "apps/bench/dist/main.js");
const outside = mkdtempSync(join(tmpdir(), "gmlake-outside-"));
const pkg = join(outside, "my-policy");
const user = join(outside, "user"); // a project that depends on the my-policy package

function install(): void {
  mkdirSync(pkg, { recursive: true });
  for (const f of ["my-policy.js", "contract.mjs"]) cpSync(join(EXAMPLE, f), join(pkg, f));
  const manifest = JSON.parse(readFileSync(join(EXAMPLE, "package.json"), "utf8"));
  manifest.dependencies["@gmlake/stitch"] = `file:${join(REPO, "packages/stitch")}`;
  writeFileSync(join(pkg, "package.json"), JSON.stringify(manifest, null, 2));
  // @gmlake/stitch as a tarball installs it (its "files"), its own dependencies linked by path
  const stitch = join(pkg, "node_modules/@gmlake/stitch");
  mkdirSync(stitch, { recursive: true });
  cpSync(join(REPO, "packages/stitch/package.json"), join(stitch, "package.json"));
  cpSync(join(REPO, "packages/stitch/dist"), join(stitch, "dist"), { recursive: true });
  const deps = Object.keys((JSON.parse(readFileSync(join(REPO, "packages/stitch/package.json"), "utf8")) as { dependencies: Record<string, string> }).dependencies);
  for (const dep of deps) symlinkSync(join(REPO, "packages", dep.replace("@gmlake/", "")), join(pkg, "node_modules", dep), "dir");
  mkdirSync(join(user, "node_modules"), { recursive: true });
  symlinkSync(pkg, join(user, "node_modules/my-policy"), "dir");
}
install();

function run(args: string[], cwd: string) {
  const r = spawnSync(process.execPath, args, { cwd, encoding: "utf8", timeout: 180_000, maxBuffer: 64 * 2 ** 20 });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

describe("a policy from outside the repo", () => {
  it("is the README's example, and shorter than the README's old one", () => {
    const readme = readFileSync(join(REPO, "packages/stitch/README.md"), "utf8");
    expect(readme).toContain(readFileSync(join(EXAMPLE, "my-policy.js"), "utf8"));
    expect(readme).toContain(readFileSync(join(EXAMPLE, "contract.mjs"), "utf8"));
    // the section was 111 lines (708 words) with a TypeScript example that reached into the engine
    const start = readme.indexOf("## Writing a policy");
    const section = readme.slice(start, readme.indexOf("\n## ", start + 1));
    expect(section.trimEnd().split("\n").length).toBeLessThan(111);
    expect(resolve(outside).startsWith(REPO)).toBe(false);
  });

  it("passes the exported contract suite on sim and host (npm test in its folder)", () => {
    const r = run(["contract.mjs"], pkg);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^fresh-chunks: 6 contract checks passed/);
  }, 180_000);

  it("runs in gmlake compare --policy-module ./my-policy.js, beside the built-ins, with its knob", () => {
    const j = json<{ rows: { policy: string; peakReservedBytes: number; integrityErrors: number }[] }>(
      run([CLI, "compare", "--policy-module", "./my-policy.js", "--set", "chunkBytes=4MiB", "--json"], pkg),
    );
    expect(j.rows.map((r) => r.policy)).toEqual(["caching", "expandable", "gmlake", "vms", "fresh-chunks"]);
    const bad = run([CLI, "compare", "--policy-module", "./my-policy.js", "--set", "chunkBytes=lots"], pkg);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/^gmlake: fresh-chunks\.chunkBytes accepts a byte count/);
  }, 180_000);

  it("runs in gmlake replay, by path and as an installed package, on sim and host", () => {
    const sim = json<{ policy: string; events: number }>(run([CLI, "replay", "--policy-module", "./my-policy.js", "--json"], pkg));
    expect(sim.policy).toBe("fresh-chunks");
    expect(sim.events).toBeGreaterThan(500);
    const host = json<{ policy: string; integrityErrors: number; integrityChecked: number }>(
      run([CLI, "replay", "--policy-module", "my-policy", "--policy", "fresh-chunks", "--driver", "host", "--json"], user),
    );
    expect(host.integrityErrors).toBe(0);
    expect(host.integrityChecked).toBeGreaterThan(500);
    const listed = json<{ policies: { name: string; knobs: { name: string }[] }[] }>(run([CLI, "policies", "fresh-chunks", "--policy-module", "my-policy", "--json"], user));
    expect(listed.policies[0]!.knobs.map((k) => k.name)).toEqual(["chunkBytes"]);
  }, 180_000);

  it("a module that is not there, or exports no policy, is bad input", () => {
    const none = run([CLI, "replay", "--policy-module", "./nope.js"], pkg);
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/^gmlake: --policy-module: policy module \.\/nope\.js: no such file/);
    writeFileSync(join(pkg, "empty.js"), "export default 42;\n");
    const empty = run([CLI, "compare", "--policy-module", "./empty.js"], pkg);
    expect(empty.code).toBe(2);
    expect(empty.stderr.trim().split("\n")).toHaveLength(1);
    expect(empty.stderr).toMatch(/no policy as its default export/);
  });

  it.skipIf(!haveTraces || !existsSync(BENCH))("runs in apps/bench --policy-module, in its worker processes", () => {
    const out = join(outside, "bench");
    const r = run([BENCH, "--traces", join(TRACES, "small"), "--only", "train_default", "--policy-module", "./my-policy.js", "--policies", "caching,fresh-chunks", "--cpu-workers", "2", "--out", out], pkg);
    expect(r.code, r.stderr).toBe(0);
    const res = JSON.parse(readFileSync(join(out, "results.json"), "utf8")) as { results: { policy: string; error: string | null; events: number }[] };
    expect(res.results.map((x) => [x.policy, x.error])).toEqual([
      ["caching", null],
      ["fresh-chunks", null],
    ]);
    expect(res.results[1]!.events).toBeGreaterThan(500);
  }, 180_000);
});
