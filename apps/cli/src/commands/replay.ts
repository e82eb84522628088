import { recordedBy } from "@gmlake/torch-trace";
import { UsageError } from "../cli-error.js";
import type { Command } from "../command.js";
import { checkOutputs } from "@gmlake/output";
import { poolStreamsOf } from "@gmlake/stitch";
import { EXPORT_FORMATS, printJson, printText, traceInputs, writeExport, writePlot } from "../outputs.js";
import { loadTrace } from "../load-trace.js";
import { capacityLabel } from "./compare.js";
import { parseBudget } from "../device-budget.js";
import { checkPolicy, parseDriver, parseSets, POLICY_MODULE_OPTION, usePolicyModules } from "../options.js";
import { knobsFor } from "../policy-knobs.js";
import { runReplay, type ReplayRow } from "../run-replay.js";
import { formatBytes } from "../sizes.js";
import { field, wrap } from "../table.js";

export const replayCommand: Command = {
  name: "replay",
  summary: "replay a trace with one allocator policy and report memory and driver cost",
  positionals: "optional-many",
  options: {
    policy: { type: "string", short: "p" },
    driver: { type: "string", short: "d" },
    capacity: { type: "string", short: "c" },
    reserve: { type: "string" },
    set: { type: "string", multiple: true },
    json: { type: "boolean" },
    plot: { type: "string" },
    export: { type: "string", multiple: true },
    integrity: { type: "string" },
    invariants: { type: "boolean" },
    force: { type: "boolean", short: "f" },
    ...POLICY_MODULE_OPTION,
  },
  help: `Usage: gmlake replay [trace] --policy <name> [--driver sim|host|cuda|auto]
                     [--capacity 80GiB] [--set key=value ...] [--json]
                     [--plot FILE.svg] [--export memory-viz|perfetto|rmm-csv FILE] [--force]
                     [--policy-module PATH|PACKAGE ...]

Replays the trace's allocations and frees (memory returns at free_completed, as in
PyTorch) through an allocator policy on a driver, and reports peak requested, peak
reserved, utilization (peak requested / peak reserved), the first out-of-memory under --capacity, and the driver calls
it made (counted and timed: modelled with H200 costs on sim, measured on host and cuda).

Options:
  --policy, -p   caching | expandable | gmlake | vms | a registered policy (default caching)
  --policy-module PATH|PACKAGE  a module whose default export is a policy or a list of
                 them (a file or an installed package; repeatable); its policies are
                 then usable by name; alone it selects the module's first policy
  --driver, -d   sim (default: no memory, H200 cost model), host (real stitching of host
                 memory), cuda (the GPU), auto (cuda when present, else host)
  --capacity     the GPU's memory (80GiB = 80 x 2^30 bytes, 80GB = 80 x 10^9, or bytes;
                 a bare 80G is refused as ambiguous); the replay runs under capacity -
                 reserve, and its first out-of-memory is a result (exit 0), reported with
                 its event index
  --reserve      memory held outside the allocator (CUDA context, libraries); default 1GiB
  --set k=v      a policy knob, e.g. --set fragLimit=512MiB --set reuseLimit=10
                 ('gmlake policies' lists every knob with its default and range)
  --integrity    on host/cuda every block is stamped and checked at its free:
                 'on' (first/last bytes and stitch seams; default), 'full' (every byte), 'off'
  --invariants   check the allocator's invariants after every event (slow)
  --json         one JSON object: trace, policy, driver, events, peakRequestedBytes
                 (requested bytes), peakAllocatedBytes (as the policy counts blocks),
                 peakReservedBytes, utilization, oom, driverCalls, driverTimeUs,
                 driverCallsSecondHalf, traceDurationUs, wallMs, eventsPerSecond,
                 integrityErrors, ...
  --plot FILE    an SVG of allocated and reserved over the replay
  --export F FILE  the replayed allocator's history: memory-viz (a snapshot pickle that
                 PyTorch's memory viewer opens; each entry keeps the stack and the
                 annotations the trace recorded), perfetto (Chrome trace JSON), rmm-csv
  --force, -f    replace existing --plot / --export files (never the input trace).
                 Output paths are checked before the replay; files are written whole
                 (temporary file + rename) or not at all

Examples:
  gmlake replay ../shared/traces/llama1b_lora.pickle.gz --policy gmlake --json
  gmlake replay job.pickle -p vms --capacity 12GiB --export memory-viz v.pickle`,
  async run(values, positionals) {
    if (positionals.length > 1) throw new UsageError("replay takes one trace (use compare for several)");
    const added = await usePolicyModules(values["policy-module"]);
    const policy = checkPolicy(String(values.policy ?? added[0] ?? "caching"));
    const driver = parseDriver(values.driver);
    const budget = parseBudget(values);
    const capacity = budget.allocatorBytes ?? undefined;
    const options = knobsFor([policy], parseSets(values.set))(policy);
    const integrityArg = values.integrity === undefined ? undefined : String(values.integrity);
    if (integrityArg !== undefined && !["on", "off", "full"].includes(integrityArg)) {
      throw new UsageError(`invalid --integrity '${integrityArg}': expected on, off or full`);
    }
    const exports = parseExports(values.export as string[] | undefined);
    // Checked before any work: not the input, no existing file without --force, a writable directory.
    const targets = checkOutputs(
      [...(values.plot !== undefined ? [{ path: String(values.plot), option: "--plot" }] : []), ...exports.map((e) => ({ path: e.file, option: `--export ${e.format}` }))],
      { inputs: traceInputs(positionals), force: Boolean(values.force) },
    );
    const plotTarget = values.plot !== undefined ? targets.shift() : undefined;
    const vizExport = exports.some((e) => e.format === "memory-viz");
    const t = await loadTrace(positionals[0], { frames: vizExport });
    const record = values.plot !== undefined || exports.length > 0;
    const { row, result } = runReplay(t, {
      policy,
      driver,
      capacity,
      options,
      integrity: integrityArg === undefined ? undefined : integrityArg === "full" ? "full" : integrityArg === "on",
      checkInvariants: Boolean(values.invariants),
      record,
      sources: vizExport,
    });
    if (plotTarget && result.log) {
      const oomAtUs = result.oom ? t.snapshot.events.timeUs[result.oom.eventIndex] : undefined;
      writePlot(plotTarget, t.name, [{ label: policy, log: result.log, oomAtUs }], t.snapshot.events, { capacityBytes: budget.allocatorBytes, capacityLabel: capacityLabel(budget), recordedName: recordedBy(t.snapshot.allocatorSettings).name });
    }
    const s = t.snapshot;
    const context = { settings: s.allocatorSettings, sourceEvents: result.sourceEvents, frames: s.frames, annotations: s.annotations, streamOf: poolStreamsOf(s.events, s.segments) };
    if (result.log) exports.forEach((e, i) => writeExport(e.format, targets[i]!, result.log!, context));
    if (values.json) {
      printJson({ ...row, capacityBytes: budget.capacityBytes, reserveBytes: budget.capacityBytes === null ? null : budget.reserveBytes });
      return;
    }
    printText(describeRow(row) + (budget.capacityBytes !== null ? `\n${field("device", budget.echo)}` : ""));
  },
};

