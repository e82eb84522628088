import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { pickle } from "@gmlake/trace";
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
    // a run that stopped at an out-of-memory shows OOM, not the figures it had reached
    const oomRows = j.results.filter((x: { oom: unknown }) => x.oom);
    expect(oomRows.length).toBeGreaterThan(0); // expandable at 1.02x on small/train_*
    for (const row of oomRows) {
      expect(md).toMatch(new RegExp(`\\| ${row.trace} \\| ${row.policy} \\| sim \\| [^|]+ \\| [\\d.]+ \\| OOM \\| - \\|`));
    }
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

describe.skipIf(!haveTraces)("--shard and merge", () => {
  /** A row without what differs between two runs of the same task: its wall time and speed. */
  const steady = (r: Record<string, unknown>) => {
    const { wallMs: _w, eventsPerSecond: _e, ...rest } = r;
    return rest;
  };

  it("three shards merged equal one whole run: the same rows, recorded figures and plots", () => {
    const root = mkdtempSync(join(tmpdir(), "gmlake-shards-"));
    const args = ["--traces", SMALL, "--only", "train,default", "--capacity-factor", "1.05"];
    const whole = bench([...args, "--out", join(root, "whole")]);
    expect(whole.status, whole.stderr).toBe(0);
    for (let i = 0; i < 3; i++) {
      const s = bench([...args, "--shard", `${i}/3`, "--out", join(root, `s${i}`)]);
      expect(s.status, s.stderr).toBe(0);
      // a shard draws no plots: they would miss the other shards' policies
      expect(readdirSync(join(root, `s${i}`)).filter((f) => f.endsWith(".svg"))).toEqual([]);
    }
    // the order the folders are given in does not matter
    const m = bench(["merge", join(root, "s2"), join(root, "s0"), join(root, "s1"), "--out", join(root, "merged")]);
    expect(m.status, m.stderr).toBe(0);
    const a = JSON.parse(readFileSync(join(root, "whole", "results.json"), "utf8"));
    const b = JSON.parse(readFileSync(join(root, "merged", "results.json"), "utf8"));
    expect(b.shard).toBeNull();
    expect(b.plan).toEqual(a.plan);
    expect(b.recorded).toEqual(a.recorded);
    expect(b.results.length).toBe(a.plan.tasks);
    expect(b.results.map(steady)).toEqual(a.results.map(steady));
    const svgs = readdirSync(join(root, "whole")).filter((f) => f.endsWith(".svg")).sort();
    expect(svgs.length).toBeGreaterThan(1);
    expect(readdirSync(join(root, "merged")).filter((f) => f.endsWith(".svg")).sort()).toEqual(svgs);
    for (const f of svgs) expect(readFileSync(join(root, "merged", f), "utf8")).toBe(readFileSync(join(root, "whole", f), "utf8"));
    expect(readFileSync(join(root, "merged", "summary.md"), "utf8")).toMatch(/merged from 3 shards/);

    // a missing shard, a shard twice, a shard of another sweep: bad input, one line, exit 2
    const missing = bench(["merge", join(root, "s0"), join(root, "s1"), "--out", join(root, "x")]);
    expect(missing.status).toBe(2);
    expect(missing.stderr).toMatch(/missing shard\(s\) 2\/3/);
    const twice = bench(["merge", join(root, "s0"), join(root, "s0"), join(root, "s1"), "--out", join(root, "x")]);
    expect(twice.status).toBe(2);
    expect(twice.stderr).toMatch(/given twice/);
    const other = bench(["--traces", SMALL, "--only", "train", "--shard", "2/3", "--out", join(root, "o2")]);
    expect(other.status, other.stderr).toBe(0);
    const mixed = bench(["merge", join(root, "s0"), join(root, "s1"), join(root, "o2"), "--out", join(root, "x")]);
    expect(mixed.status).toBe(2);
    expect(mixed.stderr).toMatch(/another sweep/);
    expect(bench(["--shard", "3/3"]).stderr).toMatch(/invalid --shard '3\/3'/);
  }, 240_000);
});

