import { writeOutputFile, type OutputTarget } from "@gmlake/output";
import { plotSvg, sampleTimeline, type PlotSeries } from "@gmlake/trace";
import type { Recorded } from "./recorded.js";
import { loadSnapshot, type TaskResult } from "./task.js";

/**
 * One SVG per trace: the trace's allocated bytes, PyTorch's recorded reserved, and each
 * policy's reserved over its sim replay (the curves come back from the workers).
 */
/** The SVG's file name for a trace label (sub-folders flattened). */
export function plotFileName(trace: string): string {
  return `${trace.replace(/[^A-Za-z0-9._-]+/g, "_")}.svg`;
}

/** `files[i]` is the checked output for `traces[i]`. */
export async function writeTracePlots(files: readonly OutputTarget[], traces: { trace: string; path: string }[], results: TaskResult[], recorded: Recorded[]): Promise<void> {
  for (const [i, t] of traces.entries()) {
    const s = await loadSnapshot(t.path);
    const rec = sampleTimeline(s.events);
    const mode = recorded.find((r) => r.trace === t.trace)?.mode ?? "caching";
    const series: PlotSeries[] = [
      { label: "allocated (trace)", allocated: rec.allocated, startUs: rec.startUs },
      { label: `PyTorch ${mode} (recorded)`, reserved: rec.reserved, startUs: rec.startUs },
    ];
    for (const r of results) {
      const c = r.reservedCurve;
      if (r.trace !== t.trace || !c) continue;
      series.push({ label: r.policy, reserved: { timeUs: Float64Array.from(c.timeUs), bytes: Float64Array.from(c.bytes) }, startUs: c.startUs });
    }
    writeOutputFile(files[i]!, plotSvg(series, { title: `${t.trace}: allocated vs reserved`, subtitle: "each allocator replayed on the same requests (sim driver)" }));
  }
}
