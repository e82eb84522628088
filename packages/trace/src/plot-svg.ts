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
}

export interface PlotOptions {
  title?: string;
  subtitle?: string;
  width?: number;
  height?: number;
}

const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];
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
 * dashed one for reserved per run (steps: memory holds its value between events), a legend
 * with peaks, and a title.
 */
export function plotSvg(series: readonly PlotSeries[], options: PlotOptions = {}): string {
  const W = options.width ?? 960;
  const H = options.height ?? 480;
  const title = options.title ?? "GPU memory over time";
  const legendRows = series.length;
  const top = 44 + (options.subtitle ? 18 : 0) + legendRows * 20 + 8;
  const left = 72, right = 24, bottom = 48;
  const pw = W - left - right;
  const ph = H - top - bottom;

  let maxY = 0;
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
  out.push(`<text x="${W / 2}" y="26" text-anchor="middle" font-size="17" font-weight="bold" fill="#222">${esc(title)}</text>`);
  if (options.subtitle) out.push(`<text x="${W / 2}" y="46" text-anchor="middle" font-size="12" fill="#555">${esc(options.subtitle)}</text>`);

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
  out.push(`<text transform="translate(18 ${top + ph / 2}) rotate(-90)" text-anchor="middle" font-size="13" fill="#222">memory (GiB)</text>`);

  // Curves: reserved first (dashed, behind), then allocated.
  const path = (c: TimelineSeries, t0: number): string => {
    let d = "";
    for (let j = 0; j < c.bytes.length; j++) {
      const x = X(c.timeUs[j] - t0).toFixed(1);
      const y = Y(c.bytes[j]).toFixed(1);
      d += j === 0 ? `M${x} ${y}` : `H${x}V${y}`;
    }
    return d;
  };
  const colors = series.map((s, i) => s.color ?? PALETTE[i % PALETTE.length]);
  series.forEach((s, i) => {
    if (s.reserved && s.reserved.bytes.length > 0) out.push(`<path d="${path(s.reserved, starts[i])}" fill="none" stroke="${colors[i]}" stroke-width="1.6" stroke-dasharray="7 4" opacity="0.9"/>`);
  });
  series.forEach((s, i) => {
    if (s.allocated && s.allocated.bytes.length > 0) out.push(`<path d="${path(s.allocated, starts[i])}" fill="none" stroke="${colors[i]}" stroke-width="1.4"/>`);
  });

  // Legend: one row per run.
  const peak = (c?: TimelineSeries): number => (c ? c.bytes.reduce((m, v) => (v > m ? v : m), 0) : 0);
  const legendTop = 44 + (options.subtitle ? 18 : 0);
  series.forEach((s, i) => {
    const x = left;
    const y = legendTop + i * 20;
    const c = colors[i];
    // Only the curves the run has: a run may carry allocated, reserved or both.
    if (s.allocated) out.push(`<line x1="${x}" y1="${y}" x2="${x + 22}" y2="${y}" stroke="${c}" stroke-width="2"/>`);
    if (s.reserved) out.push(`<line x1="${x + 30}" y1="${y}" x2="${x + 52}" y2="${y}" stroke="${c}" stroke-width="2" stroke-dasharray="7 4"/>`);
    const parts: string[] = [];
    if (s.allocated) parts.push(`allocated (solid), peak ${(peak(s.allocated) / GiB).toFixed(2)} GiB`);
    if (s.reserved) parts.push(`reserved (dashed), peak ${(peak(s.reserved) / GiB).toFixed(2)} GiB`);
    const text = `${s.label}: ${parts.join("; ")}`;
    out.push(`<text x="${x + 58}" y="${y}" dy="4" font-size="12" fill="#222">${esc(text)}</text>`);
  });
  out.push("</svg>");
  return out.join("\n");
}
