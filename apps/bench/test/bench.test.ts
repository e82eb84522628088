import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { workloadOf } from "../src/recorded.js";

const here = dirname(fileURLToPath(import.meta.url));
const MAIN = resolve(here, "../dist/main.js");
const SHARED = process.env.GMLAKE_SHARED ?? resolve(here, "../../../../shared");
const SMALL = join(SHARED, "traces", "small");
const haveTraces = existsSync(join(SMALL, "train_default.pickle"));

function bench(args: string[]) {
  return spawnSync(process.execPath, [MAIN, ...args], { encoding: "utf8", timeout: 120_000 });
}

describe("workloadOf pairs a trace with its expandable twin", () => {
  it.each([
    ["gpt2_ft", "gpt2_ft"],
    ["gpt2_ft_expandable", "gpt2_ft"],
    ["small/train_default", "small/train"],
    ["small/train_expandable", "small/train"],
    ["small/default_end", "small/end"],
    ["small/expandable_end", "small/end"],
  ])("%s -> %s", (trace, workload) => expect(workloadOf(trace)).toBe(workload));
});

describe("gmlake-bench", () => {
  it("bad usage exits 2 with one line", () => {
    const r = bench(["--policies", "nope"]);
    expect(r.status).toBe(2);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toMatch(/unknown policy 'nope'/);
    const d = bench(["--traces", join(tmpdir(), "no-such-dir-gmlake")]);
    expect(d.status).toBe(2);
    expect(d.stderr).toMatch(/no trace folder/);
  });

  it.skipIf(!haveTraces)("runs every policy on a trace folder and writes results, summary and plots", () => {
    const out = mkdtempSync(join(tmpdir(), "gmlake-bench-"));
    const r = bench(["--traces", SMALL, "--only", "train", "--capacity-factor", "1.02", "--out", out]);
    expect(r.status, r.stderr).toBe(0);
    const j = JSON.parse(readFileSync(join(out, "results.json"), "utf8"));
    expect(j.recorded.map((x: { trace: string }) => x.trace)).toEqual(["train_default", "train_expandable"]);
    const policies = new Set(j.results.map((x: { policy: string }) => x.policy));
    for (const p of ["caching", "expandable", "gmlake", "vms"]) expect(policies.has(p)).toBe(true);
    // 2 traces x 4 policies on sim, plus the same under 1.02x peak requested
    expect(j.results).toHaveLength(16);
    for (const row of j.results) {
      expect(row.error).toBeNull();
      expect(row.peakReservedBytes).toBeGreaterThanOrEqual(row.oom ? 0 : row.peakRequestedBytes);
    }
    // The caching model on the default-mode trace reserves what PyTorch reserved.
    const caching = j.results.find((x: { trace: string; policy: string; capacityBytes: number | null }) => x.trace === "train_default" && x.policy === "caching" && x.capacityBytes === null);
    expect(caching.peakReservedBytes).toBe(j.recorded[0].peakReservedBytes);
    const md = readFileSync(join(out, "summary.md"), "utf8");
    expect(md).toMatch(/\| train_default \| caching \| sim \|/);
    expect(md).toMatch(/PyTorch default: reserved/);
    expect(readdirSync(out).filter((f) => f.endsWith(".svg")).sort()).toEqual(["train_default.svg", "train_expandable.svg"]);
    // A second run into the same folder is refused before any work, unless --force.
    const again = bench(["--traces", SMALL, "--only", "train_default", "--policies", "caching", "--out", out]);
    expect(again.status).toBe(2);
    expect(again.stderr).toMatch(/^gmlake-bench: --out .*results\.json: exists \(pass --force to replace it\)\n$/);
    expect(readFileSync(join(out, "summary.md"), "utf8")).toBe(md);
    const forced = bench(["--traces", SMALL, "--only", "train_default", "--policies", "caching", "--out", out, "--force"]);
    expect(forced.status, forced.stderr).toBe(0);
    expect(readFileSync(join(out, "summary.md"), "utf8")).not.toBe(md);
  });
});
