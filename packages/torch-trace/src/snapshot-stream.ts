import { EventKind, EventLog, TORCH_ACTIONS } from "@gmlake/trace";
import { BuiltContainer, describe, RecordSink, VALUE_COST, type PickleBuilder, type PickleVM, type PyValue } from "./pickle-vm.js";
import { SnapshotError } from "./snapshot-error.js";
import type { Frame } from "./snapshot.js";

const ACTION_KINDS = new Map<string, number>(Object.entries(TORCH_ACTIONS));

/** device_traces: a list of per-device lists (only counted, its items become events). */
class DeviceTracesList extends BuiltContainer {
  count = 0;
}

/** device_traces[device]: its entries become EventLog rows as soon as they are appended. */
class TraceList extends BuiltContainer {
  count = 0;
  /** time_us of the last entry (PyTorch records each device's entries in time order). */
  lastTime = -Infinity;
  constructor(
    readonly device: number,
    readonly owner: DeviceTracesList | null,
  ) {
    super();
  }
}

/** Bounds on the names kept for counting (a real trace has a handful of each). */
const MAX_NAMES = 1024;
const MAX_KEYS_PER_ENTRY = 256;
const TWO53 = 2 ** 53;

const S_ACTION = 0, S_ADDR = 1, S_SIZE = 2, S_STREAM = 3, S_TIME = 4, S_DEVICE_FREE = 5, S_FRAMES = 6, S_IGNORED = 7, S_UNKNOWN = 8;
const NUMERIC_NAMES = ["", "addr", "size", "stream", "time_us", "device_free"];
const ENTRY_SLOTS = new Map<string, number>([
  ["action", S_ACTION],
  ["addr", S_ADDR],
  ["size", S_SIZE],
  ["stream", S_STREAM],
  ["time_us", S_TIME],
  ["device_free", S_DEVICE_FREE],
  ["frames", S_FRAMES],
  // Known and recorded on every entry, but not part of the event model.
  ["compile_context", S_IGNORED],
  ["user_metadata", S_IGNORED],
]);

/**
 * An entry dict of a trace list, kept as fields until it is appended, then recycled.
 * Numeric fields are plain doubles (no boxing per value); `has` has bit s set when slot s
 * holds a number, bit s + 8 when it holds something else (kept in `others`).
 */
class EntryBuilder extends RecordSink {
  action: PyValue = undefined;
  frames: PyValue = undefined;
  addr = 0;
  size = 0;
  stream = 0;
  timeUs = 0;
  deviceFree = 0;
  has = 0;
  others: PyValue[] | null = null;
  /** Keys the model does not know, counted when the entry is emitted. */
  unknownKeys: PyValue[] | null = null;
  consumed = false;

  reset(): void {
    this.action = this.frames = undefined;
    this.has = 0;
    this.others = null;
    this.unknownKeys = null;
  }

  slotOf(key: string): number {
    return ENTRY_SLOTS.get(key) ?? S_UNKNOWN;
  }

  setNumber(slot: number, key: PyValue, v: number): void {
    switch (slot) {
      case S_ADDR:
        this.addr = v;
        break;
      case S_SIZE:
        this.size = v;
        break;
      case S_STREAM:
        this.stream = v;
        break;
      case S_TIME:
        this.timeUs = v;
        break;
      case S_DEVICE_FREE:
        this.deviceFree = v;
        break;
      default:
        this.setValue(slot, key, v);
        return;
    }
    this.has = (this.has | (1 << slot)) & ~(1 << (slot + 8));
  }

  setValue(slot: number, key: PyValue, v: PyValue): void {
    switch (slot) {
      case S_ACTION:
        this.action = v;
        return;
      case S_FRAMES:
        this.frames = v;
        return;
      case S_IGNORED:
        return;
      case S_UNKNOWN: {
        // A repeated key is one key (Python's dict keeps the last value).
        const u = (this.unknownKeys ??= []);
        if (u.length < MAX_KEYS_PER_ENTRY && !u.includes(key)) u.push(key);
        return;
      }
    }
    if (typeof v === "number") {
      this.setNumber(slot, key, v);
      return;
    }
    (this.others ??= [])[slot] = v;
    this.has = (this.has | (1 << (slot + 8))) & ~(1 << slot);
  }
}

