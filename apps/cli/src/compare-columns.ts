import type { CompareRow, RecordedRow } from "./commands/compare.js";
import type { FitVerdict } from "./fit-verdict.js";
import { fitCell, type Column } from "./table.js";

/**
 * compare's columns, one definition for the terminal table, the Markdown table and the
 * report's table: every figure is formatted once, so the three cannot disagree.
 */
export type Line = { kind: "recorded"; r: RecordedRow } | { kind: "replay"; r: CompareRow; fit?: FitVerdict };

export const gib = (b: number): string => `${(b / 2 ** 30).toFixed(2)} GiB`;
const pct = (x: number): string => `${x.toFixed(1)}%`;

/** The figures of a replay that stopped at an out-of-memory are not shown as if it had finished. */
const finished = (l: Line): boolean => l.kind === "recorded" || l.r.finished;
const verdict = (l: Line): FitVerdict | undefined => (l.kind === "replay" ? l.fit : undefined);
const ifFit = (l: Line, f: (v: FitVerdict) => string): string => {
  const v = verdict(l);
  return v ? f(v) : "-";
};

/** A policy's smallest capacity above a limit: "0.21 GiB 0.6%" (of the limit); "-" where there is none. */
export function gapText(bytes: number | null, percent: number | null): string {
  return bytes === null || percent === null ? "-" : `${gib(bytes)} ${pct(percent)}`;
}

export const COLUMNS = {
  trace: { header: "trace", align: "left", value: (l) => fitCell(l.r.trace, 24) },
  allocator: { header: "allocator", align: "left", value: (l) => (l.kind === "recorded" ? "recorded" : l.r.policy) },
  peakReserved: { header: "peak reserved", value: (l) => (finished(l) ? gib(l.r.peakReservedBytes) : "OOM") },
  waste: {
    header: "waste",
    value: (l) => {
      if (!finished(l)) return "-";
      const w = l.r.peakReservedBytes - l.r.peakRequestedBytes;
      return `${gib(w)} ${`${l.r.peakReservedBytes > 0 ? Math.round((100 * w) / l.r.peakReservedBytes) : 0}%`.padStart(3)}`;
    },
  },
  fits: { header: "fits", value: (l) => ifFit(l, (v) => (v.fits === null ? "-" : v.fits ? "yes" : "no")) },
  smallestGpu: { header: "smallest GPU", value: (l) => ifFit(l, (v) => (v.smallestDeviceBytes === null ? "none" : gib(v.smallestDeviceBytes))) },
  aboveLimit: { header: "above limit", value: (l) => ifFit(l, (v) => gapText(v.gapBytes, v.gapPercent)) },
  smallestCapacity: { header: "smallest capacity", value: (l) => ifFit(l, (v) => (v.smallestCapacityBytes === null ? "none" : gib(v.smallestCapacityBytes))) },
  aboveAllocated: { header: "above allocated", value: (l) => ifFit(l, (v) => gapText(v.gapToAllocatedBytes, v.gapToAllocatedPercent)) },
  headroom: { header: "headroom", value: (l) => ifFit(l, (v) => (v.headroomBytes === null ? "-" : gib(v.headroomBytes))) },
  peakRequested: { header: "peak requested", value: (l) => (finished(l) ? gib(l.r.peakRequestedBytes) : "-") },
  utilization: { header: "utilization", value: (l) => (finished(l) && l.r.utilization !== null ? l.r.utilization.toFixed(3) : "-") },
  oom: { header: "OOM", value: (l) => (l.kind === "recorded" ? "" : l.r.oom ? `at #${l.r.oom.eventIndex}` : "no") },
  driverCalls: { header: "driver calls", value: (l) => (l.kind === "recorded" ? "" : String(Object.values(l.r.driverCalls).reduce((a, b) => a + b, 0))) },
  driverMs: {
    header: "driver ms (% of run)",
    value: (l) =>
      l.kind === "recorded"
        ? ""
        : `${(l.r.driverTimeUs / 1000).toFixed(1)} (${l.r.traceDurationUs > 0 ? ((100 * l.r.driverTimeUs) / l.r.traceDurationUs).toFixed(2) : "-"}%)`,
  },
  secondHalf: { header: "2nd-half calls", value: (l) => (l.kind === "recorded" ? "" : String(l.r.driverCallsSecondHalf)) },
  speed: { header: "M events/s", value: (l) => (l.kind === "recorded" ? "" : (l.r.eventsPerSecond / 1e6).toFixed(2)) },
  searchReplays: { header: "search replays", value: (l) => (l.kind === "replay" && l.fit ? String(l.fit.searchReplays) : "") },
} satisfies Record<string, Column<Line>>;

const C = COLUMNS;
/** The terminal's table (one per trace: the trace is its heading). */
export const BASE: Column<Line>[] = [C.allocator, C.peakReserved, C.waste, C.fits, C.smallestGpu, C.aboveLimit];
/** --verbose adds these (in further tables below when the terminal is narrow). */
export const VERBOSE: Column<Line>[] = [C.smallestCapacity, C.aboveAllocated, C.headroom, C.peakRequested, C.utilization, C.oom, C.driverCalls, C.driverMs, C.secondHalf, C.speed, C.searchReplays];
/** The report's table: the terminal's columns and the fit's and the limit's in full. */
export const REPORT: Column<Line>[] = [C.allocator, C.peakReserved, C.peakRequested, C.waste, C.utilization, C.fits, C.smallestGpu, C.smallestCapacity, C.aboveLimit, C.aboveAllocated, C.headroom, C.driverCalls];
