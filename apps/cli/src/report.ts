import type { CompareRow, RecordedRow } from "./commands/compare.js";
import type { DeviceBudget } from "./device-budget.js";
import type { FitVerdict } from "./fit-verdict.js";
import { shortFile, type MemoryAnswers } from "./memory-answers.js";
import { COLUMNS, REPORT, gib, type Line } from "./compare-columns.js";

/** One trace's section of the report. */
export interface ReportTrace {
  name: string;
  recorded: RecordedRow;
  rows: CompareRow[];
  fit: FitVerdict[];
  advice: string | null;
  /** The plot, an SVG document (inlined). */
  svg: string | null;
  answers: MemoryAnswers | null;
}

export interface ReportInput {
  generatedAt: string;
  command: string;
  driver: string;
  budget: DeviceBudget;
  traces: ReportTrace[];
}

const esc = (s: string): string => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");

const CSS = `
body{font:15px/1.45 -apple-system,"Segoe UI",Helvetica,Arial,sans-serif;color:#1d1d1f;margin:0;background:#f6f7f9}
main{max-width:1080px;margin:0 auto;padding:24px 28px 60px}
h1{font-size:24px;margin:8px 0 4px}h2{font-size:20px;margin:36px 0 8px;border-bottom:1px solid #d8dbe0;padding-bottom:4px}
h3{font-size:16px;margin:22px 0 6px}.meta{color:#5f6368;font-size:13px}
.card{background:#fff;border:1px solid #e1e4e8;border-radius:8px;padding:14px 18px;margin:12px 0}
.advice{border-left:4px solid #1a73e8;background:#eef4fe}
table{border-collapse:collapse;font-variant-numeric:tabular-nums;font-size:14px;background:#fff}
th,td{padding:4px 10px;border-bottom:1px solid #eceef1;text-align:right;white-space:nowrap}
th{background:#f1f3f5;font-weight:600}td.l,th.l{text-align:left}
tr.rec td{font-style:italic;color:#444}tr.oom td{color:#b00020}
.yes{color:#137333;font-weight:600}.no{color:#b00020;font-weight:600}
.plot svg{max-width:100%;height:auto;display:block}
code{font:13px ui-monospace,Menlo,Consolas,monospace;background:#f1f3f5;padding:1px 4px;border-radius:3px}
.site{font:13px ui-monospace,Menlo,Consolas,monospace;white-space:normal;word-break:break-all;text-align:left}
.scroll{overflow-x:auto}
`;

function table(head: string[], rows: string[][], opts: { left?: number[]; rowClass?: (i: number) => string } = {}): string {
  const left = new Set(opts.left ?? [0]);
  const th = head.map((h, i) => `<th${left.has(i) ? ' class="l"' : ""}>${esc(h)}</th>`).join("");
  const body = rows
    .map((r, ri) => {
      const cls = opts.rowClass?.(ri);
      return `<tr${cls ? ` class="${cls}"` : ""}>${r.map((c, i) => `<td${left.has(i) ? ' class="l"' : ""}>${c}</td>`).join("")}</tr>`;
    })
    .join("\n");
  return `<div class="scroll"><table><thead><tr>${th}</tr></thead><tbody>\n${body}\n</tbody></table></div>`;
}

/** The report's table: compare's own columns (compare-columns.ts), so its figures are the terminal's. */
function compareTable(t: ReportTrace): string {
  const lines: Line[] = [{ kind: "recorded", r: t.recorded }, ...t.rows.map((r): Line => ({ kind: "replay", r, fit: t.fit.find((f) => f.policy === r.policy) }))];
  const fitsAt = REPORT.indexOf(COLUMNS.fits);
  const rows = lines.map((l) =>
    REPORT.map((c, i) => {
      const v = c.value(l);
      if (i === fitsAt && (v === "yes" || v === "no")) return `<span class="${v}">${v}</span>`;
      return esc(l.kind === "recorded" && c === COLUMNS.allocator ? `${t.recorded.recordedBy.name} (recorded)` : v);
    }),
  );
  return table(REPORT.map((c) => c.header), rows, { rowClass: (i) => (i === 0 ? "rec" : lines[i]!.kind === "replay" && !(lines[i]!.r as CompareRow).finished ? "oom" : "") });
}

/** Which replays a section's figures come from: with the capacity or without. */
function replaysNote(b: DeviceBudget): string {
  return b.allocatorBytes === null
    ? "replays without a capacity (each allocator gets all the memory it asks for)"
    : `replays under --capacity ${gib(b.capacityBytes!)} less the ${gib(b.reserveBytes)} reserve: ${gib(b.allocatorBytes)} for the allocator`;
}

function sitesSection(a: MemoryAnswers): string {
  const p = a.sites;
  if (!a.hasStacks) {
    return `<p class="meta">No stacks in this trace: record it with <code>torch.cuda.memory._record_memory_history(context="all", stacks="python")</code> to see which code holds the memory.</p>`;
  }
  const rows = p.sites.map((s) => [
    gib(s.bytes),
    `${((100 * s.bytes) / Math.max(1, p.peakRequestedBytes)).toFixed(1)}%`,
    String(s.blocks),
    `<span class="site" title="${esc(s.stack.map((f) => `${f.filename}:${f.line} in ${f.name}`).join("\n"))}">${esc(shortFile(s.label))}</span>`,
  ]);
  return `<p>${gib(p.peakRequestedBytes)} requested at the peak (event #${p.eventIndex}), held by ${p.totalSites} allocation sites (each block's innermost frame outside PyTorch; hover a site for its stack):</p>${table(["held", "share", "blocks", "site"], rows, { left: [3] })}`;
}

