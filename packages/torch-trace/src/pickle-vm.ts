import { SnapshotError, type SnapshotErrorCode } from "./snapshot-error.js";
import { opcodeName } from "./pickle-opcodes.js";
import { limitHint, readLimits, type ReadLimitName, type ReadLimits } from "./read-limits.js";

/**
 * Python values as the VM yields them: dict -> Map, list/tuple/set -> array, str -> string,
 * int -> number (or bigint when a double cannot hold it exactly), float -> number,
 * bool -> boolean, None -> null, bytes -> Uint8Array.
 */
export type PyValue = unknown;

/** Base of the containers a PickleBuilder makes: the VM hands their SETITEMS/APPENDS to it. */
export abstract class BuiltContainer {}

/**
 * A dict whose items the VM writes straight into fields, without the value stack or boxed
 * numbers, when they are all plain scalars (the shape of every trace entry). Otherwise the
 * VM backs out (reset) and reads the dict generically, through PickleBuilder.setItems.
 */
export abstract class RecordSink extends BuiltContainer {
  /** The slot of a key (the VM caches it per key position). */
  abstract slotOf(key: string): number;
  abstract setNumber(slot: number, key: PyValue, v: number): void;
  abstract setValue(slot: number, key: PyValue, v: PyValue): void;
  /** Forgets every field set (the fast path backs out to the generic one). */
  abstract reset(): void;
}

/**
 * Lets a schema-aware caller replace containers while the pickle is being read, so that a
 * large list of records never exists as JS objects (see snapshot-stream.ts). Containers
 * that a builder returns are opaque to the VM: it hands their SETITEMS/APPENDS to the
 * builder.
 */
export interface PickleBuilder {
  /** EMPTY_DICT: a special dict, or undefined for a generic Map. */
  newDict(vm: PickleVM): BuiltContainer | undefined;
  /** EMPTY_LIST: a special list, or undefined for a generic array. */
  newList(vm: PickleVM): BuiltContainer | undefined;
  /** SETITEM(S) on a special dict: key/value pairs are stack[from..to). */
  setItems(target: object, stack: PyValue[], from: number, to: number): void;
  /** APPEND(S) on a special list: items are stack[from..to). */
  appendItems(target: object, stack: PyValue[], from: number, to: number): void;
  /** A special container is being memoized at index `idx`: returns what the memo keeps. */
  memoized(target: object, idx: number): PyValue;
}

const TWO32 = 4294967296;

/**
 * The memo as value ids in a typed array (0 = no entry): a real snapshot memoizes two
 * things per trace entry (the entry dict and a fresh 'N/A'), 20 M slots for 10 M events,
 * which as a JS array cost 8 bytes each and a scan at every major GC. Equal strings and
 * the same objects share an id; the last two values are cached (the entries alternate).
 */
class Memo {
  length = 0;
  private ids = new Int32Array(1024);
  private readonly vals: PyValue[] = [undefined];
  private readonly idOf = new Map<PyValue, number>();
  private k0: PyValue = undefined;
  private i0 = 0;
  private k1: PyValue = undefined;
  private i1 = 0;
  /** Which cached value is the older: k1 (true) or k0. */
  private older = false;

  get(idx: number): PyValue {
    return idx >= 0 && idx < this.length ? this.vals[this.ids[idx]] : undefined;
  }

  set(idx: number, v: PyValue): void {
    if (idx >= this.ids.length) {
      const b = new Int32Array(Math.max(idx + 1, this.ids.length * 2));
      b.set(this.ids);
      this.ids = b;
    }
    if (idx >= this.length) this.length = idx + 1;
    let id: number;
    if (v === this.k0 && this.i0 !== 0) id = this.i0;
    else if (v === this.k1 && this.i1 !== 0) id = this.i1;
    else {
      const dedup = !(typeof v === "number" && Object.is(v, -0));
      id = (dedup ? this.idOf.get(v) : undefined) ?? this.vals.push(v) - 1;
      if (dedup) this.idOf.set(v, id);
      // The older of the two cached values makes room.
      if (this.older) {
        this.k1 = v;
        this.i1 = id;
      } else {
        this.k0 = v;
        this.i0 = id;
      }
      this.older = !this.older;
    }
    this.ids[idx] = id;
  }

  /** Back to `len` entries (the ones above read as missing again). */
  truncate(len: number): void {
    if (len < this.length) this.ids.fill(0, len, this.length);
    this.length = len;
  }
}

/** Bytes kept ahead in the window (more than any opcode but a long payload needs). */
const WINDOW_MARGIN = 1 << 16;

/**
 * What a built value costs on V8's heap, in bytes (measured on Node 20: an empty Map
 * takes ~184, an array ~32, a slot 8): maxValueBytes bounds their sum, so that a file of
 * millions of empty dicts stops long before the heap does.
 */
export const VALUE_COST = Object.freeze({ dict: 192, list: 40, dictItem: 24, listItem: 8, stream: 64 });

/**
 * A pickle virtual machine for plain data (protocols 0-5 minus object construction),
 * written for speed over one Uint8Array: no per-op allocation beyond the values made.
 * Object-construction opcodes (GLOBAL, REDUCE, BUILD, ...) are refused: a memory snapshot
 * holds only plain data and refusing them keeps the reader free of code execution.
 */
