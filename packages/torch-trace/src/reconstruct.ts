import { EventKind, EventLog } from "@gmlake/trace";
import type { ReconstructedBlock, Reconstruction, SegmentState } from "./snapshot.js";

const LIST_CAP = 10_000;

/** A treap node: one mapped range [start, end). */
interface RangeNode {
  start: number;
  end: number;
  prio: number;
  left: RangeNode | null;
  right: RangeNode | null;
}

/** Nodes with start < key go left, the rest right. */
function split(t: RangeNode | null, key: number): [RangeNode | null, RangeNode | null] {
  if (t === null) return [null, null];
  if (t.start < key) {
    const [l, r] = split(t.right, key);
    t.right = l;
    return [t, r];
  }
  const [l, r] = split(t.left, key);
  t.left = r;
  return [l, t];
}

/** Joins two treaps where every start of `a` is below every start of `b`. */
function merge(a: RangeNode | null, b: RangeNode | null): RangeNode | null {
  if (a === null) return b;
  if (b === null) return a;
  if (a.prio > b.prio) {
    a.right = merge(a.right, b);
    return a;
  }
  b.left = merge(a, b.left);
  return b;
}

function inOrder(t: RangeNode | null, out: RangeNode[]): void {
  while (t !== null) {
    inOrder(t.left, out);
    out.push(t);
    t = t.right;
  }
}

/**
 * Sorted disjoint [start, end) ranges: the mapped segment bytes of one device. A treap
 * (split / merge by start), so that each add or remove costs O(log n + ranges it touches):
 * a history of 100k segments stays linear-logarithmic, where sorted arrays went quadratic.
 */
class RangeSet {
  private root: RangeNode | null = null;
  // A fixed-seed xorshift: priorities need only be spread, not secret.
  private seed = 0x9e3779b9;

  private node(start: number, end: number): RangeNode {
    let x = this.seed;
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    this.seed = x >>> 0;
    return { start, end, prio: this.seed, left: null, right: null };
  }

  /**
   * Cuts out the ranges that overlap [a, b): returns [below, overlapping (in order), above].
   * Ranges are disjoint, so only the last range starting below `a` can reach into it.
   */
  private cut(a: number, b: number): [RangeNode | null, RangeNode[], RangeNode | null] {
    const [l, rest] = split(this.root, a);
    const [m, r] = split(rest, b);
    const over: RangeNode[] = [];
    let below = l;
    if (l !== null) {
      let last = l;
      while (last.right !== null) last = last.right;
      if (last.end > a) {
        const [l2, lastOnly] = split(l, last.start);
        below = l2;
        if (lastOnly !== null) inOrder(lastOnly, over);
      }
    }
    inOrder(m, over);
    for (const n of over) n.left = n.right = null;
    return [below, over, r];
  }

  add(a: number, b: number): void {
    const [l, over, r] = this.cut(a, b);
    let mid: RangeNode | null = null;
    for (const n of over) if (n.start < a) mid = merge(mid, this.node(n.start, a));
    mid = merge(mid, this.node(a, b));
    for (const n of over) if (n.end > b) mid = merge(mid, this.node(b, n.end));
    this.root = merge(merge(l, mid), r);
  }

  /** Removes [a, b) and returns the parts of it that were not present. */
  remove(a: number, b: number): Array<[number, number]> {
    const [l, over, r] = this.cut(a, b);
    const missing = gapsOf(over, a, b);
    let mid: RangeNode | null = null;
    for (const n of over) {
      if (n.start < a) mid = merge(mid, this.node(n.start, a));
      if (n.end > b) mid = merge(mid, this.node(b, n.end));
    }
    this.root = merge(merge(l, mid), r);
    return missing;
  }

  /** The parts of [a, b) that are not present. */
  gaps(a: number, b: number): Array<[number, number]> {
    const [l, over, r] = this.cut(a, b);
    let mid: RangeNode | null = null;
    for (const n of over) mid = merge(mid, n);
    this.root = merge(merge(l, mid), r);
    return gapsOf(over, a, b);
  }
}

/** The parts of [a, b) that the sorted disjoint ranges `over` leave uncovered. */
function gapsOf(over: readonly RangeNode[], a: number, b: number): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  let cur = a;
  for (const n of over) {
    if (n.start > cur) out.push([cur, Math.min(n.start, b)]);
    cur = Math.max(cur, n.end);
  }
  if (cur < b) out.push([cur, b]);
  return out;
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
