import { EVENT_KIND_NAMES, EventKind } from "./event-kind.js";
import type { EventLog } from "./event-log.js";
import { sampleTimeline } from "./timeline.js";

export interface ChromeTraceOptions {
  /** Most points per counter track and device (default 20,000; min/max kept per bucket). */
  maxCounterPoints?: number;
  /**
   * Block lifetimes (alloc .. free_completed) as complete slices, one track per stream
   * (default false: 1.6 M slices make a large file). Capped at `maxSlices` (default 200,000).
   */
  blocks?: boolean;
  maxSlices?: number;
  /** Label of the run, used in process names. */
  label?: string;
  roundupPower2Divisions?: readonly number[];
}

export interface ChromeTraceEvent {
  name: string;
  ph: "C" | "i" | "X" | "M";
  ts: number;
  pid: number;
  tid?: number;
  dur?: number;
  s?: "p" | "t" | "g";
  cat?: string;
  args?: Record<string, number | string>;
}

export interface ChromeTrace {
  traceEvents: ChromeTraceEvent[];
  displayTimeUnit: "ms";
  /** Timestamps are µs since startUs (the first event) so that they stay small. */
  otherData: { startUs: number; source: string };
}

const INSTANT_KINDS = new Set<number>([
  EventKind.segmentAlloc, EventKind.segmentFree, EventKind.segmentMap, EventKind.segmentUnmap,
  EventKind.snapshot, EventKind.oom, EventKind.emptyCache, EventKind.stitch, EventKind.gc,
]);

/**
 * Chrome trace JSON (opens in Perfetto UI and chrome://tracing): per device a process with
 * two counter tracks, "allocated bytes" and "reserved bytes", instant events for
 * segment decisions, ooms, snapshots, stitches and GCs, and optionally block lifetimes as
 * slices per stream.
 */
export function toChromeTrace(log: EventLog, options: ChromeTraceOptions = {}): ChromeTrace {
  const events: ChromeTraceEvent[] = [];
  const devices = new Set<number>();
  let start = Infinity;
  for (let i = 0; i < log.length; i++) {
    devices.add(log.device[i]);
    if (log.timeUs[i] < start) start = log.timeUs[i];
  }
  if (start === Infinity) start = 0;
  const label = options.label ?? "gmlake";
  for (const d of [...devices].sort((a, b) => a - b)) {
    events.push({ name: "process_name", ph: "M", ts: 0, pid: d, args: { name: `${label} GPU ${d}` } });
    const tl = sampleTimeline(log, { device: d, maxPoints: options.maxCounterPoints ?? 20_000, roundupPower2Divisions: options.roundupPower2Divisions });
    for (const [name, series] of [["allocated bytes", tl.allocated], ["reserved bytes", tl.reserved]] as const) {
      for (let j = 0; j < series.timeUs.length; j++) {
        events.push({ name, ph: "C", ts: series.timeUs[j] - start, pid: d, args: { bytes: series.bytes[j] } });
      }
    }
  }
  for (let i = 0; i < log.length; i++) {
    const k = log.kind[i];
    if (!INSTANT_KINDS.has(k)) continue;
    events.push({
      name: EVENT_KIND_NAMES[k],
      ph: "i",
      s: "p",
      ts: log.timeUs[i] - start,
      pid: log.device[i],
      tid: 0,
      cat: k === EventKind.oom ? "oom" : "segment",
      args: { addr: `0x${log.addr[i].toString(16)}`, size: log.size[i], stream: log.streams[log.stream[i]] ?? 0 },
    });
  }
  if (options.blocks === true) {
    const cap = options.maxSlices ?? 200_000;
    const open = new Map<string, number>();
    let n = 0;
    for (let i = 0; i < log.length && n < cap; i++) {
      const key = `${log.device[i]}:${log.addr[i]}`;
      if (log.kind[i] === EventKind.alloc) open.set(key, i);
      else if (log.kind[i] === EventKind.freeCompleted) {
        const a = open.get(key);
        if (a === undefined) continue;
        open.delete(key);
        events.push({
          name: `block ${log.size[a]} B`, ph: "X", ts: log.timeUs[a] - start, dur: Math.max(0, log.timeUs[i] - log.timeUs[a]),
          pid: log.device[a], tid: 1 + log.stream[a], cat: "block", args: { addr: `0x${log.addr[a].toString(16)}`, size: log.size[a] },
        });
        n++;
      }
    }
  }
  return { traceEvents: events, displayTimeUnit: "ms", otherData: { startUs: start, source: label } };
}