export class PickleVM {
  /** The value stack; only stack[0..sp) is live (slots above are stale). */
  readonly stack: PyValue[] = [];
  /** Stack depth, valid whenever a builder hook runs. */
  sp = 0;
  /** Stack depths at each MARK (the metastack): marks[0..mp). */
  private marks = new Int32Array(64);
  private mp = 0;
  private readonly memo = new Memo();
  /** Offset in the window (buf) of the opcode being executed; base + opPos is the pickle's. */
  opPos = 0;
  /** Offset in the pickle of buf[0]: the input comes in windows (see `more`). */
  base = 0;
  protocol = 0;
  /** Byte offset just after STOP. */
  endPos = 0;
  private dv: DataView;
  private readonly strCache: (string | undefined)[] = new Array(17);
  private readonly strCachePos = new Int32Array(17).fill(-1);
  private readonly td = new TextDecoder("utf-8", { fatal: false });

  private buf: Uint8Array;
  /** No more input after buf (else `more` gives the next bytes). */
  private eof: boolean;
  readonly limits: ReadLimits;
  // Copies of the limits and the running counts they bound (see read-limits.ts).
  private readonly maxStack: number;
  private readonly maxMemo: number;
  private readonly maxValueBytes: number;
  private readonly maxDecoded: number;
  private readonly maxIntBytes: number;
  /** Estimated heap bytes of the containers made and the items stored in them (trace entries excluded). */
  valueBytes = 0;
  /** Bytes of str / bytes / int payloads decoded. */
  decoded = 0;

  /**
   * `bytes` is the whole pickle, or with `more` its first bytes: `more()` gives the next
   * ones (null at the end), so that a large file is read through a window of a few MiB
   * instead of being held whole (`pickleBytes`, its size or an estimate, sets the limits).
   */
  constructor(
    bytes: Uint8Array,
    private readonly source: string,
    private readonly builder?: PickleBuilder,
    limits?: Partial<ReadLimits>,
    private readonly more?: () => Uint8Array | null,
    pickleBytes = bytes.length,
  ) {
    // A plain Uint8Array view (not a Buffer subclass) keeps element loads monomorphic.
    this.buf = new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.eof = more === undefined;
    this.limits = readLimits(pickleBytes, limits);
    this.maxStack = this.limits.maxStackDepth;
    this.maxMemo = this.limits.maxMemoEntries;
    this.maxValueBytes = this.limits.maxValueBytes;
    this.maxDecoded = this.limits.maxDecodedBytes;
    this.maxIntBytes = this.limits.maxIntBytes;
  }

  /** Throws LIMIT for limit `name` (value `limit`), naming what hit it. */
  overLimit(name: ReadLimitName, what: string): never {
    return this.fail("LIMIT", `${what} exceeds the reader's limit ${name}=${this.limits[name]} (${limitHint(name)})`);
  }

  /** Counts n estimated heap bytes of built values against maxValueBytes (see VALUE_COST). */
  countValues(n: number): void {
    if ((this.valueBytes += n) > this.maxValueBytes) this.overLimit("maxValueBytes", "the memory of the dicts, lists and items built");
  }

  private countDecoded(n: number): void {
    if ((this.decoded += n) > this.maxDecoded) this.overLimit("maxDecodedBytes", "the decoded strings, bytes and integers");
  }

  /** The stack depth at the innermost MARK, or -1 when there is none. */
  currentMark(): number {
    return this.mp === 0 ? -1 : this.marks[this.mp - 1];
  }

  fail(code: SnapshotErrorCode, detail: string, at = this.opPos): never {
    throw new SnapshotError(code, this.source, detail, this.base + at);
  }

  /**
   * Moves the window to start at `pos` and fills it until `need` bytes follow (or the input
   * ends); returns pos's offset in the new window (0). The caller reloads buf, dv and len.
   */
  private refill(pos: number, need: number): number {
    const old = this.buf;
    // From the opcode on (its byte names it in messages), or from pos.
    const from = this.opPos >= 0 && this.opPos < pos ? this.opPos : pos;
    const parts: Uint8Array[] = [old.subarray(from)];
    let have = old.length - from;
    need += pos - from;
    while (have < need && !this.eof) {
      const c = this.more!();
      if (c === null) this.eof = true;
      else if (c.length > 0) {
        parts.push(c);
        have += c.length;
      }
    }
    const b = new Uint8Array(have);
    let o = 0;
    for (const p of parts) {
      b.set(p, o);
      o += p.length;
    }
    this.buf = b;
    this.dv = new DataView(b.buffer);
    this.base += from;
    this.opPos -= from;
    // The short-string cache points into the window.
    for (let i = 0; i < this.strCachePos.length; i++) this.strCachePos[i] = this.strCachePos[i] >= from ? this.strCachePos[i] - from : -1;
    return pos - from;
  }

  private truncated(pos: number, n: number): never {
    const left = Math.max(0, this.buf.length - pos);
    return this.fail("TRUNCATED", `truncated pickle: ${opcodeName(this.buf[this.opPos])} needs ${n} bytes, ${left} left`);
  }

  private underflow(): never {
    return this.fail("BAD_PICKLE", `stack underflow at ${opcodeName(this.buf[this.opPos])}`);
  }

  private noMark(): never {
    return this.fail("BAD_PICKLE", `${opcodeName(this.buf[this.opPos])} without a MARK`);
  }

