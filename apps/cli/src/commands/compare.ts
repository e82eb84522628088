import { computeStats } from "@gmlake/trace";
import { recordedBy } from "@gmlake/torch-trace";
import { checkOutputDir, checkOutputs, terminalSafe, writeOutputFile } from "@gmlake/output";
import { basename, join } from "node:path";
import { UsageError } from "../cli-error.js";
import type { Command } from "../command.js";
import { parseBudget, type DeviceBudget } from "../device-budget.js";
import { advice, fitVerdict, maxSplitVerdicts, type FitVerdict } from "../fit-verdict.js";
import { loadTrace, nameOf } from "../load-trace.js";
import { parseDriver, parsePolicies, parseSets, POLICY_MODULE_OPTION, usePolicyModules } from "../options.js";
import { DEFAULT_POLICIES, defaultPolicies, knobsFor } from "../policy-knobs.js";
import { memoryAnswers } from "../memory-answers.js";
import { plotOf, printJson, printText, traceInputs } from "../outputs.js";
import { reportHtml, type ReportTrace } from "../report.js";
import { Progress } from "../progress.js";
import { runReplay, type ReplayRow } from "../run-replay.js";
import { formatBytes } from "../sizes.js";
import { markdownTable, textTable, wrap } from "../table.js";
import { BASE, COLUMNS, VERBOSE, gib, type Line } from "../compare-columns.js";

/** What the trace itself recorded (PyTorch's allocator, or ours live), shown beside the replays. */
export interface RecordedRow {
  trace: string;
  /** The allocator settings' mode (caching unless expandable_segments was on). */
  mode: "caching" | "expandable";
  /** What made the trace: PyTorch's allocator or the stitching engine (live), with its label. */
  recordedBy: { allocator: "pytorch" | "gmlake"; mode: string; live: boolean; label: string; name: string };
  /** Segments but no allocation history: the figures are the segments' at the dump, utilization is null. */
  noHistory: boolean;
  peakRequestedBytes: number;
  /** Peak of allocated bytes after PyTorch's rounding (the trace's roundup_power2_divisions). */
  peakAllocatedBytes: number;
  peakReservedBytes: number;
  utilization: number | null;
  traceDurationUs: number;
}

/** A replay row of compare: `finished` is false when it stopped at an out-of-memory (its figures end there). */
export type CompareRow = ReplayRow & { finished: boolean };

export interface CompareJson {
  rows: CompareRow[];
  recorded: RecordedRow[];
  /** Per trace x policy, the fit search (empty with --no-fit). */
  fit: FitVerdict[];
  /** PyTorch settings searched for the advice only: the default allocator with max_split_size_mb values. */
  alternatives: FitVerdict[];
  budget: { capacityBytes: number | null; reserveBytes: number; allocatorBytes: number | null };
  advice: { trace: string; text: string }[];
}

