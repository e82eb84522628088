import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import type { CudaProbe } from "@gmlake/vmm";
import { dealShares, hostDevices, parseGpus, visibleDevice } from "../src/gpus.js";
import { MAIN, SMALL, haveTraces, scratchDir } from "./paths.js";

/**
 * --gpus on a CPU host: GMLAKE_BENCH_FAKE_GPUS simulates the devices, the sim driver runs
 * the tasks, and a policy module reports, per worker process, what it was started with.
 */
const dir = scratchDir(".tmp-gpus-");

describe("--gpus parsing", () => {
  it("all, a count, ordinals; anything else is one reason", () => {
    expect(parseGpus("all", 4)).toEqual([0, 1, 2, 3]);
    expect(parseGpus("2", 4)).toEqual([0, 1]);
    expect(parseGpus("0, 1,3", 4)).toEqual([0, 1, 3]);
    expect(parseGpus("5", 4)).toMatch(/this host has 4/);
    expect(parseGpus("0,4", 4)).toMatch(/no GPU 4/);
    expect(parseGpus("1,1", 4)).toMatch(/named twice/);
    expect(parseGpus("0", 4)).toMatch(/at least 1/);
    expect(parseGpus("gpu1", 4)).toMatch(/invalid --gpus 'gpu1'/);
  });

  it("devices: simulated by the variable, else the driver's count; ordinals follow the parent's CUDA_VISIBLE_DEVICES", () => {
    const probe = (n: number): CudaProbe => ({ ok: n > 0, addon: { loaded: true, path: "" }, driver: { found: true }, devices: Array.from({ length: n }, (_, i) => ({ ordinal: i }) as never), isolated: true });
    expect(hostDevices(probe(8), {})).toEqual({ count: 8, fake: false });
    expect(hostDevices(probe(8), { GMLAKE_BENCH_FAKE_GPUS: "3" })).toEqual({ count: 3, fake: true });
    expect(hostDevices(probe(0), { GMLAKE_BENCH_FAKE_GPUS: "0" })).toMatch(/GMLAKE_BENCH_FAKE_GPUS must be/);
    expect(hostDevices(probe(0), {})).toMatchObject({ count: 0 });
    expect(visibleDevice(1, {})).toBe("1");
    expect(visibleDevice(1, { CUDA_VISIBLE_DEVICES: "4,6" })).toBe("6");
    expect(visibleDevice(1, { CUDA_VISIBLE_DEVICES: "GPU-a,GPU-b" })).toBe("GPU-b");
    expect(dealShares([0, 1, 2, 3, 4], 2)).toEqual([[0, 2, 4], [1, 3]]);
  });
});

/** The caching model as "probe": each process that imports it writes its pid and environment to $PROBE_DIR; on $KILL_ON's GPU its first malloc kills its own process. */
const MODULE = join(dir, "probe.mjs");
writeFileSync(
  MODULE,
  `import { appendFileSync } from "node:fs";
import { getPolicy } from "@gmlake/stitch";
const keys = ["CUDA_VISIBLE_DEVICES", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"];
appendFileSync(process.env.PROBE_DIR + "/" + process.pid, JSON.stringify(Object.fromEntries(keys.map((k) => [k, process.env[k] ?? null]))) + "\\n");
const base = getPolicy("caching");
export default { ...base, name: "probe", create: (...args) => {
  const p = base.create(...args);
  const malloc = p.malloc.bind(p);
  p.malloc = (...a) => {
    if (process.env.KILL_ON !== undefined && process.env.CUDA_VISIBLE_DEVICES === process.env.KILL_ON) process.kill(process.pid, "SIGKILL");
    return malloc(...a);
  };
  return p;
} };
`,
);

const NO_MULTICAST = { NCCL_NVLS_ENABLE: "0", TORCH_SYMM_MEM_DISABLE_MULTICAST: "1", NVSHMEM_DISABLE_NVLS: "1" };

function bench(args: string[], env: Record<string, string>) {
  const probeDir = join(dir, `probe-${Math.random().toString(36).slice(2)}`);
  mkdirSync(probeDir);
  const base = { ...process.env };
  delete base.CUDA_VISIBLE_DEVICES;
  const r = spawnSync(process.execPath, [MAIN, ...args], { encoding: "utf8", timeout: 120_000, cwd: dir, env: { ...base, PROBE_DIR: probeDir, ...env } });
  const seen = readdirSync(probeDir).map((pid) => ({ pid: Number(pid), env: JSON.parse(readFileSync(join(probeDir, pid), "utf8").split("\n")[0]!) as Record<string, string | null> }));
  return { ...r, seen };
}

const steady = (r: Record<string, unknown>) => {
  const { wallMs: _w, eventsPerSecond: _e, gpu: _g, ...rest } = r;
  return rest;
};

