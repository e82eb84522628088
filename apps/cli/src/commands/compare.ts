import { computeStats } from "@gmlake/trace";
import { listPolicies } from "@gmlake/stitch";
import { checkOutputDir, checkOutputs } from "@gmlake/output";
import { join } from "node:path";
import { UsageError } from "../cli-error.js";
import type { Command } from "../command.js";
import { loadTrace, nameOf } from "../load-trace.js";
import { parseCapacity, parseDriver, parsePolicies, parseSets } from "../options.js";
import { printJson, printText, traceInputs, writePlot } from "../outputs.js";
import { Progress } from "../progress.js";
import { runReplay, type ReplayRow } from "../run-replay.js";
import { formatBytes } from "../sizes.js";
import { markdownTable, textTable, type Column } from "../table.js";

/** What PyTorch itself recorded in the trace, shown beside the replays. */
export interface RecordedRow {
  trace: string;
  mode: "caching" | "expandable";
  peakRequestedBytes: number;
  peakReservedBytes: number;
  utilization: number;
  traceDurationUs: number;
}

export interface CompareJson {
  rows: ReplayRow[];
  recorded: RecordedRow[];
}

const DEFAULT_POLICIES = ["caching", "expandable", "gmlake", "vms"];

function gib(b: number): string {
  return (b / 2 ** 30).toFixed(2);
}

type Line = { kind: "recorded"; r: RecordedRow } | { kind: "replay"; r: ReplayRow };

const COLUMNS: Column<Line>[] = [
  { header: "trace", align: "left", value: (l) => l.r.trace },
  { header: "allocator", align: "left", value: (l) => (l.kind === "recorded" ? `PyTorch ${l.r.mode} (recorded)` : l.r.policy) },
  { header: "peak requested GiB", value: (l) => gib(l.r.peakRequestedBytes) },
  { header: "peak reserved GiB", value: (l) => gib(l.r.peakReservedBytes) },
  { header: "utilization", value: (l) => l.r.utilization.toFixed(3) },
  { header: "OOM", value: (l) => (l.kind === "recorded" ? "" : l.r.oom ? `at #${l.r.oom.eventIndex}` : "no") },
  { header: "driver calls", value: (l) => (l.kind === "recorded" ? "" : String(Object.values(l.r.driverCalls).reduce((a, b) => a + b, 0))) },
  {
    header: "driver ms (% of run)",
    value: (l) =>
      l.kind === "recorded"
        ? ""
        : `${(l.r.driverTimeUs / 1000).toFixed(1)} (${l.r.traceDurationUs > 0 ? ((100 * l.r.driverTimeUs) / l.r.traceDurationUs).toFixed(2) : "-"}%)`,
  },
  { header: "2nd-half calls", value: (l) => (l.kind === "recorded" ? "" : String(l.r.driverCallsSecondHalf)) },
  { header: "M events/s", value: (l) => (l.kind === "recorded" ? "" : (l.r.eventsPerSecond / 1e6).toFixed(2)) },
];

