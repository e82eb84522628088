/**
 * Entries of actions the reader does not know (a newer PyTorch's renamed free) are skipped
 * by every command, and every command says so: one warning line on stderr, and
 * `unknownActions` in its JSON (issue 33; only inspect mentioned them before).
 */
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { pickle } from "@gmlake/trace";
import { cli } from "./run-cli.js";

const MiB = 2 ** 20;
const entry = (action: string, addr: number, size: number, t: number) => ({ action, addr, size, stream: 0, time_us: t });
const file = join(mkdtempSync(join(tmpdir(), "gmlake-unknown-")), "renamed_free.pickle");
writeFileSync(
  file,
  pickle({
    segments: [],
    device_traces: [[entry("segment_alloc", 2 ** 40, 2 * MiB, 1), entry("alloc", 2 ** 40, MiB, 2), entry("free_requested", 2 ** 40, MiB, 3), entry("free_completed_v2", 2 ** 40, MiB, 4), entry("alloc", 2 ** 40 + MiB, 512, 5)]],
  }),
);

describe("unknown trace actions", () => {
  it.each([
    ["replay", ["replay", file, "--json"]],
    ["compare", ["compare", file, "--no-fit", "--json"]],
    ["verify", ["verify", file, "--json"]],
    ["inspect", ["inspect", file, "--json"]],
  ])("%s warns once and counts them in its JSON", (_name, args) => {
    const r = cli(args);
    expect([0, 1]).toContain(r.code); // verify may find the skipped free changes a decision
    const warnings = r.stderr.split("\n").filter((l) => l.includes("warning"));
    expect(warnings.length).toBeLessThanOrEqual(1);
    if (args[0] !== "inspect") expect(warnings[0]).toMatch(/renamed_free: 1 trace entries of actions this reader does not know were skipped \(free_completed_v2 x1\)/);
    expect(JSON.parse(r.stdout).unknownActions).toEqual({ free_completed_v2: 1 });
  });
  it("a trace without them: an empty count, no warning", () => {
    const r = cli(["replay", "--json"]);
    expect(r.code).toBe(0);
    expect(r.stderr).not.toMatch(/warning/);
    expect(JSON.parse(r.stdout).unknownActions).toEqual({});
  });
});