describe.skipIf(!haveTraces)("merge knows what a sweep is (issue 33)", () => {
  const root = mkdtempSync(join(tmpdir(), "gmlake-sweeps-"));
  const base = ["--traces", SMALL, "--only", "default", "--policies", "caching", "--drivers", "sim"];
  const shard = (name: string, i: number, extra: string[] = [], traces = SMALL) => {
    const args = [...base, ...extra, "--shard", `${i}/2`, "--out", join(root, name)];
    args[1] = traces;
    const r = bench(args);
    expect(r.status, r.stderr).toBe(0);
    return join(root, name);
  };
  const refused = (dirs: string[], re: RegExp) => {
    const out = join(root, `out-${Math.random().toString(36).slice(2)}`);
    const m = bench(["merge", ...dirs, "--out", out]);
    expect(m.status, m.stderr).toBe(2);
    expect(m.stderr).toMatch(re);
    expect(m.stderr.trim().split("\n")).toHaveLength(1);
    expect(existsSync(out)).toBe(false); // nothing written, not even the folder
  };

  it("refuses shards of other sweeps: another --set, other files under the same names, a module in one shard", () => {
    const s0 = shard("s0", 0);
    const s1 = shard("s1", 1);
    const ok = bench(["merge", s0, s1, "--out", join(root, "merged")]);
    expect(ok.status, ok.stderr).toBe(0);
    expect(JSON.parse(readFileSync(join(root, "merged", "results.json"), "utf8")).plan.identity.traces.default).toMatch(/^[0-9a-f]{64}$/);
    refused([s0, shard("knob1", 1, ["--set", "maxSplitSize=64MiB"])], /another sweep than .*: its caching knobs differ/);
    const other = join(root, "other-traces");
    mkdirSync(other);
    copyFileSync(join(SMALL, "default_end.pickle"), join(other, "default.pickle")); // the same name, another file
    copyFileSync(join(SMALL, "default_end.pickle"), join(other, "default_end.pickle"));
    refused([s0, shard("files1", 1, [], other)], /its trace default is another file/);
    refused([s0, shard("module1", 1, ["--policy-module", join(here, "fixtures", "caching-copy.mjs")])], /its policy modules differ \(caching-copy\.mjs@/);
  }, 120_000);

  it("refuses malformed shards with one line: null, a row with null figures, a taskId as a string, bad curves", () => {
    const s0 = shard("m0", 0);
    const s1 = shard("m1", 1);
    const file = join(s1, "results.json");
    const good = readFileSync(file, "utf8");
    const edit = (f: (j: Record<string, any>) => unknown) => {
      const j = JSON.parse(good);
      const v = f(j);
      writeFileSync(file, JSON.stringify(v === undefined ? j : v));
    };
    edit(() => null);
    refused([s0, s1], /results\.json: is null, not a gmlake-bench result/);
    edit((j) => void (j.results[0].peakReservedBytes = null));
    refused([s0, s1], /results\[0\]\.peakReservedBytes is null, not a number/);
    edit((j) => void (j.results[0].taskId = String(j.results[0].taskId)));
    refused([s0, s1], /results\[0\]\.taskId is "1", not a task id/);
    edit((j) => void delete j.plan.identity);
    refused([s0, s1], /no plan\.identity/);
    writeFileSync(file, good);
    writeFileSync(join(s1, "curves.json"), JSON.stringify({ recorded: {}, runs: { "1": { startUs: 0, timeUs: [1], bytes: [] } } }));
    refused([s0, s1], /curves\.json: runs\["1"\] is not a run's curve/);
  }, 120_000);
});

describe("unknown trace actions", () => {
  it("are counted in results.json's recorded figures and warned about, not skipped silently", () => {
    const dir = mkdtempSync(join(tmpdir(), "gmlake-bench-unknown-"));
    const e = (action: string, addr: number, size: number, t: number) => ({ action, addr, size, stream: 0, time_us: t });
    writeFileSync(join(dir, "renamed.pickle"), pickle({ segments: [], device_traces: [[e("segment_alloc", 2 ** 40, 2 ** 21, 1), e("alloc", 2 ** 40, 2 ** 20, 2), e("free_completed_v2", 2 ** 40, 2 ** 20, 3)]] }));
    const r = bench(["--traces", dir, "--policies", "caching", "--out", join(dir, "out")]);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/warning: renamed: trace entries of actions this reader does not know were skipped \(free_completed_v2 x1\)/);
    expect(JSON.parse(readFileSync(join(dir, "out", "results.json"), "utf8")).recorded[0].unknownActions).toEqual({ free_completed_v2: 1 });
  });
});
