import { OutputError, checkOutputDir, checkOutputs, writeOutputFiles, type OutputTarget } from "@gmlake/output";
import { join } from "node:path";
import type { SweepIdentity } from "./identity.js";
import type { Recorded } from "./recorded.js";
import type { Shard } from "./shard.js";
import { markdownSummary } from "./summary.js";
import type { TaskResult } from "./task.js";
import { plotFileName, tracePlots, type CurvesFile } from "./plots.js";

/** What a sweep is: the same plan gives the same task ids, so shards of it can be merged. */
export interface Plan {
  traces: string[];
  policies: string[];
  drivers: string[];
  capacityFactor: number | null;
  integrity: boolean | "full";
  /** Tasks of the whole sweep (all shards). */
  tasks: number;
  /** The traces' and modules' contents, the knobs, the version: shards merge only with the same. */
  identity: SweepIdentity;
}

/** results.json. */
export interface ResultsFile {
  date: string;
  machine: string;
  command: string;
  plan: Plan;
  /** This run's shard, or null for a whole sweep (or a merge of all its shards). */
  shard: Shard | null;
  recorded: Recorded[];
  results: TaskResult[];
}

/** The checked files of a sweep's folder. */
export interface SweepTargets {
  results: OutputTarget;
  curves: OutputTarget;
  summary: OutputTarget;
  /** One per trace, in the plan's order; none for a shard (its plots would miss the other shards' policies). */
  plots: OutputTarget[];
}

/**
 * Checks a sweep's output files before any work (@gmlake/output: not an input, not an
 * existing file without force, a writable directory). Throws OutputError.
 */
export function checkSweepOutputs(out: string, traces: readonly string[], whole: boolean, o: { inputs: string[]; force: boolean }): SweepTargets {
  const dir = checkOutputDir(out, { option: "--out" });
  const names = ["results.json", "curves.json", "summary.md", ...(whole ? traces.map(plotFileName) : [])];
  const [results, curves, summary, ...plots] = checkOutputs(names.map((n) => ({ path: join(dir, n), option: "--out" })), o);
  return { results: results!, curves: curves!, summary: summary!, plots };
}

/** Writes results.json, curves.json, summary.md and (for a whole sweep) one SVG per trace: all of them or none. */
export function writeOutputs(t: SweepTargets, r: ResultsFile, curves: CurvesFile): void {
  const plots = r.shard === null ? tracePlots(t.plots, r.plan.traces, r.results, r.recorded, curves) : [];
  const results = r.results.map(({ reservedCurve: _c, ...x }) => x);
  const note = r.shard ? ` (shard ${r.shard.index}/${r.shard.count}: ${r.results.length} of ${r.plan.tasks} tasks)` : "";
  writeOutputFiles([
    ...plots,
    { target: t.results, data: JSON.stringify({ ...r, results }, null, 1) + "\n" },
    { target: t.curves, data: JSON.stringify(curves) + "\n" },
    { target: t.summary, data: markdownSummary({ date: r.date, machine: r.machine, command: r.command + note, results: r.results, recorded: r.recorded }) },
  ]);
}

export { OutputError };