export const compareCommand: Command = {
  name: "compare",
  summary: "replay traces with several policies side by side (the main job)",
  positionals: "optional-many",
  options: {
    policies: { type: "string", short: "p" },
    driver: { type: "string", short: "d" },
    capacity: { type: "string", short: "c" },
    set: { type: "string", multiple: true },
    json: { type: "boolean" },
    markdown: { type: "boolean" },
    plot: { type: "string" },
    force: { type: "boolean", short: "f" },
  },
  help: `Usage: gmlake compare [trace...] [--policies caching,expandable,gmlake,vms]
                      [--driver sim|host|cuda|auto] [--capacity 80GiB]
                      [--set key=value ...] [--json | --markdown] [--plot DIR] [--force]

Replays each trace with each policy and prints one row per trace x policy, next to
what PyTorch itself recorded in the trace: peak requested (requested bytes of live
blocks: the same for every allocator), peak reserved, utilization (peak requested /
peak reserved),
the first out-of-memory under --capacity, driver calls
and driver time (modelled with H200 costs on sim; % of the trace's own duration),
driver calls in the trace's second half, and replay speed. Without a trace: the
embedded default.

Options:
  --policies, -p  comma-separated policy names (default: ${DEFAULT_POLICIES.join(",")}, those registered)
  --driver, -d    sim (default), host, cuda, auto
  --capacity, -c  device capacity for every replay (out-of-memory is a result)
  --set k=v       a knob passed to every policy that has it
  --json          {rows: [replay rows as in 'replay --json'], recorded: [...]}
  --markdown      a Markdown table
  --plot DIR      one SVG per trace: allocated and each policy's reserved over time
                  (DIR is created; checked before the replays)
  --force, -f     replace existing SVGs in the --plot DIR

Examples:
  gmlake compare
  gmlake compare ../shared/traces/*.pickle.gz --markdown --plot plots/
  gmlake compare my_job.pickle.gz --capacity 80GiB --policies caching,vms`,
  async run(values, positionals) {
    if (values.json && values.markdown) throw new UsageError("choose one of --json and --markdown");
    const registered = new Set(listPolicies().map((p) => p.name));
    const policies = parsePolicies(values.policies, DEFAULT_POLICIES.filter((p) => registered.has(p)));
    const driver = parseDriver(values.driver);
    const capacity = parseCapacity(values.capacity);
    const sets = parseSets(values.set);
    const paths = positionals.length ? positionals : [undefined];
    // Every SVG is checked before the first replay (not an input, not clobbered without --force).
    const plotDir = values.plot === undefined ? undefined : checkOutputDir(String(values.plot), { option: "--plot" });
    const plots =
      plotDir === undefined
        ? []
        : checkOutputs(
            paths.map((p) => ({ path: join(plotDir, `${safeName(nameOf(p))}.svg`), option: "--plot" })),
            { inputs: traceInputs(positionals), force: Boolean(values.force) },
          );
    const rows: ReplayRow[] = [];
    const recorded: RecordedRow[] = [];
    const lines: Line[] = [];
    const progress = new Progress("compare");
    let done = 0;
    for (const [ti, p] of paths.entries()) {
      const t = await loadTrace(p);
      const s = t.snapshot;
      const st = computeStats(s.events, { roundupPower2Divisions: s.allocatorSettings.roundupPower2Divisions });
      const rec: RecordedRow = {
        trace: t.name,
        mode: s.allocatorSettings.expandableSegments ? "expandable" : "caching",
        peakRequestedBytes: st.peakRequestedBytes,
        peakReservedBytes: st.peakReservedBytes,
        utilization: st.peakReservedBytes > 0 ? st.peakRequestedBytes / st.peakReservedBytes : 1,
        traceDurationUs: st.lastTimeUs - st.firstTimeUs,
      };
      recorded.push(rec);
      lines.push({ kind: "recorded", r: rec });
      const series = [];
      for (const policy of policies) {
        progress.update(done, paths.length * policies.length, `${t.name} ${policy}`);
        const options = knobsFor(policy, sets);
        const { row, result } = runReplay(t, { policy, driver, capacity, options, record: values.plot !== undefined });
        rows.push(row);
        lines.push({ kind: "replay", r: row });
        if (result.log) series.push({ label: policy, log: result.log });
        done++;
      }
      if (plots[ti]) writePlot(plots[ti], t.name, series, s.events);
    }
    progress.done();
    if (values.json) {
      const out: CompareJson = { rows, recorded };
      printJson(out);
    } else if (values.markdown) {
      printText(markdownTable(lines, COLUMNS));
    } else {
      const oomNote = capacity !== undefined ? ` under a capacity of ${formatBytes(capacity)}` : "";
      printText(textTable(lines, COLUMNS) + `\n\n${rows.length} replays on the ${driver} driver${oomNote}; utilization = peak requested (the same for every allocator) / peak reserved.\n`);
    }
  },
};

/** --set applies to each policy that has the knob (compare runs policies with different knobs). */
function knobsFor(policy: string, sets: Record<string, unknown>): Record<string, unknown> {
  const p = listPolicies().find((x) => x.name === policy);
  if (!p) return {};
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(sets)) if (k in p.defaults) out[k] = v;
  return out;
}

function safeName(name: string): string {
  return name.replace(/[^A-Za-z0-9._-]+/g, "_");
}
