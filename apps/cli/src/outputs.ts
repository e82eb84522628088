import { writeFileSync } from "node:fs";
import {
  exportMemoryViz,
  plotSvg,
  sampleTimeline,
  toChromeTrace,
  toRmmCsv,
  type AllocatorSettings,
  type EventLog,
  type PlotSeries,
} from "@gmlake/trace";

export const EXPORT_FORMATS = ["memory-viz", "perfetto", "rmm-csv"];

/** The replayed allocator's history in one of the export formats. */
export function writeExport(format: string, file: string, log: EventLog, settings: AllocatorSettings): void {
  switch (format) {
    case "memory-viz":
      writeFileSync(file, exportMemoryViz(log, undefined, { allocatorSettings: settings }).bytes);
      return;
    case "perfetto":
      writeFileSync(file, JSON.stringify(toChromeTrace(log, { roundupPower2Divisions: settings.roundupPower2Divisions })));
      return;
    case "rmm-csv":
      writeFileSync(file, toRmmCsv(log));
      return;
    default:
      throw new Error(`unknown export format ${format}`);
  }
}

/**
 * One SVG: the trace's allocated bytes and each run's reserved bytes over time. The
 * recorded trace's own reserved curve (what PyTorch did) is drawn too.
 */
export function writePlot(file: string, title: string, runs: { label: string; log: EventLog }[], recorded: EventLog): void {
  const rec = sampleTimeline(recorded);
  const series: PlotSeries[] = [{ label: "allocated (trace)", allocated: rec.allocated, startUs: rec.startUs }, { label: "PyTorch (recorded)", reserved: rec.reserved, startUs: rec.startUs }];
  for (const r of runs) {
    const tl = sampleTimeline(r.log);
    series.push({ label: r.label, reserved: tl.reserved, startUs: tl.startUs });
  }
  writeFileSync(file, plotSvg(series, { title: `${title}: allocated vs reserved`, subtitle: "reserved per allocator policy, replayed on the same requests" }));
}
