import type { Timeline, TimelineSeries } from "./timeline.js";

/** One run in a plot: its allocated and reserved curves (from sampleTimeline). */
export interface PlotSeries {
  label: string;
  allocated?: TimelineSeries;
  reserved?: TimelineSeries;
  /** Time origin in µs (default: the earliest point); each run is drawn from its own start. */
  startUs?: number;
  /** CSS color (default: from a palette). */
  color?: string;
  /**
   * "recorded": what PyTorch itself did (the trace's own curves): drawn last, on top of
   * every model line (a model that reproduces it exactly would hide it otherwise), black,
   * thicker, dotted.
   */
  emphasis?: "recorded";
  /** Time (µs, on the series' clock) of an out-of-memory that stopped the run: marked with a cross. */
  oomAtUs?: number;
  /** stroke-dasharray of its reserved line (default "7 4"): runs that lie on top of each other stay told apart. */
  dash?: string;
  /** Name the reserved line at its right end, in its colour (labels pushed apart so as not to overlap). */
  directLabel?: boolean;
}

export interface PlotOptions {
  title?: string;
  subtitle?: string;
  width?: number;
  height?: number;
  /** A device capacity to draw as a horizontal line (bytes). */
  capacityBytes?: number;
  /** Its label (default "capacity X GiB"). */
  capacityLabel?: string;
}

const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];
const RECORDED_COLOR = "#111111";
const CAPACITY_COLOR = "#b00020";
const GiB = 2 ** 30;

/** A run of sampleTimeline as a plot series. */
export function timelineSeries(label: string, tl: Timeline, color?: string): PlotSeries {
  return { label, allocated: tl.allocated, reserved: tl.reserved, startUs: tl.startUs, color };
}

