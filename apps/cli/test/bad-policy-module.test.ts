import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { cli, REPO } from "./run-cli.js";

/**
 * A --policy-module that misbehaves ends in one line naming it, exit 2, in a few seconds:
 * a policy that breaks the engine's rules (the guard), throws in any call, hangs at import
 * or in malloc (the per-call budget), leaves a timer running, calls process.exit, awaits
 * forever at import, leaves an unhandled rejection, blows up its heap at import, or takes a
 * built-in's name (issue 33's module classes; issue 32: not "internal error").
 */
const dir = mkdtempSync(join(REPO, "apps/cli/test/.tmp-bad-policy-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const KIT = JSON.stringify(new URL("../../../packages/stitch/dist/policy-kit.js", import.meta.url).href);
/** A module exporting a policy whose allocator is `body` (a class body over fresh segments). */
function module(file: string, name: string, opts: { top?: string; body?: string } = {}): string {
  writeFileSync(
    join(dir, file),
    `import { Block, registerPolicy } from ${KIT};
${opts.top ?? ""}
class P {
  constructor(ctx) { this.ctx = ctx; }
  malloc(size, stream) {
    const bytes = Math.max(2 << 20, Math.ceil(size / (2 << 20)) * (2 << 20));
    const a = this.ctx.segmentAlloc(bytes, stream);
    return a < 0 ? null : new Block(a, bytes, stream, null);
  }
  free(b) { this.ctx.segmentFree(b.addr, b.size, b.stream); }
  emptyCache() {}
  teardown() {}
  ${opts.body ?? ""}
}
export default registerPolicy({ name: ${JSON.stringify(name)}, description: "x", knobs: {}, create: (ctx) => new P(ctx) });
`,
  );
  return `./${file}`;
}

const env = { GMLAKE_POLICY_BUDGET_S: "3" };
function replayWith(file: string, name: string, extra: string[] = []) {
  const t0 = Date.now();
  const r = cli(["replay", "--policy-module", file, "--policy", name, ...extra], { cwd: dir, env });
  return { ...r, seconds: (Date.now() - t0) / 1000 };
}

function oneLine(r: { code: number; stderr: string; stdout: string }, re: RegExp): void {
  expect(r.code, r.stderr).toBe(2);
  expect(r.stderr.trimEnd().split("\n"), r.stderr).toHaveLength(1);
  expect(r.stderr).toMatch(re);
  expect(r.stderr).not.toMatch(/internal error|    at /);
}

describe("a misbehaving policy module: one line naming it, exit 2", () => {
  it("a policy good enough to replay replays (the stand-in is sound)", () => {
    const r = replayWith(module("good.mjs", "good"), "good", ["--json"]);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout).policy).toBe("good");
  });

  it("every block the same address (utilization 3.978 in the probe): the guard stops it", () => {
    const f = module("same.mjs", "same", { body: `malloc(size, stream) { this.a ??= this.ctx.segmentAlloc(1 << 30, stream); return new Block(this.a, Math.ceil(Math.max(size, 1) / 512) * 512, stream, null); }` });
    oneLine(replayWith(f, "same"), /^gmlake: policy same \(module \.\/same\.mjs\) malloc\(\d+, stream \d+\) returned .* overlapping the live block/);
  });

  it.each(["create", "malloc", "free", "teardown", "counters"])("a throw in %s", (call) => {
    const body = call === "create" ? "" : `${call}() { return this.instance.${call}(); }`;
    const f = call === "create"
      ? (writeFileSync(join(dir, "create.mjs"), `export default { name: "throws-create", description: "x", knobs: {}, create: () => { throw new TypeError("this.instance.free is not a function"); } };`), "./create.mjs")
      : module(`${call}.mjs`, `throws-${call}`, { body });
    oneLine(replayWith(f, `throws-${call}`), new RegExp(`^gmlake: policy throws-${call} \\(module \\./${call}\\.mjs\\) threw in ${call}: TypeError: `));
  });

  it("an endless loop in malloc: stopped after the budget", () => {
    const r = replayWith(module("spin.mjs", "spin", { body: "malloc() { for (;;); }" }), "spin");
    oneLine(r, /^gmlake: policy spin \(module \.\/spin\.mjs\): malloc did not return within 3 s/);
    expect(r.seconds).toBeLessThan(30);
  }, 60_000);

  it("an endless loop at import: stopped after the budget", () => {
    const r = replayWith(module("spin-import.mjs", "spin-import", { top: "for (;;);" }), "spin-import");
    oneLine(r, /^gmlake: policy module \.\/spin-import\.mjs: its import did not finish within 3 s/);
  }, 60_000);

  it("a timer left running: the result, then the process ends", () => {
    const r = replayWith(module("timer.mjs", "timer", { top: "setInterval(() => {}, 1000);" }), "timer", ["--json"]);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout).policy).toBe("timer");
    expect(r.seconds).toBeLessThan(30);
  }, 60_000);

  it("process.exit(0) in malloc", () => {
    oneLine(replayWith(module("exit.mjs", "exit", { body: "malloc() { process.exit(0); }" }), "exit"), /^gmlake: policy exit \(module \.\/exit\.mjs\): ended the thread \(process\.exit\(0\)\?\) in malloc/);
  });

  it("a top-level await that never settles", () => {
    oneLine(replayWith(module("tla.mjs", "tla", { top: "await new Promise(() => {});" }), "tla"), /^gmlake: policy module \.\/tla\.mjs: its import (did not finish within 3 s \(an endless loop, or a top-level await that never settles\?|never finished \(a top-level await)/);
  });

  it("an unhandled rejection", () => {
    oneLine(replayWith(module("reject.mjs", "reject", { top: "Promise.reject(new Error('boom'));" }), "reject"), /^gmlake: policy module \.\/reject\.mjs: an (uncaught error or )?unhandled rejection.*: Error: boom/);
  });

  it("a rejection or a throw from a timer the module set", () => {
    oneLine(replayWith(module("late.mjs", "late", { top: "setTimeout(() => Promise.reject(new Error('late')), 0);" }), "late"), /^gmlake: policy module \.\/late\.mjs: an (uncaught error or )?unhandled rejection.*: Error: late/);
    oneLine(replayWith(module("tick.mjs", "tick", { top: "setTimeout(() => { throw new Error('tick'); }, 0);" }), "tick"), /^gmlake: policy module \.\/tick\.mjs: an uncaught error or unhandled rejection.*: Error: tick/);
  });

  it("a heap blow-up at import", () => {
    // a small heap, so that it is reached in a second (the probe's took 33 s, then a V8 abort)
    const f = module("heap.mjs", "heap", { top: "const hog = []; for (;;) hog.push(new Array(1e6).fill(1.5));" });
    const r = cli(["replay", "--policy-module", f], { cwd: dir, env: { GMLAKE_POLICY_BUDGET_S: "60", NODE_OPTIONS: "--max-old-space-size=256" } });
    oneLine(r, /^gmlake: policy module \.\/heap\.mjs: ran out of JavaScript heap \(in import\)/);
  }, 120_000);

  it("a policy named as a built-in is refused, in replay and compare", () => {
    const f = module("fake-caching.mjs", "caching");
    for (const cmd of ["replay", "compare"]) {
      const r = cli([cmd, "--policy-module", f], { cwd: dir, env });
      oneLine(r, /caching is a built-in policy/);
    }
  });
});
