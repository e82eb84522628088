import { memoryAtPeak, privatePoolTags, replay, type MemoryState } from "@gmlake/stitch";
import { sitesAtPeak, type SitesAtPeak } from "@gmlake/trace";
import { SimDriver } from "@gmlake/vmm";
import type { LoadedTrace } from "./load-trace.js";
import { asUsage } from "./options.js";
import { formatBytes } from "./sizes.js";
import { fitCell, terminalWidth, textTable, wrap, type Column } from "./table.js";

/** One policy's memory at its own peak reserved, and over the whole run. */
export interface PolicyPeak {
  policy: string;
  /** Peaks over the whole replay (PyTorch's max_memory_*). */
  peakReservedBytes: number;
  peakAllocatedBytes: number;
  peakActiveBytes: number;
  peakRequestedBytes: number;
  /** The state at the tightest moment of the peak (reserved at its peak, the most bytes requested). */
  atPeak: MemoryState | null;
  /** Reserved - requested there: what fragmentation, rounding and caching cost at the peak. */
  wasteAtPeakBytes: number;
  /** Over the whole run. */
  numAllocRetries: number;
  numOoms: number;
  /** Under a capacity: the out-of-memory the replay stopped at (its figures end there); else null. */
  stoppedAtEvent: number | null;
}

export interface MemoryAnswers {
  trace: string;
  /** The capacity the replays ran under (compare --capacity less the reserve), or null. */
  capacityBytes: number | null;
  /** Whether the trace has stacks (recorded with context="all", stacks="python"). */
  hasStacks: boolean;
  sites: SitesAtPeak;
  policies: PolicyPeak[];
}

/** What holds the memory at the trace's peak, and what each policy's memory looks like at its own. Sim driver. */
export function memoryAnswers(t: LoadedTrace, policies: readonly string[], knobs: (policy: string) => Record<string, unknown>, top = 10, x: { capacity?: number } = {}): MemoryAnswers {
  const s = t.snapshot;
  const frames = s.frames ?? [];
  const sites = sitesAtPeak(s.events, frames, top);
  const pools = privatePoolTags(s.events, s.segments);
  const out: PolicyPeak[] = [];
  for (const policy of policies) {
    // under a capacity, as compare's replays run: stopped at the first out-of-memory
    const o = { policy, options: knobs(policy), settings: s.allocatorSettings, pools, capacity: x.capacity, onOom: x.capacity === undefined ? "continue" : "stop" } as const;
    const full = asUsage(() => replay(s.events, { ...o, driver: new SimDriver(), recorder: null }));
    const atPeak = asUsage(() => memoryAtPeak(s.events, { ...o, driver: new SimDriver(), peakReservedEventIndex: full.peakReservedEventIndex }));
    out.push({
      policy,
      peakReservedBytes: full.peakReservedBytes,
      peakAllocatedBytes: full.peakAllocatedBytes,
      peakActiveBytes: full.peakActiveBytes,
      peakRequestedBytes: full.peakRequestedBytes,
      atPeak,
      wasteAtPeakBytes: atPeak ? atPeak.all.reservedBytes - atPeak.all.requestedBytes : 0,
      numAllocRetries: full.numAllocRetries,
      numOoms: full.ooms,
      stoppedAtEvent: x.capacity !== undefined && full.oom ? full.oom.eventIndex : null,
    });
  }
  return { trace: t.name, capacityBytes: x.capacity ?? null, hasStacks: frames.some((f) => f !== undefined && f.length > 0), sites, policies: out };
}

