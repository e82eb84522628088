import type { AllocatorSettings } from "./allocator-settings.js";
import { EVENT_KIND_NAMES, EventKind, TORCH_ACTIONS } from "./event-kind.js";
import type { EventLog } from "./event-log.js";
import { PickleWriter, PyFloat, PyTuple, type PickleValue } from "./pickle-writer.js";
import { LiveEffect, cutRange, liveEffect } from "./live-effect.js";
import { roundSize } from "./round-size.js";
import type { BlockState, SegmentState } from "./segment-state.js";
import type { StackFrame } from "./stack-frame.js";

export interface MemoryVizOptions {
  /** Written as allocator_settings (its `raw` keys when present). */
  allocatorSettings?: AllocatorSettings;
  /** external_annotations entries. */
  annotations?: ReadonlyArray<{ stage: string; name: string; device: number; timeUs: number }>;
  /**
   * The stack of the event at a row of the log (a replay maps its rows to the trace events
   * that caused them): written as the entry's `frames`, and as the frames of the blocks and
   * segments live at the end, so PyTorch's viewer can say which code holds the memory.
   */
  framesOf?: (row: number) => readonly StackFrame[] | undefined;
  /**
   * The stream a recorded stream value stands for, and its private pool (undefined: the
   * value is the stream, default pool). A replay records a private pool's blocks under a
   * key of its own (stitch's poolStreamsOf maps them back), which is no cudaStream_t.
   */
  streamOf?: StreamOf;
}

export type StreamOf = (raw: number) => { stream: number; poolId: readonly [number, number] } | undefined;

export interface MemoryVizExport {
  bytes: Uint8Array;
  /** Events of kinds PyTorch's viewer does not know (our allocator's), by kind name: left out. */
  skipped: Record<string, number>;
}

const ACTION_OF: string[] = [];
for (const [action, kind] of Object.entries(TORCH_ACTIONS)) ACTION_OF[kind] = action;

/**
 * A PyTorch memory snapshot pickle of an EventLog that PyTorch's memory viewer
 * (pytorch.org/memory_viz) and torch-trace's reader open: device_traces from the events,
 * segments from `segmentsState` (dump-time state) or, when not given, derived from the
 * segments and blocks live at the end of the log (the viewer walks the trace backwards
 * from that state, so it must agree with the events).
 */
export function exportMemoryViz(log: EventLog, segmentsState?: readonly SegmentState[], options: MemoryVizOptions = {}): MemoryVizExport {
  const framesOf = options.framesOf;
  const streamOf = options.streamOf;
  const segments = segmentsState ?? deriveSegments(log, framesOf, streamOf);
  // The stream value written per stream index of the log.
  const streamValues = log.streams.map((raw) => streamOf?.(raw)?.stream ?? raw);
  const w = new PickleWriter();
  const skipped: Record<string, number> = {};
  let devices = 0;
  for (let i = 0; i < log.length; i++) if (log.device[i] + 1 > devices) devices = log.device[i] + 1;
  for (const s of segments) if (s.device + 1 > devices) devices = s.device + 1;
  // Rows of each device, in log order.
  const rowsOf: number[][] = Array.from({ length: devices }, () => []);
  for (let i = 0; i < log.length; i++) {
    const k = log.kind[i];
    if (ACTION_OF[k] === undefined) {
      const name = EVENT_KIND_NAMES[k] ?? `kind${k}`;
      skipped[name] = (skipped[name] ?? 0) + 1;
      continue;
    }
    rowsOf[log.device[i]].push(i);
  }
  w.emptyDict().mark();
  w.str("segments");
  w.list(segments.length, (i) => writeSegment(w, segments[i]));
  w.str("device_traces");
  w.list(devices, (d) => {
    const rows = rowsOf[d];
    w.list(rows.length, (j) => {
      const i = rows[j];
      const k = log.kind[i];
      w.emptyDict().mark();
      w.str("action").str(ACTION_OF[k]);
      if (k === EventKind.oom) w.str("device_free").int(log.aux[i]);
      else w.str("addr").int(log.addr[i]);
      w.str("size").int(log.size[i]);
      w.str("stream").int(streamValues[log.stream[i]] ?? 0);
      w.str("time_us").int(log.timeUs[i]);
      w.str("compile_context").str("N/A");
      w.str("user_metadata").str("");
      writeFrames(w, framesOf?.(i));
      w.setItems();
    });
  });
  w.str("allocator_settings");
  w.value(settingsValue(options.allocatorSettings));
  w.str("external_annotations");
  const ann = options.annotations ?? [];
  w.value(ann.map((a) => ({ stage: a.stage, name: a.name, device: a.device, time_us: a.timeUs })));
  w.setItems();
  return { bytes: w.finish(), skipped };
}