  /** UTF-8 string at [p, p+n); short strings are cached by content (keys, 'N/A', ...). */
  private str(p: number, n: number): string {
    const b = this.buf;
    if (n <= 16) {
      const cp = this.strCachePos[n];
      if (cp >= 0) {
        let i = 0;
        while (i < n && b[cp + i] === b[p + i]) i++;
        if (i === n) return this.strCache[n] as string;
      }
      let ascii = true;
      for (let i = 0; i < n; i++) {
        if (b[p + i] >= 0x80) {
          ascii = false;
          break;
        }
      }
      // fromCharCode.apply gives a flat string (cheap to hash as a Map key), unlike +=.
      const s = ascii ? String.fromCharCode.apply(null, b.subarray(p, p + n) as unknown as number[]) : this.td.decode(b.subarray(p, p + n));
      this.strCache[n] = s;
      this.strCachePos[n] = p;
      this.decoded += n;
      return s;
    }
    this.countDecoded(n);
    return this.td.decode(b.subarray(p, p + n));
  }

  private latin1(p: number, n: number): string {
    this.countDecoded(n);
    let s = "";
    for (let i = 0; i < n; i += 4096) s += String.fromCharCode.apply(null, this.buf.subarray(p + i, p + Math.min(n, i + 4096)) as unknown as number[]);
    return s;
  }

  /** Little-endian two's-complement integer of n bytes (LONG1/LONG4). */
  private long(p: number, n: number): number | bigint {
    const b = this.buf;
    if (n === 0) return 0;
    if (n > this.maxIntBytes) this.overLimit("maxIntBytes", `an integer of ${n} bytes`);
    const neg = (b[p + n - 1] & 0x80) !== 0;
    if (n <= 6) {
      let v = 0;
      for (let i = n - 1; i >= 0; i--) v = v * 256 + b[p + i];
      return neg ? v - 2 ** (8 * n) : v;
    }
    if (!neg && n <= 8) {
      // Positive and below 2^53: exact in a double (every partial sum is smaller still).
      let hiZero = true;
      for (let i = 7; i < n; i++) if (b[p + i] !== 0) hiZero = false;
      if (hiZero && b[p + 6] < 0x20) {
        let v = 0;
        for (let i = 6; i >= 0; i--) v = v * 256 + b[p + i];
        return v;
      }
    }
    let hex = "";
    for (let i = n - 1; i >= 0; i--) hex += (b[p + i] < 16 ? "0" : "") + b[p + i].toString(16);
    let big = BigInt("0x" + hex);
    if (neg) big -= 1n << BigInt(8 * n);
    const d = Number(big);
    return BigInt(d) === big ? d : big;
  }

  /** A text line from `pos` (protocol 0 opcodes); returns [text, next pos]. */
  private line(pos: number): [string, number] {
    let b = this.buf;
    let i = pos;
    for (;;) {
      while (i < b.length && b[i] !== 0x0a) i++;
      if (i < b.length || this.eof) break;
      i -= pos;
      pos = this.refill(pos, b.length - pos + (1 << 20)); // the caller reloads its window
      b = this.buf;
    }
    if (i >= b.length) this.fail("TRUNCATED", `truncated pickle: ${opcodeName(b[this.opPos])} line has no newline`);
    return [this.latin1(pos, i - pos), i + 1];
  }

  private memoGet(idx: number): PyValue {
    const v = this.memo.get(idx);
    if (v === undefined) this.fail("BAD_PICKLE", `memo key ${idx} not found`);
    return v;
  }

  private memoPut(idx: number, v: PyValue): void {
    if (idx >= this.maxMemo) this.memoFull(idx);
    if (v instanceof BuiltContainer && this.builder !== undefined) v = this.builder.memoized(v, idx);
    this.memo.set(idx, v);
  }

  private memoFull(idx: number): never {
    return this.overLimit("maxMemoEntries", `memo entry ${idx + 1}`);
  }

  private dictKey(k: PyValue): string {
    if (typeof k === "string") return k;
    if (typeof k === "number" || typeof k === "bigint" || typeof k === "boolean") return String(k);
    if (k === null) return "None";
    return this.fail("BAD_PICKLE", `unsupported dict key type ${describe(k)}`);
  }

  private setItems(target: PyValue, from: number, to: number): void {
    const s = this.stack;
    if (target instanceof Map) {
      this.countValues(VALUE_COST.dictItem * ((to - from) >> 1));
      for (let i = from; i < to; i += 2) target.set(this.dictKey(s[i]), s[i + 1]);
    } else if (this.builder !== undefined && target instanceof BuiltContainer) {
      this.builder.setItems(target, s, from, to);
    } else {
      this.fail("BAD_PICKLE", `${opcodeName(this.buf[this.opPos])} on ${describe(target)}, not a dict`);
    }
  }

  private appendItems(target: PyValue, from: number, to: number): void {
    const s = this.stack;
    if (Array.isArray(target)) {
      this.countValues(VALUE_COST.listItem * (to - from));
      for (let i = from; i < to; i++) target.push(s[i]);
    } else if (this.builder !== undefined && target instanceof BuiltContainer) {
      this.builder.appendItems(target, s, from, to);
    } else {
      this.fail("BAD_PICKLE", `${opcodeName(this.buf[this.opPos])} on ${describe(target)}, not a list`);
    }
  }

  private pushMark(sp: number): void {
    if (this.mp + sp >= this.maxStack) this.overLimit("maxStackDepth", "the pickle's stack (values and MARKs)");
    if (this.mp === this.marks.length) {
      const m = new Int32Array(this.marks.length * 2);
      m.set(this.marks);
      this.marks = m;
    }
    this.marks[this.mp++] = sp;
  }

  // Scratch results of scalar(): a number (svIsNum) or another value, and the next offset.
  private svNum = 0;
  private svIsNum = false;
  private sv: PyValue = undefined;
  private readonly keyCache: PyValue[] = new Array<PyValue>(32).fill(undefined);
  private readonly slotCache = new Int32Array(32);

