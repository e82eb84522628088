/**
 * Host and sim answer every case of bench/misuse-probe.mjs exactly as an H200 did
 * (fixtures/h200-misuse.json: that script's output on the GPU host, CUDA 13.0, driver 580.159).
 * Runs the built script (dist), as the GPU host did.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

import { describe, expect, it } from "vitest";

const pkg = fileURLToPath(new URL("..", import.meta.url));
const h200 = JSON.parse(readFileSync(join(pkg, "test/fixtures/h200-misuse.json"), "utf8")) as {
  results: Record<string, string>;
};

describe.each(["host", "sim"])("%s driver", (name) => {
  it("answers each misuse as CUDA on an H200 does", () => {
    const dir = mkdtempSync(join(tmpdir(), "vmm-misuse-"));
    try {
      const file = join(dir, "out.json");
      execFileSync(process.execPath, [join(pkg, "bench/misuse-probe.mjs"), name, "--json", file], { stdio: "pipe" });
      const ours = JSON.parse(readFileSync(file, "utf8")) as { results: Record<string, string> };
      expect(ours.results).toEqual(h200.results);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
