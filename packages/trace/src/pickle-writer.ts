/** A Python float, so that 0.0 is not written as the int 0. */
export class PyFloat {
  constructor(readonly value: number) {}
}

/** A Python tuple (arrays are written as lists). */
export class PyTuple {
  constructor(readonly items: readonly PickleValue[]) {}
}

export type PickleValue =
  | null
  | undefined
  | boolean
  | number
  | bigint
  | string
  | PyFloat
  | PyTuple
  | readonly PickleValue[]
  | ReadonlyMap<string, PickleValue>
  | { readonly [key: string]: PickleValue };

/** Python pickles lists and dicts in batches of this many items; so do we (bounded stacks for readers). */
const BATCH = 1000;

/**
 * A small protocol-4 pickle writer for plain data (what PyTorch snapshots hold). Strings
 * are memoized by content, so repeated keys and action names cost a LONG_BINGET. Output
 * loads with Python's pickle.loads and PyTorch's memory viewer. Unframed (FRAME is optional).
 */
export class PickleWriter {
  private buf = new Uint8Array(1 << 16);
  private dv = new DataView(this.buf.buffer);
  private pos = 0;
  private readonly memo = new Map<string, number>();
  private memoCount = 0;
  private readonly te = new TextEncoder();

  constructor() {
    this.byte(0x80);
    this.byte(4);
  }

  private ensure(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    let cap = this.buf.length * 2;
    while (cap < this.pos + n) cap *= 2;
    const b = new Uint8Array(cap);
    b.set(this.buf.subarray(0, this.pos));
    this.buf = b;
    this.dv = new DataView(b.buffer);
  }

  private byte(b: number): void {
    this.ensure(1);
    this.buf[this.pos++] = b;
  }

  none(): this {
    this.byte(0x4e);
    return this;
  }

  bool(b: boolean): this {
    this.byte(b ? 0x88 : 0x89);
    return this;
  }

  /** An int: BININT1/BININT2/BININT when it fits, else LONG1 (two's complement, little-endian). */
  int(v: number | bigint): this {
    if (typeof v === "number") {
      if (!Number.isInteger(v)) throw new RangeError(`not an integer: ${v}`);
      if (v >= 0 && v < 256) {
        this.ensure(2);
        this.buf[this.pos++] = 0x4b;
        this.buf[this.pos++] = v;
        return this;
      }
      if (v >= 0 && v < 65536) {
        this.ensure(3);
        this.buf[this.pos++] = 0x4d;
        this.dv.setUint16(this.pos, v, true);
        this.pos += 2;
        return this;
      }
      if (v >= -2147483648 && v <= 2147483647) {
        this.ensure(5);
        this.buf[this.pos++] = 0x4a;
        this.dv.setInt32(this.pos, v, true);
        this.pos += 4;
        return this;
      }
      if (Number.isSafeInteger(v)) return this.long1Safe(v);
      v = BigInt(v);
    }
    // Smallest two's-complement byte string that holds v.
    const bytes: number[] = [];
    let x = v;
    for (;;) {
      const b = Number(BigInt.asUintN(8, x));
      bytes.push(b);
      x >>= 8n;
      if ((x === 0n && (b & 0x80) === 0) || (x === -1n && (b & 0x80) !== 0)) break;
    }
    this.ensure(2 + bytes.length);
    this.buf[this.pos++] = 0x8a;
    this.buf[this.pos++] = bytes.length;
    for (const b of bytes) this.buf[this.pos++] = b;
    return this;
  }

  /** LONG1 for safe integers beyond int32 without BigInt (addresses, times). */
  private long1Safe(v: number): this {
    this.ensure(10);
    const start = this.pos + 2;
    let n = 0;
    let x = v;
    const neg = x < 0;
    // Two's complement: for negatives write (2^(8n) + v) once n is known to suffice.
    if (neg) x = -x - 1;
    let last = 0;
    do {
      const b = x % 256;
      this.buf[start + n++] = neg ? 255 - b : b;
      last = neg ? 255 - b : b;
      x = Math.floor(x / 256);
    } while (x > 0);
    if ((last & 0x80) !== 0 !== neg) this.buf[start + n++] = neg ? 0xff : 0;
    this.buf[this.pos] = 0x8a;
    this.buf[this.pos + 1] = n;
    this.pos = start + n;
    return this;
  }

