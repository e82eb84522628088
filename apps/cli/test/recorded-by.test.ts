import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readSnapshotBytes } from "@gmlake/torch-trace";
import { DEFAULT_ALLOCATOR_SETTINGS, EventLog, exportMemoryViz } from "@gmlake/trace";
import { afterAll, describe, expect, it } from "vitest";
import { cli, json, REPO } from "./run-cli.js";

const tmp = mkdtempSync(join(tmpdir(), "gmlake-recorded-by-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
const snap = readSnapshotBytes(readFileSync(join(REPO, "packages/torch-trace/test/fixtures/expandable_end.p4.pickle")), { reconstruct: false });

function write(name: string, events: EventLog, raw: Record<string, unknown>): string {
  const path = join(tmp, name);
  writeFileSync(path, exportMemoryViz(events, snap.segments, { allocatorSettings: { ...DEFAULT_ALLOCATOR_SETTINGS, raw } }).bytes);
  return path;
}

describe("inspect says what made a snapshot", () => {
  it("the engine's live snapshot (torch-alloc's gmlake_policy, gmlake_live): its policy, never PyTorch", () => {
    const file = write("live.pickle", snap.events, { gmlake_policy: "vms", gmlake_live: true });
    const r = cli(["inspect", file]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/recorded with +gmlake vms, live/);
    expect(r.stdout).toMatch(/recorded by gmlake vms\)/);
    expect(r.stdout).not.toMatch(/recorded by PyTorch|caching \(default\)/);
    expect(json<{ recordedBy: { allocator: string; mode: string } }>(cli(["inspect", file, "--json"])).recordedBy).toMatchObject({ allocator: "gmlake", mode: "vms" });
  });

  it("segments but no history (recorded without _record_memory_history): a warning, not a utilization", () => {
    const file = write("no-history.pickle", new EventLog(), {});
    const r = cli(["inspect", file]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/warning +segments but no allocation history/);
    expect(r.stdout).not.toMatch(/fragmentation/);
    expect(cli(["inspect", write("history.pickle", snap.events, {})]).stdout).toMatch(/utilization .*fragmentation/);
  });
});
