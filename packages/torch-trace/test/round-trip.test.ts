import { readFileSync } from "node:fs";
import { join } from "node:path";
import { exportMemoryViz, type EventLog } from "@gmlake/trace";
import { describe, expect, it } from "vitest";
import { readSnapshot, readSnapshotBytes } from "../src/index.js";
import { fixture, tracesDir } from "./shared-dir.js";

const COLUMNS = ["kind", "addr", "size", "stream", "device", "timeUs", "aux"] as const;

function expectSameEvents(a: EventLog, b: EventLog): void {
  expect(b.length).toBe(a.length);
  expect(b.streams).toEqual(a.streams);
  for (const c of COLUMNS) {
    const x = a[c].subarray(0, a.length);
    const y = b[c].subarray(0, b.length);
    let diff = -1;
    for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) { diff = i; break; }
    expect(diff, `column ${c} differs at ${diff}`).toBe(-1);
  }
}

describe("snapshot -> events -> memory-viz pickle -> readSnapshot: the same events", () => {
  it("fixtures (two devices, oom, snapshot entries)", () => {
    for (const f of ["multi_device.p4.pickle", "expandable_end.p4.pickle"]) {
      const snap = readSnapshotBytes(readFileSync(fixture(f)), { reconstruct: false });
      const out = exportMemoryViz(snap.events, snap.segments, { allocatorSettings: snap.allocatorSettings, annotations: snap.annotations });
      const back = readSnapshotBytes(out.bytes, { reconstruct: false });
      expectSameEvents(snap.events, back.events);
      expect(back.segments).toEqual(snap.segments);
      expect(back.allocatorSettings).toEqual(snap.allocatorSettings);
      expect(out.skipped).toEqual({});
    }
  });

  const dir = tracesDir();
  it.skipIf(dir === null)("real traces: llama1b_fsdp (two streams) and gpt2_ft_stacks (annotations)", async () => {
    for (const f of ["llama1b_fsdp.pickle.gz", "gpt2_ft_stacks.pickle.gz", "gpt2_ft_expandable.pickle.gz"]) {
      const snap = await readSnapshot(join(dir as string, f));
      const out = exportMemoryViz(snap.events, snap.segments, { allocatorSettings: snap.allocatorSettings, annotations: snap.annotations });
      const back = readSnapshotBytes(out.bytes);
      expectSameEvents(snap.events, back.events);
      expect(back.segments).toEqual(snap.segments);
      expect(back.annotations).toEqual(snap.annotations);
      expect(back.allocatorSettings).toEqual(snap.allocatorSettings);
      expect(back.reconstructed.syntheticEvents).toBe(0);
    }
  });

  it.skipIf(dir === null)("without dump-time segments, derived segments agree with the events", async () => {
    const snap = await readSnapshot(join(dir as string, "gpt2_ft.pickle.gz"));
    const back = readSnapshotBytes(exportMemoryViz(snap.events).bytes);
    expectSameEvents(snap.events, back.events);
    expect(back.reconstructed.syntheticEvents).toBe(0);
    expect(back.segments.map((s) => [s.address, s.totalSize])).toEqual(snap.segments.map((s) => [s.address, s.totalSize]));
  });
});

describe("exports of a real trace", () => {
  const dir = tracesDir();
  it.skipIf(dir === null)("Perfetto JSON of llama1b_fsdp holds the exact peaks in its counter tracks", async () => {
    const { computeStats, toChromeTrace } = await import("@gmlake/trace");
    const snap = await readSnapshot(join(dir as string, "llama1b_fsdp.pickle.gz"));
    const stats = computeStats(snap.events);
    const trace = JSON.parse(JSON.stringify(toChromeTrace(snap.events, { maxCounterPoints: 5000 }))) as ReturnType<typeof toChromeTrace>;
    const max = (name: string): number => Math.max(...trace.traceEvents.filter((e) => e.ph === "C" && e.name === name).map((e) => Number(e.args?.bytes)));
    expect(max("allocated bytes")).toBe(stats.peakAllocatedBytes);
    expect(max("reserved bytes")).toBe(stats.peakReservedBytes);
    expect(trace.traceEvents.filter((e) => e.ph === "C").length).toBeLessThanOrEqual(2 * 5001);
    expect(trace.traceEvents.filter((e) => e.name === "segmentAlloc").length).toBe(stats.countsByKind.segmentAlloc);
  });
});
