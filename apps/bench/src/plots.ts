import type { OutputTarget } from "@gmlake/output";
import { plotSvg, sampleTimeline, type PlotSeries } from "@gmlake/trace";
import type { Recorded } from "./recorded.js";
import { loadSnapshot, type Curve, type TaskResult } from "./task.js";

/** A trace's own curves (what PyTorch did), kept in curves.json so that `merge` can draw without the traces. */
export interface RecordedCurves {
  allocated: Curve;
  reserved: Curve;
}

/** The curves a run writes beside results.json: the traces' own, and each sim run's reserved bytes by task id. */
export interface CurvesFile {
  recorded: Record<string, RecordedCurves>;
  runs: Record<string, Curve>;
}

export async function recordedCurves(path: string): Promise<RecordedCurves> {
  const s = await loadSnapshot(path);
  const tl = sampleTimeline(s.events);
  return {
    allocated: { startUs: tl.startUs, timeUs: Array.from(tl.allocated.timeUs), bytes: Array.from(tl.allocated.bytes) },
    reserved: { startUs: tl.startUs, timeUs: Array.from(tl.reserved.timeUs), bytes: Array.from(tl.reserved.bytes) },
  };
}

const series = (c: Curve) => ({ timeUs: Float64Array.from(c.timeUs), bytes: Float64Array.from(c.bytes) });

/**
 * One SVG per trace: each policy's reserved over its sim replay, the trace's allocated
 * bytes, and PyTorch's recorded reserved on top.
 */
/** The SVG's file name for a trace label (sub-folders flattened). */
export function plotFileName(trace: string): string {
  return `${trace.replace(/[^A-Za-z0-9._-]+/g, "_")}.svg`;
}

/** Each trace's SVG for its checked output (`files[i]` is `traces[i]`'s), to be written with the rest. */
export function tracePlots(files: readonly OutputTarget[], traces: readonly string[], results: readonly TaskResult[], recorded: readonly Recorded[], curves: CurvesFile): { target: OutputTarget; data: string }[] {
  const out: { target: OutputTarget; data: string }[] = [];
  for (const [i, trace] of traces.entries()) {
    const rec = curves.recorded[trace];
    if (!rec || !files[i]) continue;
    const mode = recorded.find((r) => r.trace === trace)?.mode ?? "caching";
    const s: PlotSeries[] = [];
    for (const r of results) {
      const c = curves.runs[String(r.taskId)];
      if (r.trace !== trace || !c) continue;
      s.push({ label: r.policy, reserved: series(c), startUs: c.startUs });
    }
    s.push({ label: "allocated", allocated: series(rec.allocated), startUs: rec.allocated.startUs, color: "#7f7f7f" });
    s.push({ label: `PyTorch ${mode} (recorded)`, reserved: series(rec.reserved), startUs: rec.reserved.startUs, emphasis: "recorded" });
    out.push({ target: files[i]!, data: plotSvg(s, { title: `${trace}: reserved per allocator vs allocated`, subtitle: "dashed: each allocator replayed on the same requests (sim driver); dotted black: what PyTorch reserved; peaks in GiB" }) });
  }
  return out;
}
