import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { REPO } from "./run-cli.js";

/**
 * The fuzz target of outside policies (fuzz/policy-target.mjs: generated modules with bugs,
 * run live and replayed): every earlier finding replayed, then a bounded coverage-guided run
 * (FUZZ_POLICY_SECONDS, default 20; scripts/fuzz-long.sh runs the long one) that must end with
 * no finding: no error but a PolicyFault, no wrong result that no error announced.
 */
const SECONDS = Number(process.env.FUZZ_POLICY_SECONDS ?? 20);
const dir = join(REPO, "apps/cli/fuzz");

describe("fuzzing outside policies", () => {
  it("every regression input ends in a PolicyFault or a result that adds up", async () => {
    const { fuzzOne } = (await import("../fuzz/policy-target.mjs")) as { fuzzOne: (b: Uint8Array) => void };
    const files = readdirSync(join(dir, "regressions-policy")).filter((f) => f.endsWith(".bin"));
    expect(files.length).toBeGreaterThan(0);
    for (const f of files) expect(() => fuzzOne(new Uint8Array(readFileSync(join(dir, "regressions-policy", f)))), f).not.toThrow();
  });

  it(`a ${SECONDS} s run finds nothing`, () => {
    const r = spawnSync(process.execPath, [join(dir, "engine.mjs"), "--target", "policy-target.mjs", "--max-seconds", String(SECONDS), "--seed", "20261202", "--quiet"], { cwd: REPO, encoding: "utf8", timeout: (SECONDS + 120) * 1000 });
    expect(r.status, r.stderr).toBe(0);
    const summary = JSON.parse(r.stdout.trim().split("\n").pop()!) as { executions: number; corpus: number; seeds: number; findings: number };
    expect(summary.findings).toBe(0);
    expect(summary.executions).toBeGreaterThan(500);
    expect(summary.corpus).toBeGreaterThan(summary.seeds);
  }, (SECONDS + 180) * 1000);
});
