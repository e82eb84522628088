import type { Recorded } from "./recorded.js";
import { workloadOf } from "./recorded.js";
import type { TaskResult } from "./task.js";

const gib = (b: number | null) => (b === null ? "-" : (b / 2 ** 30).toFixed(2));

export interface SummaryInput {
  date: string;
  machine: string;
  command: string;
  results: TaskResult[];
  recorded: Recorded[];
}

/**
 * The Markdown summary: per trace x policy x driver, beside PyTorch's own figures. A run
 * that stopped at an out-of-memory shows OOM, not the figures it had reached there.
 */
export function markdownSummary(x: SummaryInput): string {
  const recByTrace = new Map(x.recorded.map((r) => [r.trace, r]));
  // PyTorch's measured figures for a workload: the default-mode file and its _expandable twin.
  const measured = new Map<string, { caching?: Recorded; expandable?: Recorded }>();
  for (const r of x.recorded) {
    const w = workloadOf(r.trace);
    const m = measured.get(w) ?? {};
    m[r.mode] = r;
    measured.set(w, m);
  }
  const out: string[] = [];
  out.push(`Date: ${x.date}  `, `Machine: ${x.machine}  `, `Command: \`${x.command}\``, "");
  out.push(...headline(x, measured), "");
  out.push("All runs:", "");
  out.push(
    "| trace | policy | driver | capacity | peak requested GiB | peak reserved GiB | utilization | PyTorch default: reserved / util | PyTorch expandable: reserved / util | OOM | driver calls | driver ms | % of trace | 2nd-half calls | M events/s | integrity errors / checked | device used at peak GiB |",
    "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
  );
  for (const r of x.results) {
    const m = measured.get(workloadOf(r.trace)) ?? {};
    const pt = (rec?: Recorded) => (rec ? `${gib(rec.peakReservedBytes)} / ${rec.utilization.toFixed(3)}` : "-");
    const calls = Object.values(r.driverCalls).reduce((a, b) => a + b, 0);
    const dur = recByTrace.get(r.trace)?.durationUs ?? r.traceDurationUs;
    out.push(
      `| ${r.trace} | ${r.policy} | ${r.driver} | ${r.capacityNote ?? (r.capacityBytes ? gib(r.capacityBytes) : "-")} | ${gib(r.peakRequestedBytes)} | ${r.oom ? "OOM" : gib(r.peakReservedBytes)} | ${r.oom ? "-" : r.utilization.toFixed(3)} | ${pt(m.caching)} | ${pt(m.expandable)} | ${r.error ? `ERROR ${r.error}` : r.oom ? `at #${r.oom.eventIndex}` : "no"} | ${calls} | ${(r.driverTimeUs / 1000).toFixed(1)} | ${dur > 0 ? ((100 * r.driverTimeUs) / dur).toFixed(2) : "-"} | ${r.driverCallsSecondHalf} | ${(r.eventsPerSecond / 1e6).toFixed(2)} | ${r.driver === "sim" ? "-" : `${r.integrityErrors} / ${r.integrityChecked}`} | ${gib(r.deviceUsedAtPeakBytes)} |`,
    );
  }
  return out.join("\n") + "\n";
}

/**
 * The table to read first: per trace, each policy's peak reserved and utilization on the
 * sim driver beside PyTorch's measured figures, and which policies fit a device of the
 * capacity runs (e.g. 1.02 x peak requested) without an out-of-memory.
 */
function headline(x: SummaryInput, measured: Map<string, { caching?: Recorded; expandable?: Recorded }>): string[] {
  const policies = [...new Set(x.results.map((r) => r.policy))];
  const traces = [...new Set(x.results.map((r) => r.trace))];
  const capNote = x.results.find((r) => r.capacityNote)?.capacityNote ?? null;
  const head = ["trace", "peak requested GiB", "PyTorch default GiB / util", "PyTorch expandable GiB / util", ...policies.map((p) => `${p} GiB / util`)];
  if (capNote) head.push(`no OOM at ${capNote}`);
  const lines = [`| ${head.join(" | ")} |`, `| ${head.map((_, i) => (i === 0 ? "---" : "---:")).join(" | ")} |`];
  const cell = (r?: { peakReservedBytes: number; utilization: number }) => (r ? `${gib(r.peakReservedBytes)} / ${r.utilization.toFixed(3)}` : "-");
  for (const t of traces) {
    const m = measured.get(workloadOf(t)) ?? {};
    const sim = (p: string) => x.results.find((r) => r.trace === t && r.policy === p && r.driver === "sim" && r.capacityBytes === null && !r.error);
    const requested = sim(policies[0])?.peakRequestedBytes ?? null;
    const row = [t, gib(requested), cell(m.caching), cell(m.expandable), ...policies.map((p) => cell(sim(p)))];
    if (capNote) {
      const fit = x.results.filter((r) => r.trace === t && r.capacityBytes !== null && !r.error && !r.oom).map((r) => r.policy);
      row.push(fit.length ? fit.join(", ") : "none");
    }
    lines.push(`| ${row.join(" | ")} |`);
  }
  return lines;
}
