import { readFileSync } from "node:fs";
import { DEFAULT_ALLOCATOR_SETTINGS, exportMemoryViz } from "@gmlake/trace";
import { describe, expect, it } from "vitest";
import { readSnapshotBytes, recordedBy } from "../src/index.js";
import { fixture } from "./shared-dir.js";

describe("recordedBy: what made a snapshot", () => {
  const snap = readSnapshotBytes(readFileSync(fixture("expandable_end.p4.pickle")), { reconstruct: false });
  const export_ = (raw: Record<string, unknown>) =>
    readSnapshotBytes(exportMemoryViz(snap.events, snap.segments, { allocatorSettings: { ...DEFAULT_ALLOCATOR_SETTINGS, raw } }).bytes, {
      reconstruct: false,
    });

  it("PyTorch's own: its mode and PYTORCH_CUDA_ALLOC_CONF, as recorded", () => {
    const r = recordedBy(snap.allocatorSettings);
    expect(r.allocator).toBe("pytorch");
    expect(r.who).toBe("PyTorch");
    expect(r.label).toBe(snap.allocatorSettings.expandableSegments ? `expandable segments (PYTORCH_CUDA_ALLOC_CONF=${snap.allocatorSettings.allocConf})` : "caching (default)");
    expect(recordedBy(DEFAULT_ALLOCATOR_SETTINGS).label).toBe("caching (default)");
  });

  it("the engine's live snapshot names its policy through a write and a read", () => {
    const r = recordedBy(export_({ gmlake_policy: "vms", gmlake_live: true }).allocatorSettings);
    expect(r).toMatchObject({ allocator: "gmlake", mode: "vms", live: true, who: "gmlake vms" });
    expect(r.label).toContain("gmlake vms, live");
    expect(recordedBy(export_({ gmlake_policy: "gmlake" }).allocatorSettings)).toMatchObject({ mode: "gmlake", live: false, label: "gmlake gmlake" });
  });
});