/** What the memo holds for a trace entry (its fields go straight into the EventLog). */
const ENTRY_IN_MEMO = Object.freeze({ traceEntryInMemo: true });

/**
 * The schema-aware half of the reader: recognises `device_traces` while the pickle is being
 * read and turns each trace entry into an EventLog row the moment it is appended to its
 * device list, so that 1.6 M entry dicts never exist at once. Everything else (segments,
 * settings, annotations: small) is built as generic values.
 */
export class SnapshotStream implements PickleBuilder {
  readonly log: EventLog;
  readonly unknownActions = new Map<string, number>();
  readonly extraEntryKeys = new Map<string, number>();
  readonly frames: (Frame[] | undefined)[] | undefined;
  inexactIntegers = 0;
  private root: Map<string, PyValue> | null = null;
  private vm!: PickleVM;
  private readonly pool: EntryBuilder[] = [];
  private lastAction: PyValue = undefined;
  private lastKind = -1;
  private lastStreamRaw = 0;
  private lastStreamId = -1;
  /** Every device_traces list made; when a dict key repeats, only the last one counts. */
  private readonly traceLists: DeviceTracesList[] = [];
  /** Runs of rows by owner [owner index, first row], kept only while there is more than one owner. */
  private readonly ownerRuns: number[] = [];
  private curOwner: DeviceTracesList | null = null;

  constructor(
    private readonly source: string,
    keepFrames: boolean,
    /** Pickle size in bytes: real snapshots take ~72 bytes per entry, so this sizes the log once. */
    private readonly pickleBytes = 0,
  ) {
    // At most 1 M rows at first: growLog then projects the whole from the rate so far.
    this.log = new EventLog(Math.min(1 << 20, Math.max(1 << 6, Math.ceil(pickleBytes / 64))));
    this.frames = keepFrames ? [] : undefined;
  }

  attach(vm: PickleVM): void {
    this.vm = vm;
  }

  newDict(vm: PickleVM): object | undefined {
    const st = vm.stack;
    const n = vm.sp;
    if (this.root === null) {
      if (n === 0) {
        this.root = new Map();
        return this.root;
      }
      return undefined;
    }
    const m = vm.currentMark();
    const top = n > 0 ? st[n - 1] : undefined;
    if (top instanceof TraceList || (m > 0 && st[m - 1] instanceof TraceList && (n === m || top instanceof EntryBuilder))) {
      const e = this.pool.pop() ?? new EntryBuilder();
      e.consumed = false;
      return e;
    }
    return undefined;
  }

  newList(vm: PickleVM): object | undefined {
    const st = vm.stack;
    const n = vm.sp;
    if (n === 0) return undefined;
    const m = vm.currentMark();
    const top = st[n - 1];
    if (top === "device_traces" && this.root !== null) {
      if ((n >= 2 && st[n - 2] === this.root) || (m > 0 && st[m - 1] === this.root && ((n - m) & 1) === 1)) {
        const l = new DeviceTracesList();
        this.traceLists.push(l);
        return l;
      }
    }
    if (m > 0 && st[m - 1] instanceof DeviceTracesList) {
      const owner = st[m - 1] as DeviceTracesList;
      return this.newTraceList(owner.count + (n - m), owner);
    }
    if (top instanceof DeviceTracesList) return this.newTraceList(top.count, top);
    return undefined;
  }

  private newTraceList(device: number, owner: DeviceTracesList | null): TraceList {
    if (device > 255) this.vm.fail("BAD_SHAPE", `device_traces has more than 256 devices`);
    return new TraceList(device, owner);
  }

  memoized(target: object, _idx: number): PyValue {
    // The memo keeps a marker, not the entry: entries are recycled once converted, and a
    // real snapshot never refers back to one (a pickle that does gets a BAD_SHAPE error).
    if (target instanceof EntryBuilder) return ENTRY_IN_MEMO;
    return target;
  }