  /**
   * Reads one plain scalar at `pos` (int, float, str with its memo opcode, memo get,
   * None, bool) into svNum/sv and returns the next offset, or -1 (nothing consumed) for
   * anything else, including anything malformed: the generic loop then reports it.
   */
  private scalar(pos: number): number {
    const b = this.buf;
    const len = b.length;
    switch (b[pos]) {
      case 0x4b: // BININT1
        if (pos + 2 > len) return -1;
        this.svNum = b[pos + 1];
        this.svIsNum = true;
        return pos + 2;
      case 0x4d: // BININT2
        if (pos + 3 > len) return -1;
        this.svNum = b[pos + 1] | (b[pos + 2] << 8);
        this.svIsNum = true;
        return pos + 3;
      case 0x4a: // BININT
        if (pos + 5 > len) return -1;
        this.svNum = this.dv.getInt32(pos + 1, true);
        this.svIsNum = true;
        return pos + 5;
      case 0x8a: {
        // LONG1
        if (pos + 2 > len) return -1;
        const n = b[pos + 1];
        const p = pos + 2;
        if (p + n > len) return -1;
        if ((n >= 1 && n <= 6) || (n === 7 && b[p + 6] < 0x20)) {
          // Up to 6 bytes, or 7 bytes below 2^53 (epoch-us times): exact in a double.
          let v = 0;
          for (let i = n - 1; i >= 0; i--) v = v * 256 + b[p + i];
          this.svNum = (b[p + n - 1] & 0x80) !== 0 ? v - 2 ** (8 * n) : v;
          this.svIsNum = true;
          return p + n;
        }
        const v = this.long(p, n);
        if (typeof v === "number") {
          this.svNum = v;
          this.svIsNum = true;
        } else {
          this.sv = v;
          this.svIsNum = false;
        }
        return p + n;
      }
      case 0x47: // BINFLOAT
        if (pos + 9 > len) return -1;
        this.svNum = this.dv.getFloat64(pos + 1, false);
        this.svIsNum = true;
        return pos + 9;
      case 0x68: {
        // BINGET
        if (pos + 2 > len) return -1;
        const idx = b[pos + 1];
        const v = this.memo.get(idx);
        if (v === undefined || v instanceof BuiltContainer) return -1;
        this.sv = v;
        this.svIsNum = false;
        return pos + 2;
      }
      case 0x6a: {
        // LONG_BINGET
        if (pos + 5 > len) return -1;
        const idx = this.dv.getUint32(pos + 1, true);
        const v = this.memo.get(idx);
        if (v === undefined || v instanceof BuiltContainer) return -1;
        this.sv = v;
        this.svIsNum = false;
        return pos + 5;
      }
      case 0x8c: {
        // SHORT_BINUNICODE, then a memo opcode if any
        if (pos + 2 > len) return -1;
        const n = b[pos + 1];
        if (pos + 2 + n > len) return -1;
        this.sv = this.str(pos + 2, n);
        this.svIsNum = false;
        return this.memoAfter(pos + 2 + n, this.sv);
      }
      case 0x58: {
        // BINUNICODE, then a memo opcode if any
        if (pos + 5 > len) return -1;
        const n = this.dv.getUint32(pos + 1, true);
        if (n > len - pos - 5) return -1;
        this.sv = this.str(pos + 5, n);
        this.svIsNum = false;
        return this.memoAfter(pos + 5 + n, this.sv);
      }
      case 0x4e:
        this.sv = null;
        this.svIsNum = false;
        return pos + 1;
      case 0x88:
        this.sv = true;
        this.svIsNum = false;
        return pos + 1;
      case 0x89:
        this.sv = false;
        this.svIsNum = false;
        return pos + 1;
    }
    return -1;
  }

  /** Consumes a MEMOIZE / BINPUT / LONG_BINPUT of `v` at `pos` if there is one. */
  private memoAfter(pos: number, v: PyValue): number {
    const b = this.buf;
    const op = b[pos];
    if (op === 0x94) {
      const idx = this.memo.length;
      if (idx >= this.maxMemo) this.memoFull(idx);
      this.memo.set(idx, v);
      return pos + 1;
    }
    if (op === 0x71 && pos + 2 <= b.length) {
      this.memo.set(b[pos + 1], v);
      return pos + 2;
    }
    if (op === 0x72 && pos + 5 <= b.length) {
      const idx = this.dv.getUint32(pos + 1, true);
      if (idx >= this.maxMemo) this.memoFull(idx);
      this.memo.set(idx, v);
      return pos + 5;
    }
    return pos;
  }