export const compareCommand: Command = {
  name: "compare",
  summary: "replay traces with several policies side by side: waste, fit, smallest GPU (the main job)",
  positionals: "optional-many",
  options: {
    policies: { type: "string", short: "p" },
    driver: { type: "string", short: "d" },
    capacity: { type: "string", short: "c" },
    reserve: { type: "string" },
    "no-fit": { type: "boolean" },
    set: { type: "string", multiple: true },
    json: { type: "boolean" },
    markdown: { type: "boolean" },
    verbose: { type: "boolean", short: "v" },
    plot: { type: "string" },
    report: { type: "string" },
    force: { type: "boolean", short: "f" },
    ...POLICY_MODULE_OPTION,
  },
  help: `Usage: gmlake compare [trace...] [--policies caching,expandable,gmlake,vms]
                      [--capacity 80GiB] [--reserve 1GiB] [--no-fit]
                      [--driver sim|host|cuda|auto] [--set key=value ...]
                      [--json | --markdown] [--verbose] [--plot DIR] [--report DIR] [--force]
                      [--policy-module PATH|PACKAGE ...]

Replays each trace with each policy, next to what PyTorch itself recorded in it, and
prints per trace x policy: peak reserved, waste (peak reserved - peak requested, the bytes
fragmentation costs), whether it fits --capacity, and the smallest GPU it runs on. The
smallest GPU: a bisection over replays (sim driver) for the smallest capacity on which
the whole trace runs, to 2 MiB (every reservation is a multiple of 2 MiB, so the answer
is exact), plus --reserve. One line of advice per trace: the PyTorch setting that gives
the best result today (the default allocator, expandable_segments:True, or the default
with max_split_size_mb 64, 256 or 1024, searched too), and what only our live allocator
gives. Without a trace: the embedded default.

Options:
  --policies, -p  comma-separated policy names (default: ${DEFAULT_POLICIES.join(",")}, those registered,
                  and the policies of --policy-module)
  --policy-module PATH|PACKAGE  a module whose default export is a policy or a list of
                  them (a file or an installed package; repeatable)
  --capacity, -c  the GPU's memory (80GiB = 80 x 2^30 bytes, 80GB = 80 x 10^9; a bare
                  80G is refused as ambiguous). Replays run under capacity - reserve;
                  one that runs out of memory is marked OOM, its figures not compared.
  --reserve       memory the process holds outside the allocator (CUDA context,
                  libraries, NCCL); default 1GiB (a bare CUDA context takes 527 MiB on
                  an H200; see apps/cli/README.md)
  --no-fit        skip the search for the smallest GPU (faster)
  --driver, -d    sim (default), host, cuda, auto (the fit search always runs on sim)
  --set k=v       a knob passed to every policy that has it (one that none of them
                  has is an error; 'gmlake policies' lists them)
  --verbose, -v   more columns: headroom, peak requested, utilization, OOM event, driver
                  calls and time, second-half calls, replay speed, search replays
  --json          {rows, recorded, fit, alternatives, budget, advice} (apps/cli/README.md)
  --markdown      a Markdown table
  --plot DIR      one SVG per trace: allocated and each policy's reserved over time, the
                  recorded line on top, the capacity line and out-of-memory markers
                  (DIR is created; checked before the replays)
  --report DIR    DIR/index.html, one self-contained page to open in a browser: the
                  tables, the verdicts and advice, the plots, the allocation sites
                  holding the most at the peak and each allocator's memory_summary there
  --force, -f     replace existing SVGs in the --plot DIR, or DIR/index.html

Examples:
  gmlake compare
  gmlake compare my_job.pickle.gz --capacity 80GiB --reserve 2GiB
  gmlake compare ../shared/traces/*.pickle.gz --markdown --plot plots/
  gmlake compare my_job.pickle.gz --capacity 80GiB --report report/
  gmlake compare --policy-module ./my-policy.js`,
  async run(values, positionals) {
    if (values.json && values.markdown) throw new UsageError("choose one of --json and --markdown");
    const added = await usePolicyModules(values["policy-module"]);
    const policies = parsePolicies(values.policies, [...defaultPolicies(), ...added.filter((p) => !DEFAULT_POLICIES.includes(p))]);
    const driver = parseDriver(values.driver);
    const budget = parseBudget(values);
    const search = !values["no-fit"];
    const knobs = knobsFor(policies, parseSets(values.set));
    const paths = positionals.length ? positionals : [undefined];
    // Every output is checked before the first replay (not an input, not clobbered without --force).
    const inputs = { inputs: traceInputs(positionals), force: Boolean(values.force) };
    const plotDir = values.plot === undefined ? undefined : checkOutputDir(String(values.plot), { option: "--plot" });
    const plots = plotDir === undefined ? [] : checkOutputs(paths.map((p) => ({ path: join(plotDir, `${safeName(nameOf(p))}.svg`), option: "--plot" })), inputs);
    const reportDir = values.report === undefined ? undefined : checkOutputDir(String(values.report), { option: "--report" });
    const reportTarget = reportDir === undefined ? undefined : checkOutputs([{ path: join(reportDir, "index.html"), option: "--report" }], inputs)[0];
    const draw = plotDir !== undefined || reportDir !== undefined;
    const report: ReportTrace[] = [];
    const out: CompareJson = {
      rows: [],
      recorded: [],
      fit: [],
      alternatives: [],
      budget: { capacityBytes: budget.capacityBytes, reserveBytes: budget.reserveBytes, allocatorBytes: budget.allocatorBytes },
      advice: [],
    };
    const lines: Line[] = [];
    const progress = new Progress("compare");
    let done = 0;
    for (const [ti, p] of paths.entries()) {
      const t = await loadTrace(p, { frames: reportDir !== undefined });
      const s = t.snapshot;
      const rec = recordedRow(t.name, s, t.noHistory);
      out.recorded.push(rec);
      lines.push({ kind: "recorded", r: rec });
      const series = [];
      const verdicts: FitVerdict[] = [];
      for (const policy of policies) {
        progress.update(done, paths.length * policies.length, `${t.name} ${policy}`);
        const options = knobs(policy);
        const capacity = budget.allocatorBytes ?? undefined;
        const { row, result } = runReplay(t, { policy, driver, capacity, options, record: draw });
        const r: CompareRow = { ...row, finished: row.oom === null };
        out.rows.push(r);
        let fit: FitVerdict | undefined;
        if (search) {
          fit = fitVerdict(t, policy, options, budget, {
            // several devices: each GPU has the capacity, which the search checks per device
            fits: budget.capacityBytes === null ? null : s.devices.length > 1 ? undefined : r.finished,
            peakReservedBytes: r.finished ? r.peakReservedBytes : undefined,
            peakRequestedBytes: rec.peakRequestedBytes,
            peakAllocatedBytes: rec.peakAllocatedBytes,
          });
          verdicts.push(fit);
          out.fit.push(fit);
        }
        lines.push({ kind: "replay", r, fit });
        if (result.log) series.push({ label: policy, log: result.log, oomAtUs: result.oom ? s.events.timeUs[result.oom.eventIndex] : undefined });
        done++;
      }
      if (search && policies.includes("caching")) {
        const alt = maxSplitVerdicts(t, knobs("caching"), budget, rec);
        out.alternatives.push(...alt);
        verdicts.push(...alt);
      }
      const text = search ? advice(verdicts, budget) : null;
      if (text !== null) out.advice.push({ trace: t.name, text });
      const svg = draw ? plotOf(t.name, series, s.events, { capacityBytes: budget.allocatorBytes, capacityLabel: capacityLabel(budget), recordedName: rec.recordedBy.name }) : null;
      if (plots[ti]) writeOutputFile(plots[ti], svg!);
      if (reportDir !== undefined) {
        progress.update(done, paths.length * policies.length, `${t.name} peaks`);
        // the table's replays: under the same capacity, stopped at the same out-of-memory
        const answers = memoryAnswers(t, policies, knobs, 10, { capacity: budget.allocatorBytes ?? undefined });
        report.push({ name: t.name, recorded: rec, rows: out.rows.filter((r) => r.trace === t.name), fit: verdicts, advice: text, svg, answers });
      }
    }
    progress.done();
    if (reportTarget !== undefined) {
      const command = `compare ${process.argv.slice(3).map((a) => (a.includes("/") ? basename(a) : a)).join(" ")}`.trim();
      writeOutputFile(reportTarget, reportHtml({ generatedAt: new Date().toISOString(), command, driver, budget, traces: report }));
      process.stderr.write(`report: ${terminalSafe(join(String(values.report), "index.html"))}\n`);
    }
    const columns = values.verbose ? [...BASE, ...VERBOSE] : BASE;
    if (values.json) {
      printJson(out);
      return;
    }
    if (values.markdown) {
      printText(markdownTable(lines, [COLUMNS.trace, ...columns]));
      return;
    }
    printText(traceTables(lines, columns) + "\n\n" + notes(out, budget, driver, search, values.verbose === true).join("\n"));
  },
};

