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

/** The Markdown summary: per trace x policy x driver, beside PyTorch's own figures. */
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
  out.push(
    "| trace | policy | driver | capacity | peak live GiB | peak reserved GiB | utilization | PyTorch default: reserved / util | PyTorch expandable: reserved / util | OOM | driver calls | driver ms | % of trace | 2nd-half calls | M events/s | integrity errors / checked | device used at peak GiB |",
    "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
  );
  for (const r of x.results) {
    const m = measured.get(workloadOf(r.trace)) ?? {};
    const pt = (rec?: Recorded) => (rec ? `${gib(rec.peakReservedBytes)} / ${rec.utilization.toFixed(3)}` : "-");
    const calls = Object.values(r.driverCalls).reduce((a, b) => a + b, 0);
    const dur = recByTrace.get(r.trace)?.durationUs ?? r.traceDurationUs;
    out.push(
      `| ${r.trace} | ${r.policy} | ${r.driver} | ${r.capacityNote ?? (r.capacityBytes ? gib(r.capacityBytes) : "-")} | ${gib(r.peakLiveBytes)} | ${gib(r.peakReservedBytes)} | ${r.utilization.toFixed(3)} | ${pt(m.caching)} | ${pt(m.expandable)} | ${r.error ? `ERROR ${r.error}` : r.oom ? `at #${r.oom.eventIndex}` : "no"} | ${calls} | ${(r.driverTimeUs / 1000).toFixed(1)} | ${dur > 0 ? ((100 * r.driverTimeUs) / dur).toFixed(2) : "-"} | ${r.driverCallsSecondHalf} | ${(r.eventsPerSecond / 1e6).toFixed(2)} | ${r.driver === "sim" ? "-" : `${r.integrityErrors} / ${r.integrityChecked}`} | ${gib(r.deviceUsedAtPeakBytes)} |`,
    );
  }
  return out.join("\n") + "\n";
}
