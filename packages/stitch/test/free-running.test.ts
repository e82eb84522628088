import { existsSync, readdirSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { readSnapshot } from "@gmlake/torch-trace";
import { SimDriver } from "@gmlake/vmm";
import { verify } from "../src/index.js";
import { sharedDir } from "./helpers.js";

/**
 * Free-running models (what `replay` and `compare` show): caching on the sim driver's
 * model of cudaMalloc's placement, expandable on its own reservations, with no recorded
 * address given back. Each must make the recorded segment decisions (kind, size, which
 * segment) and reach the recorded peak reserved on every trace there is: ../shared/traces
 * and the project's own corpus (corpus/ at the repo root, when present).
 */
const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");

function traceFiles(dir: string): string[] {
  if (!existsSync(dir)) return [];
  const out: string[] = [];
  for (const name of readdirSync(dir).sort()) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...traceFiles(p));
    else if (/\.pickle(\.gz)?$/.test(name)) out.push(p);
  }
  return out;
}

const files = [...traceFiles(join(sharedDir(), "traces")), ...traceFiles(join(repoRoot, "corpus"))];

describe("free-running caching and expandable reproduce PyTorch's segments and peak", () => {
  it.skipIf(files.length > 0)("has traces to check (none found)", () => {});
  for (const path of files) {
    const name = relative(repoRoot, path).replace(/^(\.\.\/)+/, "");
    it(name, { timeout: 120_000 }, async () => {
      const snap = await readSnapshot(path);
      const v = verify(snap, { addressOracle: false, driver: new SimDriver() });
      expect(v.policy).toBe(snap.allocatorSettings.expandableSegments ? "expandable" : "caching");
      expect(v.recordedSegments).toBeGreaterThan(0);
      expect(v.firstMismatch).toBeNull();
      expect(v.replayedSegments).toBe(v.recordedSegments);
      expect(v.replayedPeakReservedBytes).toBe(v.recordedPeakReservedBytes);
    });
  }
});

describe("the sim's cudaMalloc placement", () => {
  it("grows down in 32 MiB regions and fills the lowest free range first", () => {
    const MiB = 2 ** 20;
    const d = new SimDriver();
    const a = d.memAlloc(20 * MiB); // region [a, a+32): 12 MiB tail free
    const b = d.memAlloc(16 * MiB); // below a
    const c = d.memAlloc(12 * MiB); // b's tail (lowest free range that fits)
    const e = d.memAlloc(12 * MiB); // a's tail
    expect(b).toBe(a - 32 * MiB);
    expect(c).toBe(b + 16 * MiB);
    expect(e).toBe(a + 20 * MiB);
    d.memFree(b); // [b, b+16) free again, below c
    expect(d.memAlloc(2 * MiB)).toBe(b);
    // an emptied heap starts over: the same sequence places alike on a used driver
    for (const x of [a, c, e, b]) d.memFree(x);
    expect(d.memAlloc(20 * MiB)).toBe(a);
    expect(d.memAlloc(16 * MiB)).toBe(b);
    const bump = new SimDriver({ allocPlacement: "bump" });
    const x = bump.memAlloc(20 * MiB);
    expect(bump.memAlloc(16 * MiB)).toBe(x + 20 * MiB);
  });
});
