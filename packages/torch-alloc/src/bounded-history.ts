/**
 * The engine's recorded history kept to its last `maxEntries` events, as PyTorch's
 * `_record_memory_history(max_entries=...)` keeps its trace ring: the oldest are dropped.
 * A snapshot still has to say what is live now (its `segments`: the viewer walks the
 * trace backwards from them), so what a dropped event still means is kept: the
 * segment_alloc / segment_map of each segment not freed or unmapped since, the alloc (and
 * free_requested) of each block not free_completed since. Those rows (the "base", as many
 * as there are live segments and blocks) plus the kept window give the same segments as
 * the whole history would (deriveSegments); the snapshot's trace is the window.
 *
 * The log is compacted when it reaches maxEntries + maxEntries / 2 (at least 1024 more):
 * each event is folded into the base once, when it drops out, so the cost per recorded
 * event stays constant and the memory at most 1.5x the bound.
 */
import { EventLog, LiveEffect, cutRange, deriveSegments, liveEffect, type EventKind, type SegmentState, type StreamOf } from "@gmlake/trace";

/** The default bound on recorded events (about 38 bytes each, up to 1.5x this before a compaction). */
export const DEFAULT_RECORD_MAX_ENTRIES = 1_000_000;

export class BoundedHistory {
  /** Live-state rows of the dropped events, in their order (device, stream indices as in the log). */
  private base = new EventLog(64);
  /** Events dropped so far. */
  dropped = 0;
  private readonly trigger: number;

  /** The bound a setting asks for (undefined: the default); a RangeError for anything but a non-negative integer. */
  static resolve(maxEntries: number | undefined): number {
    if (maxEntries === undefined) return DEFAULT_RECORD_MAX_ENTRIES;
    if (!Number.isSafeInteger(maxEntries) || maxEntries < 0) {
      throw new RangeError(`recordMaxEntries: expected a non-negative integer (0 = no bound), got ${String(maxEntries)}`);
    }
    return maxEntries;
  }

  /** maxEntries 0: no bound (nothing is ever dropped). */
  constructor(
    private readonly log: EventLog,
    readonly maxEntries: number,
  ) {
    BoundedHistory.resolve(maxEntries);
    this.trigger = maxEntries === 0 ? Infinity : maxEntries + Math.max(1024, maxEntries >> 1);
  }

  /** After each engine call: compacts once the log has grown past the trigger. */
  afterCall(): void {
    if (this.log.length >= this.trigger) this.compact();
  }

  /** Drops all but the last maxEntries events, folding them into the base. */
  compact(): void {
    const log = this.log;
    const drop = this.maxEntries === 0 ? 0 : log.length - this.maxEntries;
    if (drop <= 0) return;
    this.base = fold(this.base, log, drop);
    for (const a of [log.kind, log.addr, log.size, log.stream, log.device, log.timeUs, log.aux]) a.copyWithin(0, drop, log.length);
    log.length -= drop;
    this.dropped += drop;
  }

  /** The segments live at the end of the log, as the whole history says (call compact() first for a snapshot). */
  segments(streamOf?: StreamOf): SegmentState[] {
    if (this.dropped === 0) return deriveSegments(this.log, undefined, streamOf);
    const all = new EventLog(this.base.length + this.log.length);
    for (const raw of this.log.streams) all.streamId(raw); // the same stream indices as the log's
    copyRows(this.base, 0, this.base.length, all);
    copyRows(this.log, 0, this.log.length, all);
    return deriveSegments(all, undefined, streamOf);
  }
}

function copyRows(from: EventLog, start: number, end: number, to: EventLog): void {
  for (let i = start; i < end; i++) to.push(from.kind[i]! as EventKind, from.addr[i]!, from.size[i]!, from.stream[i]!, from.device[i]!, from.timeUs[i]!, from.aux[i]!);
}

/** The rows of base + log[0, drop) whose effect on the live state is not undone within them, in order. */
function fold(base: EventLog, log: EventLog, drop: number): EventLog {
  // row numbers: base rows first (0 .. base.length-1), then the dropped log rows. A segment's
  // entry keeps the part of its row's range still live: an unmap may take part of a mapped run,
  // and what is left is written as that row with the range narrowed.
  const segs = new Map<string, { row: number; device: number; addr: number; size: number }>();
  const blocks = new Map<string, number>();
  const pending = new Map<string, number>();
  const visit = (from: EventLog, i: number, row: number): void => {
    const effect = liveEffect(from.kind[i]!);
    if (effect === LiveEffect.none) return;
    const device = from.device[i]!, addr = from.addr[i]!, size = from.size[i]!;
    const key = `${device}:${addr}`;
    if (effect === LiveEffect.segmentOn) segs.set(key, { row, device, addr, size });
    else if (effect === LiveEffect.segmentOff) cutRange(segs, device, addr, size);
    else if (effect === LiveEffect.blockPending) {
      if (blocks.has(key)) pending.set(key, row);
    } else {
      pending.delete(key);
      if (effect === LiveEffect.blockOn) blocks.set(key, row);
      else blocks.delete(key);
    }
  };
  for (let i = 0; i < base.length; i++) visit(base, i, i);
  for (let i = 0; i < drop; i++) visit(log, i, base.length + i);
  const keep: { row: number; addr?: number; size?: number }[] = [...segs.values(), ...[...blocks.values(), ...pending.values()].map((row) => ({ row }))];
  keep.sort((a, b) => a.row - b.row || (a.addr ?? 0) - (b.addr ?? 0));
  const out = new EventLog(Math.max(64, keep.length));
  for (const k of keep) {
    const [from, i] = k.row < base.length ? [base, k.row] : [log, k.row - base.length];
    out.push(from.kind[i]! as EventKind, k.addr ?? from.addr[i]!, k.size ?? from.size[i]!, from.stream[i]!, from.device[i]!, from.timeUs[i]!, from.aux[i]!);
  }
  return out;
}