  /**
   * The fast path for a RecordSink just pushed at stack depth sp - 1: consumes its memo
   * opcode, MARK, then key/value pairs of plain scalars up to the closing SETITEMS, writing
   * each value into the sink as it goes. A scalar can still turn out to be part of a larger
   * value (0, 1, TUPLE2), so at anything unexpected it undoes its work (sink reset; memo cut
   * back to its length at MARK, since MEMOIZE only appends and BINPUT rewrites the same
   * values) and returns the offset just after MARK: the generic loop then reads the pairs
   * again. Returns the next offset; this.sp is the stack depth.
   */
  private fillRecord(rec: RecordSink, pos: number, sp: number): number {
    const b = this.buf;
    const len = b.length;
    const memo = this.memo;
    this.sp = sp;
    if (pos < len) {
      const op = b[pos];
      if (op === 0x94) {
        this.memoPut(memo.length, rec);
        pos++;
      } else if (op === 0x71 && pos + 2 <= len) {
        this.memoPut(b[pos + 1], rec);
        pos += 2;
      } else if (op === 0x72 && pos + 5 <= len) {
        this.memoPut(this.dv.getUint32(pos + 1, true), rec);
        pos += 5;
      }
    }
    if (pos >= len || b[pos] !== 0x28) return pos;
    pos++;
    this.pushMark(sp);
    const start = pos;
    const memoLen = memo.length;
    const valueBytes = this.valueBytes;
    const keys = this.keyCache;
    const slots = this.slotCache;
    for (let j = 0; ; j++) {
      if (pos >= len) break;
      let op = b[pos];
      if (op === 0x75) {
        // SETITEMS: every pair was a whole value.
        this.mp--;
        return pos + 1;
      }
      // Key: nearly always a memoized string (LONG_BINGET / BINGET).
      let key: PyValue;
      let p: number;
      if (op === 0x6a && pos + 5 <= len) {
        const idx = b[pos + 1] | (b[pos + 2] << 8) | (b[pos + 3] << 16) | (b[pos + 4] << 24);
        key = memo.get(idx);
        p = pos + 5;
      } else if (op === 0x68 && pos + 2 <= len) {
        const idx = b[pos + 1];
        key = memo.get(idx);
        p = pos + 2;
      } else {
        p = this.scalar(pos);
        if (p < 0) break;
        key = this.svIsNum ? this.svNum : this.sv;
      }
      if (typeof key !== "string" || p >= len) break;
      const c = j & 31;
      let slot: number;
      if (keys[c] === key) {
        slot = slots[c];
      } else {
        slot = rec.slotOf(key);
        keys[c] = key;
        slots[c] = slot;
      }
      // Value: inline the common scalars, scalar() for the rest.
      op = b[p];
      if (op === 0x8a && p + 2 <= len && b[p + 1] >= 1 && b[p + 1] <= 7 && p + 2 + b[p + 1] <= len && (b[p + 1] < 7 || b[p + 8] < 0x20)) {
        // LONG1 of 1..6 bytes, or 7 bytes below 2^53 (epoch-µs times): exact in a double.
        const nb = b[p + 1];
        const q = p + 2;
        let v = 0;
        for (let i = nb - 1; i >= 0; i--) v = v * 256 + b[q + i];
        rec.setNumber(slot, key, (b[q + nb - 1] & 0x80) !== 0 ? v - 2 ** (8 * nb) : v);
        p = q + nb;
      } else if (op === 0x5d) {
        // EMPTY_LIST: an empty list value (frames of an entry recorded without stacks). What
        // would fill it (MARK .. APPENDS, a value then APPEND) is no key/value pair: the
        // loop backs out there. Memoized as the generic path would.
        const l: PyValue[] = [];
        this.countValues(VALUE_COST.list);
        p++;
        if (p < len && b[p] === 0x94) {
          this.memoPut(memo.length, l);
          p++;
        } else if (b[p] === 0x71 && p + 2 <= len) {
          this.memoPut(b[p + 1], l);
          p += 2;
        } else if (b[p] === 0x72 && p + 5 <= len) {
          this.memoPut(this.dv.getUint32(p + 1, true), l);
          p += 5;
        }
        if (p >= len || b[p] === 0x28) break;
        rec.setValue(slot, key, l);
      } else if (op === 0x4b && p + 2 <= len) {
        rec.setNumber(slot, key, b[p + 1]);
        p += 2;
      } else if ((op === 0x68 && p + 2 <= len) || (op === 0x6a && p + 5 <= len)) {
        const idx = op === 0x68 ? b[p + 1] : b[p + 1] | (b[p + 2] << 8) | (b[p + 3] << 16) | (b[p + 4] << 24);
        const v = memo.get(idx);
        if (v === undefined || v instanceof BuiltContainer) break;
        if (typeof v === "number") rec.setNumber(slot, key, v);
        else rec.setValue(slot, key, v);
        p += op === 0x68 ? 2 : 5;
      } else {
        p = this.scalar(p);
        if (p < 0) break;
        if (this.svIsNum) rec.setNumber(slot, key, this.svNum);
        else rec.setValue(slot, key, this.sv);
      }
      pos = p;
    }
    // Not a record of plain scalars: undo and let the generic loop read it.
    rec.reset();
    memo.truncate(memoLen);
    this.valueBytes = valueBytes;
    return start;
  }