  setItems(target: object, stack: PyValue[], from: number, to: number): void {
    if (!(target instanceof EntryBuilder)) {
      this.vm.fail("BAD_PICKLE", `${describe(target)} is not a dict`);
    }
    for (let i = from; i < to; i += 2) {
      const k = stack[i];
      target.setValue(typeof k === "string" ? target.slotOf(k) : S_UNKNOWN, k, stack[i + 1]);
    }
  }

  countExtraKey(k: PyValue): void {
    countName(this.extraEntryKeys, typeof k === "string" ? k : String(k));
  }

  appendItems(target: object, stack: PyValue[], from: number, to: number): void {
    if (target instanceof TraceList) {
      for (let i = from; i < to; i++) {
        const item = stack[i];
        if (item instanceof EntryBuilder) {
          if (item.consumed) this.vm.fail("BAD_SHAPE", `device_traces[${target.device}][${target.count}] is an entry appended twice`);
          this.emit(item, target);
          item.reset();
          item.consumed = true; // a stale reference (DUP) appended again is an error
          if (this.pool.length < 4096) this.pool.push(item);
        } else if (item instanceof Map) {
          this.emitMap(item, target);
        } else {
          this.badEntry(target, item);
        }
        target.count++;
      }
    } else if (target instanceof DeviceTracesList) {
      for (let i = from; i < to; i++) {
        const item = stack[i];
        if (item instanceof TraceList) {
          if (item.device !== target.count) this.vm.fail("BAD_SHAPE", `device_traces list for device ${item.device} appended at position ${target.count}`);
        } else if (Array.isArray(item)) {
          // A device list built another way (LIST opcode): convert it now.
          const tl = this.newTraceList(target.count, target);
          for (const e of item) {
            if (e instanceof Map) this.emitMap(e, tl);
            else this.badEntry(tl, e);
            tl.count++;
          }
        } else {
          this.vm.fail("BAD_SHAPE", `device_traces[${target.count}] is ${describe(item)}, expected a list`);
        }
        target.count++;
      }
    } else {
      this.vm.fail("BAD_PICKLE", `APPENDS on ${describe(target)}, not a list`);
    }
  }

  private badEntry(tl: TraceList, item: PyValue): never {
    if (item === ENTRY_IN_MEMO) this.vm.fail("BAD_SHAPE", `device_traces[${tl.device}][${tl.count}] refers back to a trace entry (memo reuse)`);
    return this.vm.fail("BAD_SHAPE", `device_traces[${tl.device}][${tl.count}] is ${describe(item)}, expected a dict`);
  }

  private emitMap(e: Map<string, PyValue>, tl: TraceList): void {
    const b = this.pool.pop() ?? new EntryBuilder();
    b.reset();
    for (const [k, v] of e) b.setValue(b.slotOf(k), k, v);
    this.emit(b, tl);
    b.reset();
    this.pool.push(b);
  }

  /** Slot value as a number: a bigint is flagged as inexact, anything else is an error. */
  private num(e: EntryBuilder, slot: number, v: number, tl: TraceList, required: boolean): number {
    if ((e.has & (1 << slot)) !== 0) return v;
    if ((e.has & (1 << (slot + 8))) === 0) {
      if (!required) return 0;
      return this.vm.fail("BAD_SHAPE", `device_traces[${tl.device}][${tl.count}].${NUMERIC_NAMES[slot]} is missing`);
    }
    const o = (e.others as PyValue[])[slot];
    if (typeof o === "bigint") {
      this.inexactIntegers++;
      return Number(o);
    }
    if (typeof o === "boolean") return o ? 1 : 0;
    if (o === null && !required) return 0;
    return this.vm.fail("BAD_SHAPE", `device_traces[${tl.device}][${tl.count}].${NUMERIC_NAMES[slot]} is ${describe(o)}, not an int`);
  }

