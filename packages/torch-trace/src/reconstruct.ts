import { EventKind, EventLog } from "@gmlake/trace";
import type { ReconstructedBlock, Reconstruction, SegmentState } from "./snapshot.js";

const LIST_CAP = 10_000;

/** Sorted disjoint [start, end) ranges: the mapped segment bytes of one device. */
class RangeSet {
  private starts: number[] = [];
  private ends: number[] = [];

  add(a: number, b: number): void {
    this.remove(a, b);
    let i = 0;
    while (i < this.starts.length && this.starts[i] < a) i++;
    this.starts.splice(i, 0, a);
    this.ends.splice(i, 0, b);
  }

  /** Removes [a, b) and returns the parts of it that were not present. */
  remove(a: number, b: number): Array<[number, number]> {
    const missing: Array<[number, number]> = [];
    let cur = a;
    const ns: number[] = [];
    const ne: number[] = [];
    for (let i = 0; i < this.starts.length; i++) {
      const s = this.starts[i];
      const e = this.ends[i];
      if (e <= a || s >= b) {
        ns.push(s);
        ne.push(e);
        continue;
      }
      if (s > cur) missing.push([cur, Math.min(s, b)]);
      cur = Math.max(cur, e);
      if (s < a) {
        ns.push(s);
        ne.push(a);
      }
      if (e > b) {
        ns.push(b);
        ne.push(e);
      }
    }
    if (cur < b) missing.push([cur, b]);
    this.starts = ns;
    this.ends = ne;
    return missing;
  }

  /** The parts of [a, b) that are not present. */
  gaps(a: number, b: number): Array<[number, number]> {
    const out: Array<[number, number]> = [];
    let cur = a;
    for (let i = 0; i < this.starts.length && cur < b; i++) {
      const s = this.starts[i];
      const e = this.ends[i];
      if (e <= cur) continue;
      if (s >= b) break;
      if (s > cur) out.push([cur, s]);
      cur = Math.max(cur, e);
    }
    if (cur < b) out.push([cur, b]);
    return out;
  }
}

interface Synthetic {
  kind: EventKind;
  addr: number;
  size: number;
  stream: number;
}

export function emptyReconstruction(): Reconstruction {
  return { missingAllocs: 0, liveFromSegments: 0, missingSegments: 0, segmentsFromState: 0, syntheticEvents: 0, blocks: [], segments: [] };
}

/**
 * Restores what a ring buffer that overflowed dropped: a free whose alloc is missing gets an
 * alloc; a segment free/unmap without its segment_alloc/map gets one; blocks and segment
 * bytes that `segments` (dump-time state) shows live but the trace never created get an
 * alloc / segment_alloc / segment_map. The synthetic events go at the head of their device,
 * segments first, so that live and reserved sums never go negative. A complete trace comes
 * back unchanged (the same EventLog object).
 */
export interface Reconstructed {
  log: EventLog;
  report: Reconstruction;
  /** New index of each original event when synthetic events were inserted, else null. */
  newIndex: Int32Array | null;
}

