/**
 * Everything the CLI writes goes through here: files via @gmlake/output (checked before
 * the work, atomic, never the input), text and JSON on stdout with write errors raised.
 * Text is passed through terminalSafe: trace names and strings from a file reach it.
 */
import { terminalSafe, writeOutputFile, writeStdout, type OutputTarget } from "@gmlake/output";
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
import { DEFAULT_TRACE } from "./default-trace.js";

/** The files a command reads: its trace arguments, or the embedded default trace. */
export function traceInputs(positionals: readonly string[]): string[] {
  return positionals.length > 0 ? [...positionals] : [DEFAULT_TRACE];
}

export const EXPORT_FORMATS = ["memory-viz", "perfetto", "rmm-csv"];

/** A human-readable report on stdout (lines of ours, user data escaped). */
export function printText(text: string): void {
  writeStdout(terminalSafe(text.endsWith("\n") ? text : text + "\n", { multiline: true }));
}

/** One JSON document on stdout (JSON.stringify escapes control characters itself). */
export function printJson(value: unknown): void {
  writeStdout(JSON.stringify(value) + "\n");
}

/** The replayed allocator's history in one of the export formats. */
export function writeExport(format: string, target: OutputTarget, log: EventLog, settings: AllocatorSettings): void {
  switch (format) {
    case "memory-viz":
      writeOutputFile(target, exportMemoryViz(log, undefined, { allocatorSettings: settings }).bytes);
      return;
    case "perfetto":
      writeOutputFile(target, JSON.stringify(toChromeTrace(log, { roundupPower2Divisions: settings.roundupPower2Divisions })));
      return;
    case "rmm-csv":
      writeOutputFile(target, toRmmCsv(log));
      return;
    default:
      throw new Error(`unknown export format ${format}`);
  }
}

/**
 * One SVG: the trace's allocated bytes and each run's reserved bytes over time. The
 * recorded trace's own reserved curve (what PyTorch did) is drawn too.
 */
export function writePlot(target: OutputTarget, title: string, runs: { label: string; log: EventLog }[], recorded: EventLog): void {
  const rec = sampleTimeline(recorded);
  const series: PlotSeries[] = [{ label: "allocated (trace)", allocated: rec.allocated, startUs: rec.startUs }, { label: "PyTorch (recorded)", reserved: rec.reserved, startUs: rec.startUs }];
  for (const r of runs) {
    const tl = sampleTimeline(r.log);
    series.push({ label: r.label, reserved: tl.reserved, startUs: tl.startUs });
  }
  writeOutputFile(target, plotSvg(series, { title: `${title}: allocated vs reserved`, subtitle: "reserved per allocator policy, replayed on the same requests" }));
}