  private emit(e: EntryBuilder, tl: TraceList): void {
    if (e.unknownKeys !== null) for (const k of e.unknownKeys) this.countExtraKey(k);
    const action = e.action;
    let kind: number;
    if (action === this.lastAction) {
      kind = this.lastKind;
    } else {
      if (typeof action !== "string") {
        const name = action === undefined ? "<missing>" : `<${describe(action)}>`;
        countName(this.unknownActions, name);
        return;
      }
      kind = ACTION_KINDS.get(action) ?? -1;
      this.lastAction = action;
      this.lastKind = kind;
    }
    if (kind < 0) {
      const name = action as string;
      countName(this.unknownActions, name);
      return;
    }
    const isOom = kind === EventKind.oom;
    // The common case inline: the field is there as a plain number (num() for the rest).
    const has = e.has;
    const a = (has & (1 << S_ADDR)) !== 0 ? e.addr : this.num(e, S_ADDR, e.addr, tl, !isOom && kind !== EventKind.snapshot);
    const sz = (has & (1 << S_SIZE)) !== 0 ? e.size : this.num(e, S_SIZE, e.size, tl, true);
    const rawStream = (has & (1 << S_STREAM)) !== 0 ? e.stream : this.num(e, S_STREAM, e.stream, tl, false);
    let sid: number;
    if (rawStream === this.lastStreamRaw && this.lastStreamId >= 0) {
      sid = this.lastStreamId;
    } else {
      const known = this.log.streams.length;
      sid = this.log.streamId(rawStream);
      if (this.log.streams.length !== known) this.vm.countValues(VALUE_COST.stream);
      this.lastStreamRaw = rawStream;
      this.lastStreamId = sid;
    }
    const t = (has & (1 << S_TIME)) !== 0 ? e.timeUs : this.num(e, S_TIME, e.timeUs, tl, false);
    const aux = isOom ? this.num(e, S_DEVICE_FREE, e.deviceFree, tl, false) : 0;
    // Values PyTorch cannot record (c10 keeps them as size_t / uintptr_t / int64 µs): one
    // test on the common path, the exact reason only on failure. NaN fails every compare.
    if (!(sz >= 0 && sz < TWO53 && Math.floor(sz) === sz && a >= 0 && a < TWO53 && Math.floor(a) === a && rawStream >= 0 && rawStream < TWO53 && Math.floor(rawStream) === rawStream && (t >= tl.lastTime || t === 0) && Math.floor(t) === t && aux >= 0 && aux < TWO53 && Math.floor(aux) === aux)) {
      this.badValues(tl, sz, a, rawStream, t, aux);
    }
    if (t !== 0) tl.lastTime = t; // 0: no time recorded (older torch, or an exporter's placeholder), not ordered
    if (tl.owner !== this.curOwner) this.ownerChange(tl.owner);
    if (this.log.length === this.log.kind.length) this.growLog();
    const row = this.log.push(kind as EventKind, a, sz, sid, tl.device, t, aux);
    if (this.frames !== undefined && e.frames !== undefined) this.frames[row] = toFrames(e.frames);
  }

  /**
   * The log is full: room for the rows the rest of the pickle will hold at the rate so far
   * (and 5% more), not twice the rows (a 10 M-event file would hold 16 M rows, 230 MB idle).
   */
  private growLog(): void {
    const n = this.log.length;
    const at = this.vm.base + this.vm.opPos;
    const projected = at > 0 && this.pickleBytes > at ? Math.ceil(n * (this.pickleBytes / at) * 1.05) : 0;
    this.log.reserve(Math.max(n + 1024, Math.min(projected, 16 * n)));
  }

  private badValues(tl: TraceList, sz: number, a: number, rawStream: number, t: number, aux: number): never {
    const bad = (field: string, v: number, what: string): never =>
      this.vm.fail("BAD_VALUE", `device_traces[${tl.device}][${tl.count}].${field} is ${v}: ${what}`);
    const int = (v: number, max: number): boolean => v >= 0 && v < max && Math.floor(v) === v;
    if (!int(sz, TWO53)) bad("size", sz, "a byte count must be an integer in [0, 2^53)");
    // Real addresses and stream pointers are below 2^48; above 2^53 a double would merge
    // distinct values (two blocks, two streams) into one.
    if (!int(a, TWO53)) bad("addr", a, "an address must be an integer in [0, 2^53)");
    if (!int(rawStream, TWO53)) bad("stream", rawStream, "a cudaStream_t must be an integer in [0, 2^53)");
    if (!(Math.floor(t) === t)) bad("time_us", t, "a time must be an integer number of microseconds");
    if (!(t >= tl.lastTime) && t !== 0) bad("time_us", t, `earlier than the entry before it (${tl.lastTime}); PyTorch records a device's entries in time order`);
    return bad("device_free", aux, "a byte count must be an integer in [0, 2^53)");
  }

