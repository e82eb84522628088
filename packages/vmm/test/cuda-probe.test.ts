import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

/**
 * A libcuda whose cuInit crashes or hangs must not take the caller down: the first
 * in-process use of cuda (CudaDriver, cudaAvailable, createDriver("auto")) is preceded
 * by the child-process probe, with a time limit.
 */
const dist = join(import.meta.dirname, "../dist/index.js");
const libDir = mkdtempSync(join(tmpdir(), "gmlake-fake-cuda-"));
const built =
  existsSync(dist) &&
  spawnSync("cc", ["-shared", "-fPIC", "-o", join(libDir, "libcuda.so.1"), join(import.meta.dirname, "fixtures/fake-libcuda.c")], { encoding: "utf8" }).status === 0;

function run(mode: "crash" | "hang" | "fine", env: Record<string, string> = {}) {
  const script = `
    import { CudaDriver, createDriver, cudaAvailable, cudaFirstUseProbe } from ${JSON.stringify(dist)};
    const out = { probed: cudaFirstUseProbe() !== null, available: cudaAvailable(), auto: createDriver("auto").name };
    try { new CudaDriver(); out.cuda = "opened"; } catch (e) { out.cuda = e.code + ": " + e.message; }
    console.log(JSON.stringify(out));`;
  const t0 = Date.now();
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
    encoding: "utf8",
    timeout: 60_000,
    env: { ...process.env, LD_LIBRARY_PATH: libDir, FAKE_CUDA: mode, GMLAKE_CUDA_PROBE_TIMEOUT_MS: "2000", ...env },
  });
  return { ...r, ms: Date.now() - t0 };
}

describe.skipIf(!built)("a broken libcuda (fake: cuInit crashes or hangs)", () => {
  it("crash: cuda is refused with a typed error, auto falls back to host, the process lives", () => {
    const r = run("crash");
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { available: boolean; auto: string; cuda: string };
    expect(out.available).toBe(false);
    expect(out.auto).toBe("host");
    expect(out.cuda).toMatch(/^CUDA_PROBE_FAILED: .*the probe child killed by SIGSEGV/);
  });
  it("hang: the probe gives up after its time limit", () => {
    const r = run("hang");
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { cuda: string };
    expect(out.cuda).toMatch(/^CUDA_PROBE_FAILED: .*hung: no answer within 2 s/);
    expect(r.ms).toBeLessThan(15_000);
  });
  it("libcuda already in the process (a host program loaded it, as PyTorch does): no probe, used directly", () => {
    const r = run("fine", { LD_PRELOAD: join(libDir, "libcuda.so.1") });
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { probed: boolean; cuda: string };
    expect(out.probed).toBe(false);
    expect(out.cuda).not.toMatch(/CUDA_PROBE_FAILED/); // the fake lists no device: a plain cuda error
  });
  it("without the probe (GMLAKE_CUDA_PROBE=0) the same libcuda kills the process: what the probe prevents", () => {
    const r = run("crash", { GMLAKE_CUDA_PROBE: "0" });
    expect(r.signal).toBe("SIGSEGV");
  });
});