export function reconstruct(log: EventLog, segments: readonly SegmentState[]): Reconstructed {
  if (isComplete(log, segments)) return { log, report: emptyReconstruction(), newIndex: null };
  const report = emptyReconstruction();
  const synth = new Map<number, Synthetic[]>(); // device -> synthetic events (segment ones first)
  const synthSeg = new Map<number, Synthetic[]>();
  const firstTime = new Map<number, number>();
  const liveByDev = new Map<number, Map<number, number>>();
  const segByDev = new Map<number, RangeSet>();
  const push = (m: Map<number, Synthetic[]>, d: number, s: Synthetic): void => {
    let l = m.get(d);
    if (l === undefined) m.set(d, (l = []));
    l.push(s);
  };
  const note = (list: ReconstructedBlock[], b: ReconstructedBlock): void => {
    if (list.length < LIST_CAP) list.push(b);
  };

  const { kind, addr, size, device, stream, timeUs } = log;
  for (let i = 0; i < log.length; i++) {
    const d = device[i];
    let live = liveByDev.get(d);
    if (live === undefined) {
      liveByDev.set(d, (live = new Map()));
      segByDev.set(d, new RangeSet());
      firstTime.set(d, timeUs[i]);
    }
    const k = kind[i];
    const a = addr[i];
    switch (k) {
      case EventKind.alloc:
        live.set(a, size[i]);
        break;
      case EventKind.freeRequested:
      case EventKind.freeCompleted:
        if (!live.has(a)) {
          report.missingAllocs++;
          push(synth, d, { kind: EventKind.alloc, addr: a, size: size[i], stream: stream[i] });
          note(report.blocks, { device: d, addr: a, size: size[i], from: "free" });
          if (k === EventKind.freeRequested) live.set(a, size[i]);
        } else if (k === EventKind.freeCompleted) {
          live.delete(a);
        }
        break;
      case EventKind.segmentAlloc:
      case EventKind.segmentMap:
        (segByDev.get(d) as RangeSet).add(a, a + size[i]);
        break;
      case EventKind.segmentFree:
      case EventKind.segmentUnmap: {
        const missing = (segByDev.get(d) as RangeSet).remove(a, a + size[i]);
        for (const [s, e] of missing) {
          report.missingSegments++;
          push(synthSeg, d, { kind: k === EventKind.segmentFree ? EventKind.segmentAlloc : EventKind.segmentMap, addr: s, size: e - s, stream: stream[i] });
          note(report.segments, { device: d, addr: s, size: e - s, from: "free" });
        }
        break;
      }
    }
  }

  // Dump-time state: what is live there must be live at the end of the trace.
  const streamIds = new Map<number, number>();
  const sid = (raw: number): number => {
    let id = streamIds.get(raw);
    if (id === undefined) {
      id = log.streams.indexOf(raw);
      if (id < 0) id = log.streams.length + streamIds.size; // assigned in order below
      streamIds.set(raw, id);
    }
    return id;
  };
  for (const seg of segments) {
    const d = seg.device;
    let ranges = segByDev.get(d);
    if (ranges === undefined) segByDev.set(d, (ranges = new RangeSet()));
    const gaps = ranges.gaps(seg.address, seg.address + seg.totalSize);
    for (const [s, e] of gaps) {
      report.segmentsFromState += e - s;
      push(synthSeg, d, { kind: seg.isExpandable ? EventKind.segmentMap : EventKind.segmentAlloc, addr: s, size: e - s, stream: sid(seg.stream) });
      note(report.segments, { device: d, addr: s, size: e - s, from: "segments" });
      ranges.add(s, e);
    }
    let live = liveByDev.get(d);
    if (live === undefined) liveByDev.set(d, (live = new Map()));
    for (const b of seg.blocks) {
      if (b.state !== "active_allocated" && b.state !== "active_pending_free") continue;
      if (live.has(b.address)) continue;
      const sz = b.requestedSize > 0 ? b.requestedSize : b.size;
      report.liveFromSegments++;
      push(synth, d, { kind: EventKind.alloc, addr: b.address, size: sz, stream: sid(seg.stream) });
      note(report.blocks, { device: d, addr: b.address, size: sz, from: "segments" });
      live.set(b.address, sz);
    }
  }

  const total = [...synth.values(), ...synthSeg.values()].reduce((n, l) => n + l.length, 0);
  if (total === 0) return { log, report, newIndex: null };
  report.syntheticEvents = total;

  const out = new EventLog(log.length + total);
  for (const raw of log.streams) out.streamId(raw);
  for (const [raw] of [...streamIds].sort((x, y) => x[1] - y[1])) out.streamId(raw);
  const emitHead = (d: number): void => {
    const t = firstTime.get(d) ?? 0;
    for (const s of synthSeg.get(d) ?? []) out.push(s.kind, s.addr, s.size, s.stream, d, t);
    for (const s of synth.get(d) ?? []) out.push(s.kind, s.addr, s.size, s.stream, d, t);
    synthSeg.delete(d);
    synth.delete(d);
  };
  const newIndex = new Int32Array(log.length);
  let cur = -1;
  for (let i = 0; i < log.length; i++) {
    const d = device[i];
    if (d !== cur) {
      emitHead(d);
      cur = d;
    }
    newIndex[i] = out.push(kind[i] as EventKind, addr[i], size[i], stream[i], d, timeUs[i], log.aux[i]);
  }
  const rest = new Set([...synthSeg.keys(), ...synth.keys()]);
  for (const d of [...rest].sort((x, y) => x - y)) emitHead(d);
  return { log: out, report, newIndex };
}

/**
 * A cheap sufficient test that nothing is missing, so that complete traces skip the
 * per-block bookkeeping: per device, allocs - completed frees must equal the blocks live in
 * `segments`, and segment bytes added - removed must equal the bytes of `segments`. Since
 * what a trace shows live at the end is a subset of what was live, equal counts leave no
 * room for a free without its alloc or a live block without one.
 */
function isComplete(log: EventLog, segments: readonly SegmentState[]): boolean {
  const blocks = new Float64Array(256);
  const bytes = new Float64Array(256);
  const { kind, size, device } = log;
  for (let i = 0; i < log.length; i++) {
    switch (kind[i]) {
      case EventKind.alloc:
        blocks[device[i]]++;
        break;
      case EventKind.freeCompleted:
        blocks[device[i]]--;
        break;
      case EventKind.segmentAlloc:
      case EventKind.segmentMap:
        bytes[device[i]] += size[i];
        break;
      case EventKind.segmentFree:
      case EventKind.segmentUnmap:
        bytes[device[i]] -= size[i];
        break;
    }
  }
  for (const s of segments) {
    if (s.device < 0 || s.device > 255) return false;
    bytes[s.device] -= s.totalSize;
    for (const b of s.blocks) if (b.state === "active_allocated" || b.state === "active_pending_free") blocks[s.device]--;
  }
  for (let d = 0; d < 256; d++) if (blocks[d] !== 0 || bytes[d] !== 0) return false;
  return true;
}