  private ownerChange(owner: DeviceTracesList | null): void {
    this.curOwner = owner;
    this.ownerRuns.push(owner === null ? -1 : this.traceLists.indexOf(owner), this.log.length);
  }

  /**
   * When the root dict got `device_traces` more than once (Python keeps the last value),
   * drops the rows of the lists it replaced. Returns the kept row indices, or null when all stay.
   */
  keepLastDeviceTraces(root: Map<string, PyValue>): Int32Array | null {
    const final = root.get("device_traces");
    if (this.traceLists.length === 0 || (this.traceLists.length === 1 && final === this.traceLists[0])) return null;
    // -1: rows of lists built generically (finishDeviceTraces), when the last value is one.
    const keepOwner = final instanceof DeviceTracesList ? this.traceLists.indexOf(final) : -1;
    const runs = this.ownerRuns;
    const keep: number[] = [];
    for (let r = 0; r < runs.length; r += 2) {
      if (runs[r] !== keepOwner) continue;
      const end = r + 3 < runs.length ? runs[r + 3] : this.log.length;
      for (let i = runs[r + 1]; i < end; i++) keep.push(i);
    }
    if (keep.length === this.log.length) return null;
    return Int32Array.from(keep);
  }

  /** The root dict, or a SnapshotError when the pickle holds something else. */
  rootOf(value: PyValue): Map<string, PyValue> {
    if (!(value instanceof Map)) {
      throw new SnapshotError("BAD_SHAPE", this.source, `top level is ${describe(value)}, expected a dict {segments, device_traces, allocator_settings, ...}`);
    }
    return value;
  }

  /** device_traces as read: counted by the stream, or generic lists still to convert. */
  finishDeviceTraces(root: Map<string, PyValue>): void {
    const dt = root.get("device_traces");
    if (dt === undefined || dt instanceof DeviceTracesList) return;
    if (!Array.isArray(dt)) {
      throw new SnapshotError("BAD_SHAPE", this.source, `device_traces is ${describe(dt)}, expected a list`);
    }
    // Built without the streaming path (e.g. a pickle that used LIST/DICT opcodes).
    const holder = new DeviceTracesList();
    for (let d = 0; d < dt.length; d++) {
      const list = dt[d];
      if (!Array.isArray(list)) throw new SnapshotError("BAD_SHAPE", this.source, `device_traces[${d}] is ${describe(list)}, expected a list`);
      if (d > 255) throw new SnapshotError("BAD_SHAPE", this.source, "device_traces has more than 256 devices");
      const tl = new TraceList(d, null);
      for (const e of list) {
        if (e instanceof Map) this.emitMap(e, tl);
        else this.badEntry(tl, e);
        tl.count++;
      }
      holder.count++;
    }
  }
}

/** Counts a name, folding names past the first MAX_NAMES into "<other>" (the map stays small). */
function countName(m: Map<string, number>, name: string): void {
  const n = m.get(name);
  if (n !== undefined) m.set(name, n + 1);
  else if (m.size < MAX_NAMES) m.set(name, 1);
  else m.set("<other>", (m.get("<other>") ?? 0) + 1);
}

function toFrames(v: PyValue): Frame[] | undefined {
  if (!Array.isArray(v)) return undefined;
  const out: Frame[] = [];
  for (const f of v) {
    if (!(f instanceof Map)) continue;
    const name = f.get("name");
    const filename = f.get("filename");
    const line = f.get("line");
    out.push({
      name: typeof name === "string" ? name : "",
      filename: typeof filename === "string" ? filename : "",
      line: typeof line === "number" ? line : 0,
    });
  }
  return out;
}