function recordedRow(name: string, s: Awaited<ReturnType<typeof loadTrace>>["snapshot"], noHistory: boolean): RecordedRow {
  const st = computeStats(s.events, { roundupPower2Divisions: s.allocatorSettings.roundupPower2Divisions });
  const by = recordedBy(s.allocatorSettings);
  return {
    trace: name,
    mode: s.allocatorSettings.expandableSegments ? "expandable" : "caching",
    recordedBy: { allocator: by.allocator, mode: by.mode, live: by.live, label: by.label, name: by.name },
    noHistory,
    peakRequestedBytes: st.peakRequestedBytes,
    peakAllocatedBytes: st.peakAllocatedBytes,
    peakReservedBytes: st.peakReservedBytes,
    utilization: noHistory ? null : st.peakReservedBytes > 0 ? st.peakRequestedBytes / st.peakReservedBytes : 1,
    traceDurationUs: st.lastTimeUs - st.firstTimeUs,
  };
}

/** One table per trace under a heading that names it and its limit, sized to the terminal. */
function traceTables(lines: readonly Line[], columns: Parameters<typeof textTable<Line>>[1]): string {
  const out: string[] = [];
  let group: Line[] = [];
  const flush = () => {
    const rec = group[0];
    if (rec?.kind !== "recorded") return;
    const r = rec.r;
    out.push(`${wrap(`${r.trace}: the limit is ${gib(r.peakRequestedBytes)} requested, ${gib(r.peakAllocatedBytes)} allocated at the peak; recorded by ${r.recordedBy.name}`)}\n${textTable(group, columns)}`);
  };
  for (const l of lines) {
    if (l.kind === "recorded") {
      flush();
      group = [];
    }
    group.push(l);
  }
  flush();
  return out.join("\n\n");
}