function writeFrames(w: PickleWriter, frames: readonly StackFrame[] | undefined): void {
  w.str("frames");
  if (frames === undefined || frames.length === 0) {
    w.emptyList();
    return;
  }
  w.value(frames.map((f) => ({ name: f.name, filename: f.filename, line: f.line })));
}

function writeSegment(w: PickleWriter, s: SegmentState): void {
  w.value({
    device: s.device,
    address: s.address,
    total_size: s.totalSize,
    allocated_size: s.allocatedSize,
    active_size: s.activeSize,
    requested_size: s.requestedSize,
    stream: s.stream,
    segment_type: s.segmentType,
    segment_pool_id: new PyTuple(s.poolId ?? [0, 0]),
    is_expandable: s.isExpandable,
    frames: framesValue(s.frames),
    blocks: s.blocks.map((b) => ({ address: b.address, size: b.size, requested_size: b.requestedSize, state: b.state, frames: framesValue(b.frames) })),
  });
}

function framesValue(frames: readonly StackFrame[] | undefined): PickleValue {
  return (frames ?? []).map((f) => ({ name: f.name, filename: f.filename, line: f.line }));
}

function settingsValue(s: AllocatorSettings | undefined): PickleValue {
  if (s !== undefined && Object.keys(s.raw).length > 0) {
    const raw = { ...s.raw } as Record<string, PickleValue>;
    if (typeof raw.garbage_collection_threshold === "number") raw.garbage_collection_threshold = new PyFloat(raw.garbage_collection_threshold);
    return raw;
  }
  const divisions: Record<string, number> = {};
  for (let i = 0; i < 16; i++) divisions[String(2 ** i)] = s?.roundupPower2Divisions[i] ?? 0;
  return {
    PYTORCH_CUDA_ALLOC_CONF: s?.allocConf ?? "",
    max_split_size: s?.maxSplitSize ?? -1,
    garbage_collection_threshold: new PyFloat(s?.garbageCollectionThreshold ?? 0),
    expandable_segments: s?.expandableSegments ?? false,
    roundup_power2_divisions: divisions,
  };
}

/**
 * Segments and blocks live at the end of the log: each segment (or mapped range) with its
 * live blocks (rounded sizes, active_allocated; active_pending_free between free_requested
 * and free_completed) and inactive gaps between them. Live blocks outside any segment
 * (logs without segment events) get a segment of their own.
 */