function summarySection(a: MemoryAnswers): string {
  const ps = a.policies;
  const v = (f: (x: NonNullable<(typeof ps)[number]["atPeak"]>) => number, bytes = true) => ps.map((x) => (x.atPeak ? (bytes ? gib(f(x.atPeak)) : String(f(x.atPeak))) : "-"));
  const rows: [string, string[]][] = [
    ["GPU reserved memory", v((m) => m.all.reservedBytes)],
    ["&nbsp;&nbsp;from large pool", v((m) => m.largePool.reservedBytes)],
    ["&nbsp;&nbsp;from small pool", v((m) => m.smallPool.reservedBytes)],
    ["Allocated memory", v((m) => m.all.allocatedBytes)],
    ["Active memory", v((m) => m.all.activeBytes)],
    ["Requested memory", v((m) => m.all.requestedBytes)],
    ["Non-releasable memory (inactive split)", v((m) => m.all.inactiveSplitBytes)],
    ["Releasable (cached, whole segments or handles)", v((m) => m.releasableBytes)],
    ["Largest free piece", v((m) => m.largestFreeBytes)],
    ["Waste at the peak (reserved - requested there)", ps.map((x) => (x.atPeak ? gib(x.wasteAtPeakBytes) : "-"))],
    ["Peak reserved (run)", ps.map((x) => gib(x.peakReservedBytes))],
    ["Peak requested (run)", ps.map((x) => gib(x.peakRequestedBytes))],
    ["Allocations", v((m) => m.all.allocations, false)],
    ["GPU reserved segments (handles)", ps.map((x) => (x.atPeak ? `${x.atPeak.all.segments} (${x.atPeak.handles})` : "-"))],
    ["Allocator retries (run)", ps.map((x) => String(x.numAllocRetries))],
    ["OOMs (run)", ps.map((x) => String(x.numOoms))],
  ];
  const buckets = ps[0]?.atPeak?.freeBySize ?? [];
  for (let bi = 0; bi < buckets.length; bi++) {
    rows.push([`free pieces ${esc(buckets[bi]!.label)}`, ps.map((x) => {
      const b = x.atPeak?.freeBySize[bi];
      return b && b.pieces ? `${b.pieces} = ${gib(b.bytes)}` : "-";
    })]);
  }
  const head = ps.map((x) => (x.stoppedAtEvent === null ? x.policy : `${x.policy} (OOM at #${x.stoppedAtEvent}: up to there)`));
  return table(["at each allocator's own peak", ...head], rows.map(([n, c]) => [n, ...c]));
}

/** The self-contained HTML report: inline CSS and SVG, no script, no network. */
export function reportHtml(x: ReportInput): string {
  const out: string[] = [];
  out.push(`<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">`);
  out.push(`<title>gmlake report: ${esc(x.traces.map((t) => t.name).join(", "))}</title><style>${CSS}</style></head><body><main>`);
  out.push(`<h1>Which allocator wastes least, and will it fit?</h1>`);
  out.push(`<p class="meta">gmlake ${esc(x.command)} · ${esc(x.generatedAt)} · replays on the ${esc(x.driver)} driver · ${esc(x.budget.echo)}</p>`);
  out.push(`<div class="card"><b>How to read it.</b> Each trace's requests are replayed through each allocator. <b>Waste</b> = peak reserved - peak requested (the requested bytes are the same for every allocator). <b>Smallest GPU</b> = the smallest capacity on which the whole trace runs (bisection over replays, exact to 2 MiB: every reservation is a multiple of 2 MiB) plus ${esc(gib(x.budget.reserveBytes))} held outside the allocator. A run that runs out of memory is marked OOM and its figures are not compared.</div>`);
  for (const t of x.traces) {
    out.push(`<h2>${esc(t.name)}</h2>`);
    if (t.advice) out.push(`<div class="card advice">${esc(t.advice)}</div>`);
    out.push(`<p class="meta">The table: ${esc(replaysNote(x.budget))}, on the ${esc(x.driver)} driver. Fits, smallest GPU and above limit: the fit search (sim replays at many capacities). Above limit = smallest capacity - the peak of requested bytes (${gib(t.recorded.peakRequestedBytes)}; ${gib(t.recorded.peakAllocatedBytes)} allocated after PyTorch's rounding), in % of it.</p>`);
    out.push(compareTable(t));
    const alt = t.fit.filter((v) => v.policy.startsWith("caching max_split_size_mb:") && v.smallestDeviceBytes !== null);
    if (alt.length) {
      out.push(`<p class="meta">PyTorch's default allocator with ${alt.map((v) => `<code>${esc(v.howToRun.replace("PYTORCH_CUDA_ALLOC_CONF=", ""))}</code>: ${gib(v.smallestDeviceBytes!)}`).join(", ")} (smallest GPU, searched for the advice).</p>`);
    }
    if (t.svg) out.push(`<h3>Memory over time</h3><p class="meta">The table's ${esc(replaysNote(x.budget))}.</p><div class="card plot">${t.svg.replace(/^<\?xml[^>]*>/, "")}</div>`);
    if (t.answers) {
      out.push(`<h3>What holds the memory at the peak</h3><p class="meta">From the recorded trace itself (no replay).</p>${sitesSection(t.answers)}`);
      out.push(`<h3>Each allocator at its own peak (PyTorch's memory_summary names)</h3><p class="meta">The table's ${esc(replaysNote(x.budget))}, replayed again on the sim driver to stop at each one's peak.</p>${summarySection(t.answers)}`);
    }
  }
  out.push(`</main></body></html>`);
  return out.join("\n") + "\n";
}