/** A site's file as a person reads it: the path inside site-packages (or the path given). */
export function shortFile(label: string): string {
  return label.replace(/^.*\/site-packages\//, "");
}

const gib = (b: number) => formatBytes(b);

/** The sites table: bytes, blocks, share of the peak, site. Fits the terminal. */
export function sitesText(a: MemoryAnswers): string {
  const p = a.sites;
  const lines: string[] = [];
  lines.push(wrap(`${a.trace}: ${formatBytes(p.peakRequestedBytes)} requested at the peak (event #${p.eventIndex}), held by ${p.totalSites} allocation site(s)${p.totalSites > p.sites.length ? `; the top ${p.sites.length}` : ""}:`));
  if (!a.hasStacks) {
    lines.push("  the trace has no stacks: record with torch.cuda.memory._record_memory_history(context=\"all\", stacks=\"python\")");
    return lines.join("\n");
  }
  type S = (typeof p.sites)[number];
  const cols: Column<S>[] = [
    { header: "held", value: (s) => gib(s.bytes) },
    { header: "share", value: (s) => `${((100 * s.bytes) / Math.max(1, p.peakRequestedBytes)).toFixed(1)}%` },
    { header: "blocks", value: (s) => String(s.blocks) },
  ];
  // the site gets what the terminal has left after the figures (its start elided)
  const figures = cols.reduce((w, c) => w + 2 + Math.max(c.header.length, ...p.sites.map((s) => c.value(s).length)), 2);
  const room = Math.max(24, terminalWidth() - figures);
  cols.push({ header: "site (innermost frame outside PyTorch)", align: "left", value: (s) => fitCell(shortFile(s.label), room) });
  lines.push(textTable(p.sites, cols, { width: Infinity }).replace(/^/gm, "  "));
  return lines.join("\n");
}

interface Metric {
  name: string;
  value: (x: PolicyPeak) => string;
}

const atPeak = (f: (m: MemoryState) => number, bytes = true) => (x: PolicyPeak) => (x.atPeak ? (bytes ? gib(f(x.atPeak)) : String(f(x.atPeak))) : "-");

/** memory_summary()'s rows, at each policy's own peak, one column per policy. */
const METRICS: Metric[] = [
  { name: "GPU reserved memory", value: atPeak((m) => m.all.reservedBytes) },
  { name: "  from large pool", value: atPeak((m) => m.largePool.reservedBytes) },
  { name: "  from small pool", value: atPeak((m) => m.smallPool.reservedBytes) },
  { name: "Allocated memory", value: atPeak((m) => m.all.allocatedBytes) },
  { name: "  from large pool", value: atPeak((m) => m.largePool.allocatedBytes) },
  { name: "  from small pool", value: atPeak((m) => m.smallPool.allocatedBytes) },
  { name: "Active memory", value: atPeak((m) => m.all.activeBytes) },
  { name: "Requested memory", value: atPeak((m) => m.all.requestedBytes) },
  { name: "Non-releasable memory", value: atPeak((m) => m.all.inactiveSplitBytes) },
  { name: "  from large pool", value: atPeak((m) => m.largePool.inactiveSplitBytes) },
  { name: "  from small pool", value: atPeak((m) => m.smallPool.inactiveSplitBytes) },
  { name: "Releasable (cached)", value: atPeak((m) => m.releasableBytes) },
  { name: "Allocations", value: atPeak((m) => m.all.allocations, false) },
  { name: "Non-releasable allocs", value: atPeak((m) => m.all.inactiveSplit, false) },
  { name: "GPU reserved segments", value: atPeak((m) => m.all.segments, false) },
  { name: "  of them handles", value: atPeak((m) => m.handles, false) },
  { name: "Largest free piece", value: atPeak((m) => m.largestFreeBytes) },
  { name: "Waste (reserved-req.)", value: (x) => (x.atPeak ? gib(x.wasteAtPeakBytes) : "-") },
  { name: "Peak reserved (run)", value: (x) => gib(x.peakReservedBytes) },
  { name: "Peak allocated (run)", value: (x) => gib(x.peakAllocatedBytes) },
  { name: "Allocator retries", value: (x) => String(x.numAllocRetries) },
  { name: "OOMs", value: (x) => String(x.numOoms) },
];

/** The memory_summary-like table and the free pieces by size, per policy. */
export function summaryText(a: MemoryAnswers): string {
  const ps = a.policies;
  const rows = METRICS.map((m) => ({ name: m.name, cells: ps.map((p) => m.value(p)) }));
  const cols: Column<(typeof rows)[number]>[] = [
    { header: "at each allocator's peak", align: "left", value: (r) => r.name },
    ...ps.map((p, i) => ({ header: p.policy, value: (r: (typeof rows)[number]) => r.cells[i]! })),
  ];
  const out = [textTable(rows, cols)];
  const buckets = ps[0]?.atPeak?.freeBySize.map((b) => b.label) ?? [];
  if (buckets.length) {
    const fr = buckets.map((label, bi) => ({
      label,
      cells: ps.map((p) => {
        const b = p.atPeak?.freeBySize[bi];
        return b && b.pieces > 0 ? `${b.pieces} = ${gib(b.bytes)}` : "-";
      }),
    }));
    const fcols: Column<(typeof fr)[number]>[] = [
      { header: "free pieces by size", align: "left", value: (r) => r.label },
      ...ps.map((p, i) => ({ header: p.policy, value: (r: (typeof fr)[number]) => r.cells[i]! })),
    ];
    out.push(textTable(fr, fcols));
  }
  return out.join("\n\n");
}
