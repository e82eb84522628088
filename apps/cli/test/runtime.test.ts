import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { CLI, REPO, SHARED, cli } from "./run-cli.js";

/**
 * The runtime against the machine: a broken libcuda (the probe child dies, the CLI does
 * not) and a small fd limit (the host driver needs one fd, not one per chunk).
 */
const libDir = mkdtempSync(join(tmpdir(), "gmlake-cli-fake-cuda-"));
const built =
  spawnSync("cc", ["-shared", "-fPIC", "-o", join(libDir, "libcuda.so.1"), join(REPO, "packages/vmm/test/fixtures/fake-libcuda.c")], { encoding: "utf8" }).status === 0;
const env = { LD_LIBRARY_PATH: libDir, FAKE_CUDA: "crash", GMLAKE_CUDA_PROBE_TIMEOUT_MS: "5000" };

describe.skipIf(!built)("a libcuda whose cuInit crashes", () => {
  it("--driver cuda: exit 2 and one line naming the crash", () => {
    const r = cli(["replay", "--driver", "cuda"], { env });
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr.trimEnd().split("\n")).toHaveLength(1);
    expect(r.stderr).toMatch(/^gmlake: cannot open the cuda driver: .*killed by SIGSEGV/);
  });
  it("--driver auto: falls back to the host driver and completes", () => {
    const r = cli(["replay", "--driver", "auto", "--json"], { env });
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout).driver).toBe("host");
  });
  it("doctor reports it", () => {
    const r = cli(["doctor"], { env });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/probe crashed/);
  });
});

const TRAIN = join(SHARED, "traces/small/train_default.pickle");
describe.skipIf(!existsSync(TRAIN))("the host driver under `ulimit -n 256`", () => {
  it("gmlake makes 2,000 chunks and completes: no fake out-of-memory at the fd limit", () => {
    const r = spawnSync("sh", ["-c", `ulimit -n 256 && "${process.execPath}" "${CLI}" replay "${TRAIN}" --driver host -p gmlake --set fragLimit=2MiB --json`], { encoding: "utf8" });
    expect(r.status, r.stderr).toBe(0);
    const row = JSON.parse(r.stdout) as { oom: unknown; driverCalls: { memCreate: number }; integrityErrors: number };
    expect(row.oom).toBeNull(); // a memfd per chunk hit EMFILE here, reported as out of memory
    expect(row.driverCalls.memCreate).toBeGreaterThan(1000);
    expect(row.integrityErrors).toBe(0);
  });
});

const GPT2 = join(SHARED, "traces/gpt2_ft.pickle.gz");
describe.skipIf(!existsSync(GPT2))("the host driver's capacity", () => {
  it("without --capacity it is an H200's, as on sim: a 25.7 GiB trace runs without a false OOM", () => {
    const r = cli(["replay", GPT2, "--driver", "host", "-p", "vms", "--json"]);
    expect(r.code, r.stderr).toBe(0);
    const row = JSON.parse(r.stdout) as { oom: unknown; peakRequestedBytes: number; integrityErrors: number };
    expect(row.oom).toBeNull();
    expect(row.peakRequestedBytes).toBeGreaterThan(25 * 2 ** 30);
    expect(row.integrityErrors).toBe(0);
  });
  it("--integrity full writes every byte: a capacity past half the free memory is refused before the replay", () => {
    const r = cli(["replay", GPT2, "--driver", "host", "--integrity", "full", "--capacity", "100TiB"]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr).toMatch(/^gmlake: --integrity full writes every byte the host driver hands out: --capacity .* is more than half the memory free now/);
  });
});