  float(v: number): this {
    this.ensure(9);
    this.buf[this.pos++] = 0x47;
    this.dv.setFloat64(this.pos, v, false);
    this.pos += 8;
    return this;
  }

  str(s: string): this {
    const m = this.memo.get(s);
    if (m !== undefined) {
      this.ensure(5);
      this.buf[this.pos++] = 0x6a; // LONG_BINGET
      this.dv.setUint32(this.pos, m, true);
      this.pos += 4;
      return this;
    }
    const bytes = this.te.encode(s);
    this.ensure(bytes.length + 10);
    if (bytes.length < 256) {
      this.buf[this.pos++] = 0x8c;
      this.buf[this.pos++] = bytes.length;
    } else {
      this.buf[this.pos++] = 0x58;
      this.dv.setUint32(this.pos, bytes.length, true);
      this.pos += 4;
    }
    this.buf.set(bytes, this.pos);
    this.pos += bytes.length;
    this.buf[this.pos++] = 0x94; // MEMOIZE
    this.memo.set(s, this.memoCount++);
    return this;
  }

  emptyDict(): this {
    this.byte(0x7d);
    return this;
  }

  emptyList(): this {
    this.byte(0x5d);
    return this;
  }

  mark(): this {
    this.byte(0x28);
    return this;
  }

  setItems(): this {
    this.byte(0x75);
    return this;
  }

  appends(): this {
    this.byte(0x65);
    return this;
  }

  /** Writes a list whose items `each(i)` writes, batched like Python's pickler. */
  list(n: number, each: (i: number) => void): this {
    this.emptyList();
    for (let i = 0; i < n; i += BATCH) {
      this.mark();
      const end = Math.min(n, i + BATCH);
      for (let j = i; j < end; j++) each(j);
      this.appends();
    }
    return this;
  }

  /** Writes a dict from [key, value] entries. */
  dict(entries: Iterable<readonly [string, PickleValue]>): this {
    this.emptyDict();
    let n = 0;
    for (const [k, v] of entries) {
      if (n % BATCH === 0) {
        if (n > 0) this.setItems();
        this.mark();
      }
      this.str(k);
      this.value(v);
      n++;
    }
    if (n > 0) this.setItems();
    return this;
  }

  value(v: PickleValue): this {
    if (v === null || v === undefined) return this.none();
    switch (typeof v) {
      case "boolean":
        return this.bool(v);
      case "number":
        return Number.isInteger(v) ? this.int(v) : this.float(v);
      case "bigint":
        return this.int(v);
      case "string":
        return this.str(v);
    }
    if (v instanceof PyFloat) return this.float(v.value);
    if (v instanceof PyTuple) {
      const items = v.items;
      if (items.length === 0) return this.byte(0x29), this;
      if (items.length <= 3) {
        for (const x of items) this.value(x);
        this.byte(0x84 + items.length);
        return this;
      }
      this.mark();
      for (const x of items) this.value(x);
      this.byte(0x74);
      return this;
    }
    if (Array.isArray(v)) {
      const a = v as readonly PickleValue[];
      return this.list(a.length, (i) => this.value(a[i]));
    }
    if (v instanceof Map) return this.dict(v.entries() as Iterable<[string, PickleValue]>);
    return this.dict(Object.entries(v as Record<string, PickleValue>));
  }

  /** Ends the pickle (STOP) and returns its bytes. */
  finish(): Uint8Array {
    this.byte(0x2e);
    return this.buf.slice(0, this.pos);
  }
}

/** Pickles one plain value (protocol 4). */
export function pickle(value: PickleValue): Uint8Array {
  return new PickleWriter().value(value).finish();
}