/** Tick step of 1, 2, 2.5 or 5 x 10^k giving about `target` intervals over `span`. */
export function niceStep(span: number, target = 5): number {
  if (!(span > 0)) return 1;
  const raw = span / target;
  const p = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

function esc(s: string): string {
  return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

function fmt(v: number, step: number): string {
  const decimals = step >= 1 ? 0 : Math.min(6, Math.ceil(-Math.log10(step) - 1e-9));
  return v.toFixed(decimals);
}

/** Time unit for a span in µs. */
function timeUnit(spanUs: number): { div: number; name: string } {
  if (spanUs >= 600e6) return { div: 60e6, name: "min" };
  if (spanUs >= 2e6) return { div: 1e6, name: "s" };
  if (spanUs >= 2e3) return { div: 1e3, name: "ms" };
  return { div: 1, name: "µs" };
}

/**
 * Allocated vs reserved memory over time for one or more runs, as a standalone SVG string:
 * GiB axis with nice ticks, time axis from each run's start, a solid line for allocated and a
 * dashed one for reserved per run (steps: memory holds its value between events), the
 * recorded run on top in its own style, an optional capacity line, a cross where a run
 * ran out of memory, and a compact legend (entries side by side, wrapping) with peaks.
 */
export function plotSvg(series: readonly PlotSeries[], options: PlotOptions = {}): string {
  const W = options.width ?? 960;
  const H = options.height ?? 480;
  const title = options.title ?? "GPU memory over time";
  const labelled = series.filter((s) => s.directLabel && s.reserved && s.reserved.bytes.length > 0);
  const left = 64, bottom = 46;
  const right = 20 + (labelled.length ? Math.ceil(Math.max(...labelled.map((s) => s.label.length)) * 6.4) + 8 : 0);
  const pw = W - left - right;
  const colors = series.map((s, i) => s.color ?? (s.emphasis === "recorded" ? RECORDED_COLOR : PALETTE[i % PALETTE.length]));

  // Legend entries laid out in rows across the plot's width.
  const peak = (c?: TimelineSeries): number => (c ? c.bytes.reduce((m, v) => (v > m ? v : m), 0) : 0);
  const entries = series.map((s, i) => {
    const r = s.reserved ? (peak(s.reserved) / GiB).toFixed(2) : null;
    const a = s.allocated ? (peak(s.allocated) / GiB).toFixed(2) : null;
    const peaks = r !== null && a !== null ? `reserved ${r} / allocated ${a}` : (r ?? a ?? "0.00");
    const text = `${s.label} ${peaks} GiB${s.oomAtUs !== undefined ? " (OOM)" : ""}`;
    const swatches = r !== null && a !== null ? 2 : 1;
    return { i, text, swatches, width: 28 * swatches + Math.ceil(text.length * 6.4) + 16 };
  });
  const legendTop = 40 + (options.subtitle ? 16 : 0);
  const placed: { i: number; text: string; swatches: number; x: number; y: number }[] = [];
  let lx = left;
  let ly = legendTop;
  for (const e of entries) {
    if (lx + e.width > left + pw && lx > left) {
      lx = left;
      ly += 17;
    }
    placed.push({ i: e.i, text: e.text, swatches: e.swatches, x: lx, y: ly });
    lx += e.width;
  }
  const top = (entries.length ? ly + 14 : legendTop) + 6;
  const ph = H - top - bottom;

  let maxY = options.capacityBytes ?? 0;
  let maxT = 0;
  const starts = series.map((s) => {
    let st = s.startUs ?? Infinity;
    if (s.startUs === undefined) for (const c of [s.allocated, s.reserved]) if (c && c.timeUs.length > 0) st = Math.min(st, c.timeUs[0]);
    return Number.isFinite(st) ? st : 0;
  });
  series.forEach((s, i) => {
    for (const c of [s.allocated, s.reserved]) {
      if (!c) continue;
      for (let j = 0; j < c.bytes.length; j++) {
        if (c.bytes[j] > maxY) maxY = c.bytes[j];
        const t = c.timeUs[j] - starts[i];
        if (t > maxT) maxT = t;
      }
    }
  });
  const yStep = niceStep(maxY / GiB || 1, 5);
  const yMax = Math.max(yStep, Math.ceil((maxY / GiB) / yStep - 1e-9) * yStep);
  const unit = timeUnit(maxT);
  const tSpan = maxT / unit.div || 1;
  const xStep = niceStep(tSpan, 8);
  const xMax = Math.max(xStep, Math.ceil(tSpan / xStep - 1e-9) * xStep);
  const X = (tUs: number): number => left + ((tUs / unit.div) / xMax) * pw;
  const Y = (bytes: number): number => top + ph - ((bytes / GiB) / yMax) * ph;

  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="Helvetica, Arial, sans-serif">`);
  out.push(`<rect width="${W}" height="${H}" fill="#ffffff"/>`);
  out.push(`<text x="${W / 2}" y="24" text-anchor="middle" font-size="16" font-weight="bold" fill="#222">${esc(title)}</text>`);
  if (options.subtitle) out.push(`<text x="${W / 2}" y="42" text-anchor="middle" font-size="12" fill="#555">${esc(options.subtitle)}</text>`);

  // Grid and axes.
  for (let v = 0; v <= yMax + 1e-9; v += yStep) {
    const y = Y(v * GiB).toFixed(1);
    out.push(`<line x1="${left}" y1="${y}" x2="${left + pw}" y2="${y}" stroke="${v === 0 ? "#444" : "#e3e3e3"}" stroke-width="1"/>`);
    out.push(`<text x="${left - 8}" y="${y}" dy="4" text-anchor="end" font-size="12" fill="#333">${fmt(v, yStep)}</text>`);
  }
  for (let v = 0; v <= xMax + 1e-9; v += xStep) {
    const x = X(v * unit.div).toFixed(1);
    out.push(`<line x1="${x}" y1="${top}" x2="${x}" y2="${top + ph}" stroke="${v === 0 ? "#444" : "#f0f0f0"}" stroke-width="1"/>`);
    out.push(`<text x="${x}" y="${top + ph + 18}" text-anchor="middle" font-size="12" fill="#333">${fmt(v, xStep)}</text>`);
  }
  out.push(`<text x="${left + pw / 2}" y="${H - 10}" text-anchor="middle" font-size="13" fill="#222">time (${unit.name})</text>`);
  out.push(`<text transform="translate(16 ${top + ph / 2}) rotate(-90)" text-anchor="middle" font-size="13" fill="#222">memory (GiB)</text>`);

  if (options.capacityBytes !== undefined) {
    const y = Y(options.capacityBytes).toFixed(1);
    const label = options.capacityLabel ?? `capacity ${(options.capacityBytes / GiB).toFixed(2)} GiB`;
    out.push(`<line x1="${left}" y1="${y}" x2="${left + pw}" y2="${y}" stroke="${CAPACITY_COLOR}" stroke-width="1.5" stroke-dasharray="10 3 2 3"/>`);
    out.push(`<text x="${left + pw - 4}" y="${y}" dy="-4" text-anchor="end" font-size="12" fill="${CAPACITY_COLOR}">${esc(label)}</text>`);
  }

  const path = (c: TimelineSeries, t0: number): string => {
    let d = "";
    for (let j = 0; j < c.bytes.length; j++) {
      const x = X(c.timeUs[j] - t0).toFixed(1);
      const y = Y(c.bytes[j]).toFixed(1);
      d += j === 0 ? `M${x} ${y}` : `H${x}V${y}`;
    }
    return d;
  };
  const stroke = (i: number, kind: "allocated" | "reserved"): string => {
    if (series[i].emphasis === "recorded") return `stroke="${colors[i]}" stroke-width="2.2" stroke-dasharray="${kind === "allocated" ? "1 0" : "2 3"}" stroke-linecap="round"`;
    return kind === "allocated" ? `stroke="${colors[i]}" stroke-width="1.4"` : `stroke="${colors[i]}" stroke-width="1.6" stroke-dasharray="${series[i].dash ?? "7 4"}"`;
  };
  // Model lines first (reserved dashed, then allocated), the recorded run last: on top.
  const order = [...series.keys()].sort((a, b) => Number(series[a].emphasis === "recorded") - Number(series[b].emphasis === "recorded"));
  for (const i of order) {
    const s = series[i];
    if (s.reserved && s.reserved.bytes.length > 0) out.push(`<path d="${path(s.reserved, starts[i])}" fill="none" ${stroke(i, "reserved")}/>`);
    if (s.allocated && s.allocated.bytes.length > 0) out.push(`<path d="${path(s.allocated, starts[i])}" fill="none" ${stroke(i, "allocated")}/>`);
  }
  // Direct labels: each named line's name right of the plot at its last value, pushed apart (>= 13 px).
  const tags = series
    .map((s, i) => ({ s, i }))
    .filter(({ s }) => s.directLabel && s.reserved && s.reserved.bytes.length > 0)
    .map(({ s, i }) => ({ i, label: s.label, y: Y(s.reserved!.bytes[s.reserved!.bytes.length - 1]!) }))
    .sort((a, b) => a.y - b.y);
  for (let k = 1; k < tags.length; k++) tags[k]!.y = Math.max(tags[k]!.y, tags[k - 1]!.y + 13);
  const overflow = tags.length ? tags[tags.length - 1]!.y - (top + ph) : 0;
  if (overflow > 0) for (const t of tags) t.y -= overflow; // keep the lowest label inside the plot
  for (const t of tags) out.push(`<text x="${left + pw + 4}" y="${t.y.toFixed(1)}" dy="4" font-size="11" fill="${colors[t.i]}">${esc(t.label)}</text>`);
  // Out-of-memory markers: a cross where the run stopped, at the height it had reached.
  series.forEach((s, i) => {
    if (s.oomAtUs === undefined) return;
    const c = s.reserved ?? s.allocated;
    const v = c && c.bytes.length ? c.bytes[c.bytes.length - 1] : 0;
    const x = X(s.oomAtUs - starts[i]);
    const y = Y(options.capacityBytes ?? v);
    out.push(`<path d="M${(x - 6).toFixed(1)} ${(y - 6).toFixed(1)}L${(x + 6).toFixed(1)} ${(y + 6).toFixed(1)}M${(x - 6).toFixed(1)} ${(y + 6).toFixed(1)}L${(x + 6).toFixed(1)} ${(y - 6).toFixed(1)}" stroke="${colors[i]}" stroke-width="2.5" fill="none"/>`);
    out.push(`<text x="${(x + 8).toFixed(1)}" y="${(y - 8).toFixed(1)}" font-size="11" font-weight="bold" fill="${colors[i]}">OOM ${esc(s.label)}</text>`);
  });

  for (const p of placed) {
    const s = series[p.i];
    const y = p.y;
    const kinds: ("reserved" | "allocated")[] = [];
    if (s.reserved) kinds.push("reserved");
    if (s.allocated || kinds.length === 0) kinds.push("allocated");
    kinds.forEach((kind, k) => out.push(`<line x1="${p.x + 28 * k}" y1="${y}" x2="${p.x + 28 * k + 22}" y2="${y}" ${stroke(p.i, kind)}/>`));
    out.push(`<text x="${p.x + 28 * kinds.length}" y="${y}" dy="4" font-size="12" fill="#222">${esc(p.text)}</text>`);
  }
  out.push("</svg>");
  return out.join("\n");
}