  /** Runs to STOP and returns the unpickled value. */
  run(): PyValue {
    let b = this.buf;
    let dv = this.dv;
    const st = this.stack;
    const memo = this.memo;
    let len = b.length;
    const builder = this.builder;
    let pos = 0;
    let sp = 0;
    // floor: the stack depth at the innermost MARK (values below it cannot be popped).
    let floor = 0;
    const maxStack = this.maxStack;
    while (pos < len || !this.eof) {
      if (len - pos < WINDOW_MARGIN && !this.eof) {
        // Every opcode but a long payload's fits in the margin; fillRecord stops at the window's end.
        this.opPos = -1;
        pos = this.refill(pos, WINDOW_MARGIN);
        b = this.buf;
        dv = this.dv;
        len = b.length;
        if (pos >= len) break;
      }
      const op = b[pos];
      this.opPos = pos;
      pos++;
      // Every opcode pushes at most one value, so checking once per opcode bounds the stack.
      if (sp >= maxStack) this.overLimit("maxStackDepth", "the pickle's stack (values and MARKs)");
      switch (op) {
        case 0x80: {
          // PROTO
          if (pos >= len) this.truncated(pos, 1);
          const v = b[pos++];
          if (v > 5) this.fail("NOT_A_PICKLE", `unsupported pickle protocol ${v}`);
          this.protocol = v;
          break;
        }
        case 0x95: {
          // FRAME: an 8-byte length; the frame must lie within the data.
          if (pos + 8 > len) this.truncated(pos, 8);
          const n = dv.getUint32(pos, true) + dv.getUint32(pos + 4, true) * TWO32;
          pos += 8;
          if (this.eof && n > len - pos) this.fail("TRUNCATED", `truncated pickle: FRAME of ${n} bytes, ${len - pos} left`);
          break;
        }
        case 0x2e: {
          // STOP
          if (sp !== 1 || this.mp !== 0) {
            this.fail("BAD_PICKLE", `STOP with ${sp} values and ${this.mp} open marks on the stack`);
          }
          this.endPos = this.base + pos;
          this.sp = sp;
          const v = st[0];
          st.length = 0;
          return v;
        }
        case 0x28: // MARK
          this.pushMark(sp);
          floor = sp;
          break;
        case 0x30: // POP
          if (sp <= floor) this.underflow();
          sp--;
          break;
        case 0x31: // POP_MARK
          if (this.mp === 0) this.noMark();
          sp = this.marks[--this.mp];
          floor = this.mp === 0 ? 0 : this.marks[this.mp - 1];
          break;
        case 0x32: // DUP
          if (sp <= floor) this.underflow();
          st[sp] = st[sp - 1];
          sp++;
          break;
        case 0x4e: // NONE
          st[sp++] = null;
          break;
        case 0x88: // NEWTRUE
          st[sp++] = true;
          break;
        case 0x89: // NEWFALSE
          st[sp++] = false;
          break;
        case 0x4b: // BININT1
          if (pos >= len) this.truncated(pos, 1);
          st[sp++] = b[pos++];
          break;
        case 0x4d: // BININT2
          if (pos + 2 > len) this.truncated(pos, 2);
          st[sp++] = b[pos] | (b[pos + 1] << 8);
          pos += 2;
          break;
        case 0x4a: // BININT
          if (pos + 4 > len) this.truncated(pos, 4);
          st[sp++] = dv.getInt32(pos, true);
          pos += 4;
          break;
        case 0x8a: {
          // LONG1
          if (pos >= len) this.truncated(pos, 1);
          const n = b[pos++];
          if (pos + n > len) this.truncated(pos, n);
          st[sp++] = this.long(pos, n);
          pos += n;
          break;
        }
        case 0x8b: {
          // LONG4
          if (pos + 4 > len) this.truncated(pos, 4);
          const n = dv.getInt32(pos, true);
          pos += 4;
          if (n < 0) this.fail("BAD_PICKLE", `LONG4 with negative length ${n}`);
          if (pos + n > len) ({ pos, b, dv, len } = this.need(pos, n));
          st[sp++] = this.long(pos, n);
          pos += n;
          break;
        }
        case 0x47: // BINFLOAT (big-endian)
          if (pos + 8 > len) this.truncated(pos, 8);
          st[sp++] = dv.getFloat64(pos, false);
          pos += 8;
          break;
        case 0x8c: {
          // SHORT_BINUNICODE
          if (pos >= len) this.truncated(pos, 1);
          const n = b[pos++];
          if (pos + n > len) this.truncated(pos, n);
          st[sp++] = this.str(pos, n);
          pos += n;
          break;
        }
        case 0x58: {
          // BINUNICODE
          if (pos + 4 > len) this.truncated(pos, 4);
          const n = dv.getUint32(pos, true);
          pos += 4;
          if (n > len - pos) ({ pos, b, dv, len } = this.need(pos, n));
          st[sp++] = this.str(pos, n);
          pos += n;
          break;
        }
        case 0x8d: {
          // BINUNICODE8
          if (pos + 8 > len) this.truncated(pos, 8);
          const n = dv.getUint32(pos, true) + dv.getUint32(pos + 4, true) * TWO32;
          pos += 8;
          if (n > len - pos) ({ pos, b, dv, len } = this.need(pos, n));
          st[sp++] = this.str(pos, n);
          pos += n;
          break;
        }
        case 0x55: {
          // SHORT_BINSTRING (Python 2 str): bytes as latin-1
          if (pos >= len) this.truncated(pos, 1);
          const n = b[pos++];
          if (pos + n > len) this.truncated(pos, n);
          st[sp++] = this.latin1(pos, n);
          pos += n;
          break;
        }
        case 0x54: {
          // BINSTRING
          if (pos + 4 > len) this.truncated(pos, 4);
          const n = dv.getInt32(pos, true);
          pos += 4;
          if (n < 0) this.fail("BAD_PICKLE", `BINSTRING with negative length ${n}`);
          if (n > len - pos) ({ pos, b, dv, len } = this.need(pos, n));
          st[sp++] = this.latin1(pos, n);
          pos += n;
          break;
        }
        case 0x43: {
          // SHORT_BINBYTES
          if (pos >= len) this.truncated(pos, 1);
          const n = b[pos++];
          if (pos + n > len) this.truncated(pos, n);
          this.countDecoded(n);
          st[sp++] = new Uint8Array(b.subarray(pos, pos + n));
          pos += n;
          break;
        }
        case 0x42: {
          // BINBYTES
          if (pos + 4 > len) this.truncated(pos, 4);
          const n = dv.getUint32(pos, true);
          pos += 4;
          if (n > len - pos) ({ pos, b, dv, len } = this.need(pos, n));
          this.countDecoded(n);
          st[sp++] = new Uint8Array(b.subarray(pos, pos + n));
          pos += n;
          break;
        }
        case 0x8e:
        case 0x96: {
          // BINBYTES8, BYTEARRAY8
          if (pos + 8 > len) this.truncated(pos, 8);
          const n = dv.getUint32(pos, true) + dv.getUint32(pos + 4, true) * TWO32;
          pos += 8;
          if (n > len - pos) ({ pos, b, dv, len } = this.need(pos, n));
          this.countDecoded(n);
          st[sp++] = new Uint8Array(b.subarray(pos, pos + n));
          pos += n;
          break;
        }
        case 0x56: {
          // UNICODE (text, raw-unicode-escape)
          const [t, next] = this.line(pos);
          ({ b, dv, len } = this.window());
          pos = next;
          st[sp++] = t.replace(/\\u([0-9a-fA-F]{4})|\\U([0-9a-fA-F]{8})/g, (_m, u4: string | undefined, u8: string | undefined) => {
            const cp = parseInt((u4 ?? u8) as string, 16);
            return cp <= 0x10ffff ? String.fromCodePoint(cp) : "\ufffd";
          });
          break;
        }
        case 0x49: {
          // INT (text): also encodes bools as I00/I01
          const [t, next] = this.line(pos);
          ({ b, dv, len } = this.window());
          pos = next;
          st[sp++] = t === "00" ? false : t === "01" ? true : this.parseIntText(t);
          break;
        }
        case 0x4c: {
          // LONG (text), optional trailing L
          const [t, next] = this.line(pos);
          ({ b, dv, len } = this.window());
          pos = next;
          st[sp++] = this.parseIntText(t.endsWith("L") ? t.slice(0, -1) : t);
          break;
        }
        case 0x46: {
          // FLOAT (text): Python's repr, including inf / -inf / nan
          const [raw, next] = this.line(pos);
          ({ b, dv, len } = this.window());
          pos = next;
          st[sp++] = this.parseFloatText(raw.trim());
          break;
        }
        case 0x7d: {
          // EMPTY_DICT
          let d: BuiltContainer | undefined;
          if (builder !== undefined) {
            this.sp = sp;
            d = builder.newDict(this);
          }
          if (d instanceof RecordSink) {
            st[sp++] = d;
            pos = this.fillRecord(d, pos, sp);
            sp = this.sp;
            floor = this.mp === 0 ? 0 : this.marks[this.mp - 1];
            break;
          }
          if (d === undefined) this.countValues(VALUE_COST.dict);
          st[sp++] = d === undefined ? new Map() : d;
          break;
        }
        case 0x5d: {
          // EMPTY_LIST
          let l: BuiltContainer | undefined;
          if (builder !== undefined) {
            this.sp = sp;
            l = builder.newList(this);
          }
          if (l === undefined) this.countValues(VALUE_COST.list);
          st[sp++] = l === undefined ? [] : l;
          break;
        }
        case 0x29: // EMPTY_TUPLE
        case 0x8f: // EMPTY_SET
          this.countValues(VALUE_COST.list);
          st[sp++] = [];
          break;
        case 0x64: {
          // DICT
          if (this.mp === 0) this.noMark();
          const m = this.marks[--this.mp];
          floor = this.mp === 0 ? 0 : this.marks[this.mp - 1];
          if ((sp - m) % 2 !== 0) this.fail("BAD_PICKLE", "DICT with an odd number of items");
          this.countValues(VALUE_COST.dict + VALUE_COST.dictItem * ((sp - m) >> 1));
          const d = new Map<string, PyValue>();
          for (let i = m; i < sp; i += 2) d.set(this.dictKey(st[i]), st[i + 1]);
          sp = m;
          st[sp++] = d;
          break;
        }
        case 0x6c: // LIST
        case 0x74: // TUPLE
        case 0x91: {
          // FROZENSET
          if (this.mp === 0) this.noMark();
          const m = this.marks[--this.mp];
          floor = this.mp === 0 ? 0 : this.marks[this.mp - 1];
          this.countValues(VALUE_COST.list + VALUE_COST.listItem * (sp - m));
          const items = st.slice(m, sp);
          sp = m;
          st[sp++] = items;
          break;
        }
        case 0x85: // TUPLE1
          if (sp - 1 < floor) this.underflow();
          this.countValues(VALUE_COST.list + 1 * VALUE_COST.listItem);
          st[sp - 1] = [st[sp - 1]];
          break;
        case 0x86: // TUPLE2
          if (sp - 2 < floor) this.underflow();
          this.countValues(VALUE_COST.list + 2 * VALUE_COST.listItem);
          st[sp - 2] = [st[sp - 2], st[sp - 1]];
          sp--;
          break;
        case 0x87: // TUPLE3
          if (sp - 3 < floor) this.underflow();
          this.countValues(VALUE_COST.list + 3 * VALUE_COST.listItem);
          st[sp - 3] = [st[sp - 3], st[sp - 2], st[sp - 1]];
          sp -= 2;
          break;
        case 0x73: // SETITEM
          if (sp - 3 < floor) this.underflow();
          this.sp = sp;
          this.setItems(st[sp - 3], sp - 2, sp);
          sp -= 2;
          break;
        case 0x75: {
          // SETITEMS
          if (this.mp === 0) this.noMark();
          const m = this.marks[--this.mp];
          floor = this.mp === 0 ? 0 : this.marks[this.mp - 1];
          if (m === 0 || m - 1 < floor) this.underflow();
          if ((sp - m) % 2 !== 0) this.fail("BAD_PICKLE", "SETITEMS with an odd number of items");
          this.sp = sp;
          this.setItems(st[m - 1], m, sp);
          sp = m;
          break;
        }
        case 0x61: // APPEND
          if (sp - 2 < floor) this.underflow();
          this.sp = sp;
          this.appendItems(st[sp - 2], sp - 1, sp);
          sp--;
          break;
        case 0x65: // APPENDS
        case 0x90: {
          // ADDITEMS
          if (this.mp === 0) this.noMark();
          const m = this.marks[--this.mp];
          floor = this.mp === 0 ? 0 : this.marks[this.mp - 1];
          if (m === 0 || m - 1 < floor) this.underflow();
          this.sp = sp;
          this.appendItems(st[m - 1], m, sp);
          sp = m;
          break;
        }
        case 0x94: // MEMOIZE
          if (sp <= floor) this.underflow();
          this.memoPut(memo.length, st[sp - 1]);
          break;
        case 0x71: // BINPUT
          if (pos >= len) this.truncated(pos, 1);
          if (sp <= floor) this.underflow();
          this.memoPut(b[pos++], st[sp - 1]);
          break;
        case 0x72: // LONG_BINPUT
          if (pos + 4 > len) this.truncated(pos, 4);
          if (sp <= floor) this.underflow();
          this.memoPut(dv.getUint32(pos, true), st[sp - 1]);
          pos += 4;
          break;
        case 0x70: {
          // PUT (text)
          const [t, next] = this.line(pos);
          ({ b, dv, len } = this.window());
          pos = next;
          if (sp <= floor) this.underflow();
          this.memoPut(this.memoIndexText(t), st[sp - 1]);
          break;
        }
        case 0x68: // BINGET
          if (pos >= len) this.truncated(pos, 1);
          st[sp++] = this.memoGet(b[pos++]);
          break;
        case 0x6a: // LONG_BINGET
          if (pos + 4 > len) this.truncated(pos, 4);
          st[sp++] = this.memoGet(dv.getUint32(pos, true));
          pos += 4;
          break;
        case 0x67: {
          // GET (text)
          const [t, next] = this.line(pos);
          ({ b, dv, len } = this.window());
          pos = next;
          st[sp++] = this.memoGet(this.memoIndexText(t));
          break;
        }
        default: {
          const name = opcodeName(op);
          if (name.startsWith("0x")) this.fail("BAD_OPCODE", `unknown opcode ${name}`);
          this.fail("BAD_OPCODE", `opcode ${name} is not allowed in a memory snapshot (plain data only)`);
        }
      }
    }
    return this.fail("TRUNCATED", "truncated pickle: no STOP opcode before the end of the data", len);
  }

