/**
 * Everything the CLI writes goes through here: files via @gmlake/output (checked before
 * the work, atomic, never the input), text and JSON on stdout with write errors raised.
 * Text is passed through terminalSafe: trace names and strings from a file reach it.
 */
import { terminalSafe, terminalSafeJson, writeOutputFile, writeStdout, type OutputTarget } from "@gmlake/output";
import {
  EventKind,
  EventLog,
  exportMemoryViz,
  plotSvg,
  sampleTimeline,
  toChromeTrace,
  toRmmCsv,
  type AllocatorSettings,
  type MemoryVizOptions,
  type PlotSeries,
  type StackFrame,
  type StreamOf,
} from "@gmlake/trace";
import { DEFAULT_TRACE } from "./default-trace.js";
import { withUnknownActions } from "./unknown-actions.js";

/** The files a command reads: its trace arguments, or the embedded default trace. */
export function traceInputs(positionals: readonly string[]): string[] {
  return positionals.length > 0 ? [...positionals] : [DEFAULT_TRACE];
}

export const EXPORT_FORMATS = ["memory-viz", "perfetto", "rmm-csv"];

/** A human-readable report on stdout (lines of ours, user data escaped). */
export function printText(text: string): void {
  writeStdout(terminalSafe(text.endsWith("\n") ? text : text + "\n", { multiline: true }));
}

/** One JSON document on stdout, with nothing in it a terminal would act on. */
export function printJson(value: unknown): void {
  writeStdout(terminalSafeJson(withUnknownActions(value)) + "\n");
}

/** Where a replay's rows came from: the stacks and annotations of the trace it replayed. */
export interface ExportContext {
  settings: AllocatorSettings;
  /** Per row of the replay's log, the trace event that caused it (ReplayResult.sourceEvents). */
  sourceEvents?: Int32Array | null;
  /** Per trace event, its stack (Snapshot.frames, read with frames: true). */
  frames?: readonly (readonly StackFrame[] | undefined)[];
  annotations?: MemoryVizOptions["annotations"];
  /** The real stream and private pool behind a replay's pool keys (stitch's poolStreamsOf). */
  streamOf?: StreamOf;
}

/** The replayed allocator's history in one of the export formats. */
export function writeExport(format: string, target: OutputTarget, log: EventLog, x: ExportContext): void {
  const settings = x.settings;
  switch (format) {
    case "memory-viz": {
      const src = x.sourceEvents;
      const frames = x.frames;
      const framesOf = src && frames ? (row: number) => (row < src.length && src[row]! >= 0 ? frames[src[row]!] : undefined) : undefined;
      writeOutputFile(target, exportMemoryViz(log, undefined, { allocatorSettings: settings, annotations: x.annotations, framesOf, streamOf: x.streamOf }).bytes);
      return;
    }
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

/** A replayed run for a plot: its log, and when it stopped at an out-of-memory, the trace time of that event. */
export interface PlotRun {
  label: string;
  log: EventLog;
  oomAtUs?: number;
}

/**
 * A replay's log without the physical handles an all-or-nothing batch created and released
 * again, never mapped (expandable's and GMLake's failed grows under a capacity): PyTorch
 * does not count them as reserved, nor does the engine's peak, so neither does the plot.
 */
export function committedLog(log: EventLog): EventLog {
  const { kind, aux } = log;
  const pending = new Map<number, number>(); // handle id -> row of its create, since the last map
  const drop = new Set<number>();
  for (let i = 0; i < log.length; i++) {
    const k = kind[i];
    if (k === EventKind.physicalCreate) pending.set(aux[i]!, i);
    else if (k === EventKind.map) pending.clear();
    else if (k === EventKind.physicalRelease) {
      const at = pending.get(aux[i]!);
      if (at !== undefined) {
        drop.add(at).add(i);
        pending.delete(aux[i]!);
      }
    }
  }
  if (drop.size === 0) return log;
  const out = new EventLog(log.length - drop.size);
  for (const raw of log.streams) out.streamId(raw);
  for (let i = 0; i < log.length; i++) {
    if (!drop.has(i)) out.push(kind[i] as EventKind, log.addr[i]!, log.size[i]!, log.stream[i]!, log.device[i]!, log.timeUs[i]!, aux[i]!);
  }
  return out;
}

/** Dash patterns told apart from one another, the recorded line's dots and the capacity's dash-dot. */
const DASHES = ["8 4", "3 3", "14 4", "1 3", "6 2 1 2", "12 3 3 3", "4 6", "20 4"];

/**
 * The SVG of a trace: its allocated bytes, each run's reserved bytes over time, and PyTorch's
 * own recorded reserved curve on top (what PyTorch did), the capacity line and the
 * out-of-memory markers.
 */
export function plotOf(title: string, runs: readonly PlotRun[], recorded: EventLog, o: { capacityBytes?: number | null; capacityLabel?: string; recordedName?: string } = {}): string {
  const rec = sampleTimeline(recorded);
  const series: PlotSeries[] = [];
  for (const [i, r] of runs.entries()) {
    const tl = sampleTimeline(committedLog(r.log));
    series.push({ label: r.label, reserved: tl.reserved, startUs: tl.startUs, oomAtUs: r.oomAtUs, dash: DASHES[i % DASHES.length], directLabel: true });
  }
  series.push({ label: "allocated", allocated: rec.allocated, startUs: rec.startUs, color: "#7f7f7f" });
  series.push({ label: `${o.recordedName ?? "PyTorch"} (recorded)`, reserved: rec.reserved, startUs: rec.startUs, emphasis: "recorded" });
  return plotSvg(series, {
    title: `${title}: reserved per allocator vs allocated`,
    subtitle: "dashed, one dash and colour each, named at the end: each allocator's reserved on the same requests; dotted black: the recording's; grey: allocated",
    capacityBytes: o.capacityBytes ?? undefined,
    capacityLabel: o.capacityLabel,
  });
}

export function writePlot(target: OutputTarget, title: string, runs: readonly PlotRun[], recorded: EventLog, o: { capacityBytes?: number | null; capacityLabel?: string; recordedName?: string } = {}): void {
  writeOutputFile(target, plotOf(title, runs, recorded, o));
}