/** What the table means, the sizes as read, and the advice: wrapped to the terminal. */
function notes(out: CompareJson, budget: DeviceBudget, driver: string, search: boolean, verbose: boolean): string[] {
  const n: string[] = [];
  n.push(wrap(`${out.rows.length} replays on the ${driver} driver; ${budget.echo}. recorded = what the allocator that made the trace reserved in it; waste = peak reserved - peak requested (the same for every allocator).`));
  if (verbose && driver === "sim") {
    // what the modelled column predicts, and how well (BENCHMARKS.md, the fifth driver-time run)
    n.push(wrap("driver ms on sim: modelled with the H200's per-call costs, as if the trace were the first steps of its own process; against such runs on an H200 the model is off by 7% per trace on the mean for vms, 12% for caching and 20% for expandable."));
  }
  if (search) {
    n.push(wrap(`smallest GPU = the smallest capacity on which the whole trace runs (bisection over sim replays, exact to 2 MiB) + reserve ${formatBytes(budget.reserveBytes)}; above limit = that capacity - the peak requested, in GiB and % of it.`));
  }
  const oom = out.rows.filter((r) => !r.finished);
  if (oom.length) n.push(wrap(`OOM: ${oom.map((r) => `${r.trace} ${r.policy} at event #${r.oom!.eventIndex}`).join(", ")}; their figures stop there and are not shown.`));
  const many = out.advice.length > 1;
  for (const a of out.advice) n.push(wrap(many ? `${a.trace}: ${a.text}` : a.text));
  return n;
}

/** The capacity line is what the allocator may reserve: the device less the reserve. */
export function capacityLabel(b: DeviceBudget): string | undefined {
  if (b.capacityBytes === null || b.allocatorBytes === null) return undefined;
  return `for the allocator: ${formatBytes(b.allocatorBytes)} (${formatBytes(b.capacityBytes)} - ${formatBytes(b.reserveBytes)} reserve)`;
}

function safeName(name: string): string {
  return name.replace(/[^A-Za-z0-9._-]+/g, "_");
}
