import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { MAIN, SMALL, haveTraces, scratchDir } from "./paths.js";

/**
 * A --policy-module that hangs, exits or throws in the bench: the task it runs fails with
 * one line naming it (a per-call budget, GMLAKE_POLICY_BUDGET_S), the other tasks of the
 * sweep go on, and the bench exits 2 (bad input), in worker processes and in its own; a
 * module whose import does not end stops the bench in one line before any run.
 */
const dir = scratchDir(".tmp-bad-policy-");
const KIT = JSON.stringify(new URL("../../../packages/stitch/dist/policy-kit.js", import.meta.url).href);

/** A policy mapping one fresh chunk range per block, whose malloc runs `bad` after its 50th call. */
function module(file: string, name: string, bad: string): string {
  writeFileSync(
    join(dir, file),
    `import { Block, registerPolicy } from ${KIT};
const G = 2 << 20;
export default registerPolicy({
  name: ${JSON.stringify(name)}, description: "x", knobs: {},
  create: (ctx) => {
    let n = 0;
    return {
      malloc(size, stream) {
        if (++n > 50) { ${bad} }
        const c = ctx.createChunk(Math.max(G, Math.ceil(size / G) * G));
        if (c === null) return null;
        const va = ctx.reserve(c.size);
        ctx.mapChunks(va, [c], stream);
        return Object.assign(new Block(va, c.size, stream, null), { data: c });
      },
      free(b) { ctx.unmapChunks(b.addr, [b.data], b.stream); ctx.reserveFree(b.addr, b.size); ctx.releaseChunk(b.data); },
      emptyCache() {},
      teardown() {},
    };
  },
});
`,
  );
  return join(dir, file);
}

function bench(args: string[]) {
  const t0 = Date.now();
  const r = spawnSync(process.execPath, [MAIN, ...args], { encoding: "utf8", timeout: 120_000, cwd: dir, env: { ...process.env, GMLAKE_POLICY_BUDGET_S: "3" } });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr, seconds: (Date.now() - t0) / 1000 };
}

describe.skipIf(!haveTraces)("a misbehaving policy module in the bench", () => {
  it.each([
    ["spin", "for (;;);", /^BAD_POLICY: policy spin \(module .*spin\.mjs\): malloc did not return within 3 s/],
    ["exits", "process.exit(0);", /^BAD_POLICY: policy exits \(module .*exits\.mjs\): ended the thread \(process\.exit\(0\)\?\) in malloc/],
    ["throws", "throw new TypeError('nope');", /^BAD_POLICY: policy throws \(module .*throws\.mjs\) threw in malloc: TypeError: nope/],
  ])("%s: that task fails naming it, the others run, exit 2 (1 and 2 worker processes)", (name, bad, error) => {
    const m = module(`${name}.mjs`, name, bad);
    for (const workers of ["1", "2"]) {
      const out = join(dir, `out-${name}-${workers}`);
      const r = bench(["--traces", SMALL, "--only", "train_default", "--policy-module", m, "--policies", `caching,${name}`, "--cpu-workers", workers, "--out", out]);
      expect(r.code, r.stderr).toBe(2);
      expect(r.seconds).toBeLessThan(60);
      const res = JSON.parse(readFileSync(join(out, "results.json"), "utf8")) as { results: { policy: string; error: string | null; events: number }[] };
      expect(res.results.map((x) => x.policy)).toEqual(["caching", name]);
      expect(res.results[0]!.error).toBeNull();
      expect(res.results[0]!.events).toBeGreaterThan(500);
      expect(res.results[1]!.error).toMatch(error);
    }
  }, 120_000);

  it("a timer a module leaves running does not keep the bench alive", () => {
    const m = module("timer.mjs", "timer", "");
    writeFileSync(m, readFileSync(m, "utf8") + "setInterval(() => {}, 1000);\n");
    for (const workers of ["1", "2"]) {
      const r = bench(["--traces", SMALL, "--only", "train_default", "--policy-module", m, "--policies", "caching,timer", "--cpu-workers", workers, "--out", join(dir, `out-timer-${workers}`)]);
      expect(r.code, r.stderr).toBe(0);
      expect(r.seconds).toBeLessThan(60);
    }
  }, 150_000);

  it("an import that never ends stops the bench in one line before any run", () => {
    writeFileSync(join(dir, "spin-import.mjs"), "for (;;);\n");
    const r = bench(["--traces", SMALL, "--policy-module", "./spin-import.mjs", "--out", join(dir, "never")]);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toMatch(/^gmlake-bench: policy module .*spin-import\.mjs: its import did not finish within 3 s/);
    expect(existsSync(join(dir, "never"))).toBe(false);
  }, 60_000);
});
