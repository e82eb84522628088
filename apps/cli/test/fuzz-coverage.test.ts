import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { REPO } from "./run-cli.js";

/**
 * The coverage-guided fuzzer (fuzz/engine.mjs) of the reader and the replay path: every
 * earlier finding replayed through the fuzz target, then a bounded run
 * (FUZZ_COVERAGE_SECONDS, default 30; scripts/fuzz-long.sh runs the long one) that must
 * end with no finding and with coverage growing beyond the seeds.
 */
const SECONDS = Number(process.env.FUZZ_COVERAGE_SECONDS ?? 30);
const dir = join(REPO, "apps/cli/fuzz");

describe("coverage-guided fuzzing", () => {
  it("every regression input is handled (a result or a SnapshotError / BAD_TRACE)", async () => {
    const { fuzzOne } = (await import("../fuzz/target.mjs")) as { fuzzOne: (b: Uint8Array) => void };
    const files = readdirSync(join(dir, "regressions")).filter((f) => !f.endsWith(".md"));
    for (const f of files) expect(() => fuzzOne(new Uint8Array(readFileSync(join(dir, "regressions", f)))), f).not.toThrow();
  });

  it(`a ${SECONDS} s run finds nothing and covers more than its seeds`, () => {
    const r = spawnSync(process.execPath, [join(dir, "engine.mjs"), "--max-seconds", String(SECONDS), "--seed", "20261201", "--quiet"], { cwd: REPO, encoding: "utf8", timeout: (SECONDS + 120) * 1000 });
    expect(r.status, r.stderr).toBe(0);
    const summary = JSON.parse(r.stdout.trim().split("\n").pop()!) as { executions: number; corpus: number; seeds: number; edgesCovered: number; edges: number; findings: number };
    expect(summary.findings).toBe(0);
    expect(summary.executions).toBeGreaterThan(1000);
    expect(summary.corpus).toBeGreaterThan(summary.seeds);
    expect(summary.edgesCovered).toBeGreaterThan(0.3 * summary.edges);
  }, (SECONDS + 180) * 1000);
});