function parseExports(list: string[] | undefined): { format: string; file: string }[] {
  return (list ?? []).map((item) => {
    const i = item.indexOf("=");
    const format = i > 0 ? item.slice(0, i) : item;
    const file = i > 0 ? item.slice(i + 1) : "";
    if (!EXPORT_FORMATS.includes(format)) throw new UsageError(`invalid --export format '${format}': expected ${EXPORT_FORMATS.join(", ")}`);
    if (!file) throw new UsageError(`--export ${format} needs a file name (--export ${format} FILE)`);
    return { format, file };
  });
}

export function describeRow(r: ReplayRow): string {
  const calls = Object.entries(r.driverCalls)
    .filter(([, n]) => n > 0)
    .map(([c, n]) => `${c} ${n}`)
    .join(", ");
  const lines = [
    wrap(`${r.trace} with ${r.policy} on the ${r.driver} driver: ${r.events.toLocaleString("en-US")} events in ${r.wallMs.toFixed(0)} ms (${(r.eventsPerSecond / 1e6).toFixed(2)} M events/s)`),
    field("peak requested", `${formatBytes(r.peakRequestedBytes)} (requested bytes; ${formatBytes(r.peakAllocatedBytes)} allocated as ${r.policy} counts blocks)`),
    field("peak reserved", formatBytes(r.peakReservedBytes)),
    field("utilization", r.utilization.toFixed(3)),
    field("out of memory", r.oom ? `at event ${r.oom.eventIndex}: ${formatBytes(r.oom.requestBytes)} requested with ${formatBytes(r.oom.reservedBytes)} reserved` : "no"),
    field("driver calls", calls || "none"),
    field("driver time", `${(r.driverTimeUs / 1000).toFixed(2)} ms${r.traceDurationUs > 0 ? ` (${((100 * r.driverTimeUs) / r.traceDurationUs).toFixed(3)}% of the trace's ${(r.traceDurationUs / 1e6).toFixed(2)} s)` : ""}; ${r.driverCallsSecondHalf} calls in the second half`),
  ];
  if (r.driver !== "sim") lines.push(field("integrity", `${r.integrityErrors} errors in ${r.integrityChecked} checked blocks`));
  // a run cut short by an out-of-memory: its peaks are up to there, not a finished run's
  if (r.oom) lines.splice(1, 0, field("OOM", `the figures below stop at event ${r.oom.eventIndex}, where it ran out of memory: not those of a finished run`));
  return lines.join("\n");
}