  private window(): { b: Uint8Array; dv: DataView; len: number } {
    return { b: this.buf, dv: this.dv, len: this.buf.length };
  }

  /** `n` payload bytes from `pos`: the window grown to hold them, or TRUNCATED when the input ends first. */
  private need(pos: number, n: number): { pos: number; b: Uint8Array; dv: DataView; len: number } {
    if (!this.eof) pos = this.refill(pos, n);
    if (n > this.buf.length - pos) this.truncated(pos, n);
    return { pos, ...this.window() };
  }

  private parseFloatText(t: string): number {
    const lower = t.toLowerCase();
    if (lower === "inf" || lower === "+inf") return Infinity;
    if (lower === "-inf") return -Infinity;
    if (lower === "nan" || lower === "+nan" || lower === "-nan") return NaN;
    if (t.length > 3 * this.maxIntBytes) this.overLimit("maxIntBytes", `a FLOAT of ${t.length} characters`);
    // Unambiguous (no two ways to match a digit run), so a failing match is linear.
    if (!/^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$/.test(t)) this.fail("BAD_PICKLE", `FLOAT with bad text ${JSON.stringify(t.slice(0, 20))}`);
    return Number(t);
  }

  private parseIntText(t: string): number | bigint {
    // BigInt() of a decimal string is quadratic in its length: bound it first.
    if (t.length > 3 * this.maxIntBytes) this.overLimit("maxIntBytes", `an integer of ${t.length} digits`);
    if (!/^[+-]?\d+$/.test(t)) this.fail("BAD_PICKLE", `integer opcode with bad text ${JSON.stringify(t.slice(0, 20))}`);
    const big = BigInt(t);
    const d = Number(big);
    return BigInt(d) === big ? d : big;
  }

  private memoIndexText(t: string): number {
    if (!/^\d{1,10}$/.test(t)) this.fail("BAD_PICKLE", `memo index with bad text ${JSON.stringify(t.slice(0, 20))}`);
    return Number(t);
  }
}

/** A short description of a value's Python type, for messages. */
export function describe(v: PyValue): string {
  if (v === null) return "None";
  if (v instanceof Map) return "dict";
  if (Array.isArray(v)) return "list";
  if (v instanceof Uint8Array) return "bytes";
  if (typeof v === "string") return "str";
  if (typeof v === "number") return Number.isInteger(v) ? "int" : "float";
  if (typeof v === "bigint") return "int";
  if (typeof v === "boolean") return "bool";
  if (typeof v === "object") return (v as object).constructor?.name ?? "object";
  return typeof v;
}
