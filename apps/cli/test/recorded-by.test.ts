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

describe("every command says what made a snapshot", () => {
  it("compare, its report and verify label the engine's live snapshot by its policy, never PyTorch", () => {
    const file = write("live-c.pickle", snap.events, { gmlake_policy: "vms", gmlake_live: true });
    const r = cli(["compare", file, "--no-fit", "--policies", "vms", "--report", join(tmp, "report")]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/recorded by gmlake vms, live/);
    expect(r.stdout).not.toMatch(/recorded by PyTorch/);
    const html = readFileSync(join(tmp, "report", "index.html"), "utf8");
    expect(html).toContain("gmlake vms, live (recorded)");
    expect(html).not.toContain("PyTorch caching (recorded)");
    const j = json<{ recorded: { recordedBy: { allocator: string; name: string } }[] }>(cli(["compare", file, "--no-fit", "--policies", "vms", "--json"]));
    expect(j.recorded[0]!.recordedBy).toMatchObject({ allocator: "gmlake", name: "gmlake vms, live" });
    // verify checks it against the policy that made it, not a model of PyTorch (this fixture's
    // decisions are PyTorch's under the label, so vms does not match them: exit 1)
    const v = cli(["verify", file, "--json"]);
    expect(v.code).toBe(1);
    expect(JSON.parse(v.stdout)).toMatchObject({ policy: "vms", recordedBy: "gmlake vms, live" });
    const p = cli(["compare", write("pytorch-c.pickle", snap.events, {}), "--no-fit", "--policies", "vms"]);
    expect(p.stdout).toMatch(/recorded by PyTorch caching/);
  });

  it("segments but no history: compare, replay and verify warn on stderr and give no utilization for the recording", () => {
    const file = write("no-history-c.pickle", new EventLog(), {});
    for (const args of [["compare", file, "--no-fit", "--policies", "vms"], ["replay", file, "--policy", "vms"], ["verify", file]]) {
      const r = cli(args);
      expect(r.stderr, args.join(" ")).toMatch(/warning: no-history-c: segments but no allocation history/);
    }
    const j = json<{ recorded: { noHistory: boolean; utilization: number | null }[] }>(cli(["compare", file, "--no-fit", "--policies", "vms", "--json"]));
    expect(j.recorded[0]).toMatchObject({ noHistory: true, utilization: null });
    const ok = cli(["compare", write("history-c.pickle", snap.events, {}), "--no-fit", "--policies", "vms"]);
    expect(ok.stderr).not.toMatch(/no allocation history/);
  });
});