export function deriveSegments(log: EventLog, framesOf?: (row: number) => readonly StackFrame[] | undefined, streamOf?: StreamOf): SegmentState[] {
  const segs = new Map<string, { device: number; addr: number; size: number; stream: number; poolId: [number, number]; expandable: boolean; row: number }>();
  const blocks = new Map<string, { device: number; addr: number; size: number; stream: number; poolId: [number, number]; pending: boolean; row: number }>();
  const byIndex = log.streams.map((raw) => {
    const m = streamOf?.(raw);
    return m === undefined ? { stream: raw, poolId: [0, 0] as [number, number] } : { stream: m.stream, poolId: [m.poolId[0], m.poolId[1]] as [number, number] };
  });
  for (let i = 0; i < log.length; i++) {
    const d = log.device[i];
    const key = `${d}:${log.addr[i]}`;
    const { stream: raw, poolId } = byIndex[log.stream[i]] ?? { stream: 0, poolId: [0, 0] as [number, number] };
    switch (liveEffect(log.kind[i])) {
      case LiveEffect.segmentOn:
        segs.set(key, { device: d, addr: log.addr[i], size: log.size[i], stream: raw, poolId, expandable: log.kind[i] === EventKind.segmentMap, row: i });
        break;
      case LiveEffect.segmentOff:
        cutRange(segs, d, log.addr[i], log.size[i]);
        break;
      case LiveEffect.blockOn:
        blocks.set(key, { device: d, addr: log.addr[i], size: log.size[i], stream: raw, poolId, pending: false, row: i });
        break;
      case LiveEffect.blockPending: {
        const b = blocks.get(key);
        if (b !== undefined) b.pending = true;
        break;
      }
      case LiveEffect.blockOff:
        blocks.delete(key);
        break;
    }
  }
  // Adjacent mapped ranges of expandable segments are one range, as PyTorch reports them.
  const ranges = [...segs.values()].sort((a, b) => a.device - b.device || a.addr - b.addr);
  const merged: typeof ranges = [];
  for (const r of ranges) {
    const last = merged[merged.length - 1];
    if (last !== undefined && last.expandable && r.expandable && last.device === r.device && last.addr + last.size === r.addr && last.stream === r.stream && last.poolId[0] === r.poolId[0] && last.poolId[1] === r.poolId[1]) last.size += r.size;
    else merged.push({ ...r });
  }
  const live = [...blocks.values()].sort((a, b) => a.device - b.device || a.addr - b.addr);
  const out: SegmentState[] = [];
  let bi = 0;
  const used = new Set<number>();
  for (const s of merged) {
    const inside: BlockState[] = [];
    let cur = s.addr;
    let allocated = 0, active = 0, requested = 0;
    while (bi < live.length && (live[bi].device < s.device || (live[bi].device === s.device && live[bi].addr < s.addr))) bi++;
    for (let j = bi; j < live.length && live[j].device === s.device && live[j].addr < s.addr + s.size; j++) {
      const b = live[j];
      used.add(j);
      if (b.addr > cur) inside.push({ address: cur, size: b.addr - cur, requestedSize: 0, state: "inactive" });
      const size = Math.min(roundSize(b.size), s.addr + s.size - b.addr);
      inside.push({ address: b.addr, size, requestedSize: b.size, state: b.pending ? "active_pending_free" : "active_allocated", frames: framesOf?.(b.row) });
      if (!b.pending) allocated += size;
      active += size;
      requested += b.size;
      cur = b.addr + size;
    }
    if (cur < s.addr + s.size) inside.push({ address: cur, size: s.addr + s.size - cur, requestedSize: 0, state: "inactive" });
    out.push({
      device: s.device, address: s.addr, totalSize: s.size, allocatedSize: allocated, activeSize: active, requestedSize: requested,
      stream: s.stream, segmentType: s.size <= 2 * 1024 * 1024 && !s.expandable ? "small" : "large", isExpandable: s.expandable, poolId: s.poolId, blocks: inside,
      frames: framesOf?.(s.row),
    });
  }
  live.forEach((b, j) => {
    if (used.has(j)) return;
    const size = roundSize(b.size);
    out.push({
      device: b.device, address: b.addr, totalSize: size, allocatedSize: b.pending ? 0 : size, activeSize: size, requestedSize: b.size,
      stream: b.stream, segmentType: size <= 1024 * 1024 ? "small" : "large", isExpandable: false, poolId: b.poolId,
      blocks: [{ address: b.addr, size, requestedSize: b.size, state: b.pending ? "active_pending_free" : "active_allocated", frames: framesOf?.(b.row) }],
      frames: framesOf?.(b.row),
    });
  });
  return out.sort((a, b) => a.device - b.device || a.address - b.address);
}