describe.skipIf(!haveTraces)("gmlake-bench --gpus on simulated GPUs", () => {
  const args = ["--traces", SMALL, "--only", "train", "--policy-module", MODULE, "--policies", "caching,vms,probe"];

  it("one worker per GPU on its round-robin share, NVLink multicast off in each, merged equal to one process's run", () => {
    const whole = bench([...args, "--cpu-workers", "1", "--out", join(dir, "whole")], {});
    expect(whole.status, whole.stderr).toBe(0);
    const spread = bench([...args, "--gpus", "0,2,3", "--out", join(dir, "spread")], { GMLAKE_BENCH_FAKE_GPUS: "4" });
    expect(spread.status, spread.stderr).toBe(0);
    const a = JSON.parse(readFileSync(join(dir, "whole", "results.json"), "utf8"));
    const b = JSON.parse(readFileSync(join(dir, "spread", "results.json"), "utf8"));
    expect(b.plan).toEqual(a.plan);
    expect(b.results.map(steady)).toEqual(a.results.map(steady));
    expect(a.results.every((r: { gpu: unknown }) => r.gpu === null)).toBe(true);
    // task i of the 6 ran on the (i mod 3)-th GPU named
    expect(b.results.map((r: { gpu: number }) => r.gpu)).toEqual([0, 2, 3, 0, 2, 3]);
    expect(b.machine).toMatch(/4 simulated GPUs, GPUs used 0,2,3/);
    for (const f of readdirSync(join(dir, "whole")).filter((x) => x.endsWith(".svg"))) expect(readFileSync(join(dir, "spread", f), "utf8")).toBe(readFileSync(join(dir, "whole", f), "utf8"));
    // one worker process per GPU named, each seeing only its GPU, multicast off; and the bench itself (no GPU pinned)
    const workers = spread.seen.filter((s) => s.env.NCCL_NVLS_ENABLE !== null);
    expect(workers.map((s) => s.env).sort((x, y) => String(x.CUDA_VISIBLE_DEVICES).localeCompare(String(y.CUDA_VISIBLE_DEVICES)))).toEqual(["0", "2", "3"].map((g) => ({ CUDA_VISIBLE_DEVICES: g, ...NO_MULTICAST })));
    expect(new Set(workers.map((s) => s.pid)).size).toBe(3);
    expect(spread.seen).toHaveLength(4);
    expect(whole.seen).toHaveLength(1); // one process ran it all
    // under a parent's CUDA_VISIBLE_DEVICES, ordinal 1 is its second entry
    const pinned = bench([...args, "--only", "train_default", "--gpus", "1,2", "--out", join(dir, "pinned")], { GMLAKE_BENCH_FAKE_GPUS: "3", CUDA_VISIBLE_DEVICES: "5,7,9" });
    expect(pinned.status, pinned.stderr).toBe(0);
    expect(pinned.seen.filter((s) => s.env.NCCL_NVLS_ENABLE !== null).map((s) => s.env.CUDA_VISIBLE_DEVICES).sort()).toEqual(["7", "9"]);
    // the host driver (real memory, every block pattern-checked) on simulated GPUs too
    const host = bench(["--traces", SMALL, "--only", "train_default", "--drivers", "host", "--policies", "caching,vms", "--out", join(dir, "host")], { GMLAKE_BENCH_FAKE_GPUS: "2" });
    expect(host.status, host.stderr).toBe(0);
    const h = JSON.parse(readFileSync(join(dir, "host", "results.json"), "utf8"));
    expect(h.results.map((r: { driver: string; gpu: number; integrityChecked: number; integrityErrors: number }) => [r.driver, r.gpu, r.integrityChecked > 0, r.integrityErrors])).toEqual([
      ["host", 0, true, 0],
      ["host", 1, true, 0],
    ]);
  }, 180_000);

  it("a worker that dies: one line naming its GPU, exit 1, nothing written, the other workers gone", () => {
    const out = join(dir, "died");
    const r = bench([...args, "--gpus", "all", "--out", out], { GMLAKE_BENCH_FAKE_GPUS: "3", KILL_ON: "2" });
    expect(r.status).toBe(1);
    const lines = r.stderr.trim().split("\n");
    expect(lines.filter((l) => l.startsWith("gmlake-bench:"))).toEqual([lines[lines.length - 1]]);
    expect(lines[lines.length - 1]).toMatch(/^gmlake-bench: the worker on simulated GPU 2 \(CUDA_VISIBLE_DEVICES=2\) was killed by SIGKILL after 0 of its 2 tasks \(running train_default probe sim\): nothing written$/);
    for (const f of ["results.json", "curves.json", "summary.md", "train_default.svg"]) expect(existsSync(join(out, f))).toBe(false);
    expect(existsSync(out) ? readdirSync(out) : []).toEqual([]);
    const alive = (pid: number) => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    expect(r.seen.length).toBeGreaterThanOrEqual(2); // the bench, the worker that died, the others that got as far: none left running
    expect(r.seen.filter((s) => alive(s.pid))).toEqual([]);
    // bad --gpus: one line, exit 2, before any run
    const bad = bench([...args, "--gpus", "0,3", "--out", join(dir, "bad")], { GMLAKE_BENCH_FAKE_GPUS: "3" });
    expect(bad.status).toBe(2);
    expect(bad.stderr).toBe("gmlake-bench: --gpus 0,3: no GPU 3, this host has 3 (0..2)\n");
    expect(bench([...args, "--gpus", "2", "--drivers", "sim", "--out", join(dir, "bad")], {}).stderr).toMatch(/--gpus spreads the cuda runs, and --drivers sim has none/);
  }, 120_000);
});
