/**
 * The bookkeeping that makes the host and sim drivers refuse what CUDA refuses: virtual
 * reservations, the mappings inside each, and physical handles with their map counts.
 *
 * Reservations sit in one array sorted by start; each keeps its mappings in parallel
 * arrays sorted by start, so every check is a binary search over that reservation's
 * mappings (a replay makes tens of thousands of map calls). A plain allocation
 * (memAlloc) is a reservation holding one accessible mapping of an internal handle, so
 * data access treats both alike.
 */
import { INVALID_VALUE, NOT_SUPPORTED, OUT_OF_MEMORY, hex, vmmError } from "./vmm-error.js";
import { lowerBoundOf } from "./lower-bound.js";

/**
 * Error codes CUDA gives for each misuse, as an H200 (driver 580.159, CUDA 13.0) answered
 * them (bench/misuse-probe.mjs; bench/RESULTS.md has the whole table).
 */
export const MISUSE_CODES = {
  /** cuMemMap over bytes that are already mapped. */
  mapOverMapped: INVALID_VALUE,
  /** cuMemMap of part of a handle (offset != 0 or size != the handle's size): only whole handles map. */
  partialMap: NOT_SUPPORTED,
  /** cuMemUnmap of a range that cuts a mapping. */
  unmapPartial: INVALID_VALUE,
  /** cuMemAddressFree of a reservation that still has mappings. */
  freeWithMappings: INVALID_VALUE,
} as const;

/** One physical allocation as the bookkeeping sees it. */
export class PhysicalRecord {
  mapCount = 0;
  released = false;
  constructor(
    readonly id: number,
    readonly size: number,
    /** What the driver keeps for it (host: the native handle; sim: its page store, made on first write). */
    public payload: unknown,
    /**
     * The driver that made it, when the record is itself the handle given out (the sim:
     * one object per handle, no side table); 0 otherwise.
     */
    readonly owner = 0,
  ) {}
  /** Memory goes back once released and no longer mapped (as in CUDA). */
  get freed(): boolean {
    return this.released && this.mapCount === 0;
  }
}

/**
 * A virtual range and its mappings, in parallel arrays sorted by start. The live mappings
 * are the indices [head, mapStart.length): unmapping a run chunk by chunk from the left
 * (how stitched ranges are torn down) only advances `head`, where removing index 0 would
 * move every later entry each time; the dead prefix is cut off once it is half the arrays.
 */
export class Reservation {
  readonly mapStart: number[] = [];
  readonly mapEnd: number[] = [];
  readonly mapOffset: number[] = [];
  /** Entries before `head` are dead and may be null. */
  readonly mapRecord: (PhysicalRecord | null)[] = [];
  readonly mapAccess: boolean[] = [];
  /** First live mapping. */
  head = 0;
  constructor(
    readonly start: number,
    readonly end: number,
    /** Set for memAlloc ranges, which memAddressFree must not free. */
    readonly isAlloc: boolean,
  ) {}
  get size(): number {
    return this.end - this.start;
  }
  /** Live mappings. */
  get count(): number {
    return this.mapStart.length - this.head;
  }
  /** Index of the last live mapping starting at or before `address`, or head - 1. */
  floor(address: number): number {
    const s = this.mapStart;
    let lo = this.head;
    let hi = s.length - 1;
    // A run is mapped left to right: the answer is usually the last mapping (no search).
    if (hi >= lo && s[hi]! <= address) return hi;
    let found = lo - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      if (s[mid]! <= address) {
        found = mid;
        lo = mid + 1;
      } else hi = mid - 1;
    }
    return found;
  }
}

/** Error-message arguments, formatted only when a call fails (no closure per call). */
const rangeArgs = (address: number, size: number): string => `ptr=${hex(address)}, size=${size}`;
const mapArgs = (address: number, size: number, offset: number, record: PhysicalRecord): string =>
  `ptr=${hex(address)}, size=${size}, offset=${offset}, handle #${record.id}`;

/** Called for each piece of a data access: `length` bytes at `handleOffset` in `record`, `bufferOffset` into the caller's bytes. */
export type SegmentVisitor = (record: PhysicalRecord, handleOffset: number, length: number, bufferOffset: number) => void;

export class AddressSpace {
  private readonly starts: number[] = [];
  private readonly reservations: Reservation[] = [];
  /** Physical bytes held: created and not yet freed, plus plain allocations. */
  liveBytes = 0;
  peakBytes = 0;

  constructor(
    readonly granularity: number,
    /** Physical bytes available; memCreate / memAlloc past it fail with CUDA_ERROR_OUT_OF_MEMORY. */
    readonly capacity: number,
  ) {}

  get reservationCount(): number {
    return this.reservations.length;
  }
  /** Mappings across all reservations (allocations excluded). */
  get mappingCount(): number {
    let n = 0;
    for (const r of this.reservations) if (!r.isAlloc) n += r.count;
    return n;
  }

  // ---- physical ----

  /** Counts `bytes` as held, or throws CUDA_ERROR_OUT_OF_MEMORY. */
  charge(call: string, bytes: number): void {
    if (bytes > this.capacity - this.liveBytes) {
      throw vmmError(
        OUT_OF_MEMORY,
        call,
        `size=${bytes}`,
        `${bytes} bytes requested, ${this.capacity - this.liveBytes} of ${this.capacity} free`,
      );
    }
    this.liveBytes += bytes;
    if (this.liveBytes > this.peakBytes) this.peakBytes = this.liveBytes;
  }
  refund(bytes: number): void {
    this.liveBytes -= bytes;
  }

  checkAligned(call: string, what: string, value: number): void {
    if (value % this.granularity !== 0) {
      throw vmmError(INVALID_VALUE, call, `${what}=${value}`, `${what} is not a multiple of the granularity ${this.granularity}`);
    }
  }

  /** Marks a record released; returns true when its memory goes back now (not mapped). */
  release(call: string, record: PhysicalRecord): boolean {
    if (record.released) throw vmmError(INVALID_VALUE, call, `handle #${record.id}`, "handle was already released");
    record.released = true;
    if (record.mapCount === 0) {
      this.refund(record.size);
      return true;
    }
    return false;
  }

  // ---- reservations ----

  private indexOfStart(start: number): number {
    return lowerBoundOf(this.starts, start);
  }

  /** The reservation holding every byte of [address, address+size), if one does. */
  containing(address: number, size: number): Reservation | undefined {
    // A stitch maps, sets access and unmaps chunk after chunk in one reservation: try the
    // last one found before searching (reservations never overlap, so it is the answer).
    const last = this.lastFound;
    if (last !== null && address >= last.start && address + size <= last.end) return last;
    const i = this.indexOfStart(address + 1) - 1;
    if (i < 0) return undefined;
    const r = this.reservations[i]!;
    if (address >= r.start && address + size <= r.end) {
      this.lastFound = r;
      return r;
    }
    return undefined;
  }
  /** containing()'s last answer; cleared when that reservation goes. */
  private lastFound: Reservation | null = null;

  addReservation(start: number, size: number, isAlloc: boolean): Reservation {
    const r = new Reservation(start, start + size, isAlloc);
    const i = this.indexOfStart(start);
    if (i === this.starts.length) {
      // The sim places reservations at increasing addresses: append (splice allocates its result).
      this.starts.push(start);
      this.reservations.push(r);
    } else {
      this.starts.splice(i, 0, start);
      this.reservations.splice(i, 0, r);
    }
    return r;
  }

  /** The reservation starting exactly at `start`, if any. */
  at(start: number): Reservation | undefined {
    const i = this.indexOfStart(start);
    return this.starts[i] === start ? this.reservations[i] : undefined;
  }

  /** Checks a cuMemAddressFree and removes the reservation. */
  freeReservation(call: string, address: number, size: number): Reservation {
    const r = this.at(address);
    if (!r || r.isAlloc) throw vmmError(INVALID_VALUE, call, rangeArgs(address, size), "no reservation starts at this address");
    if (r.size !== size) throw vmmError(INVALID_VALUE, call, rangeArgs(address, size), `the reservation is ${r.size} bytes`);
    if (r.count > 0) {
      throw vmmError(
        MISUSE_CODES.freeWithMappings,
        call,
        rangeArgs(address, size),
        `${r.count} mapping(s) still live in the reservation`,
      );
    }
    this.removeReservation(r);
    return r;
  }

  removeReservation(r: Reservation): void {
    if (r === this.lastFound) this.lastFound = null;
    const i = this.indexOfStart(r.start);
    if (i === this.starts.length - 1) {
      this.starts.pop();
      this.reservations.pop();
    } else {
      this.starts.splice(i, 1);
      this.reservations.splice(i, 1);
    }
  }

  /**
   * Removes every reservation and allocation at once (a driver's close) and returns them;
   * every record still mapped or not released counts as gone. The books are empty after.
   */
  takeAll(): Reservation[] {
    const all = this.reservations.splice(0);
    this.starts.length = 0;
    this.lastFound = null;
    for (const r of all) {
      for (let i = r.head; i < r.mapRecord.length; i++) {
        const rec = r.mapRecord[i];
        if (rec) {
          rec.mapCount = 0;
          rec.released = true;
        }
      }
      r.head = r.mapStart.length;
    }
    this.liveBytes = 0;
    return all;
  }

  /** First gap of `size` bytes aligned to `alignment` in [base, limit), or -1: the sim's VA allocator. */
  findGap(size: number, alignment: number, base: number, limit: number): number {
    let cursor = base;
    for (const r of this.reservations) {
      if (r.end <= cursor) continue;
      const aligned = Math.ceil(cursor / alignment) * alignment;
      if (aligned + size <= r.start) return aligned;
      cursor = Math.max(cursor, r.end);
    }
    const aligned = Math.ceil(cursor / alignment) * alignment;
    return aligned + size <= limit ? aligned : -1;
  }

  // ---- mappings ----

  /** Checks a cuMemMap and records it. */
  map(call: string, address: number, size: number, offset: number, record: PhysicalRecord): void {
    const g = this.granularity;
    if (size === 0) throw vmmError(INVALID_VALUE, call, mapArgs(address, size, offset, record), "size is 0");
    if (record.released) throw vmmError(INVALID_VALUE, call, mapArgs(address, size, offset, record), "handle was released");
    // CUDA 13 on an H200 refuses partial maps before anything else (even an unaligned size).
    if (offset !== 0 || size !== record.size) {
      const why = `only whole handles map: offset 0 and size ${record.size}`;
      throw vmmError(MISUSE_CODES.partialMap, call, mapArgs(address, size, offset, record), why);
    }
    if (address % g !== 0) {
      const why = `ptr must be a multiple of the granularity ${g}`;
      throw vmmError(INVALID_VALUE, call, mapArgs(address, size, offset, record), why);
    }
    const r = this.containing(address, size);
    if (!r || r.isAlloc) {
      throw vmmError(INVALID_VALUE, call, mapArgs(address, size, offset, record), "the range is not inside one reservation");
    }
    const k = r.floor(address);
    const overlapsBefore = k >= r.head && r.mapEnd[k]! > address;
    const overlapsAfter = k + 1 < r.mapStart.length && r.mapStart[k + 1]! < address + size;
    if (overlapsBefore || overlapsAfter) {
      const why = "part of the range is already mapped";
      throw vmmError(MISUSE_CODES.mapOverMapped, call, mapArgs(address, size, offset, record), why);
    }
    const at = k + 1;
    if (at === r.mapStart.length) {
      // Appending (the common case: a stitch maps left to right); splice would allocate.
      r.mapStart.push(address);
      r.mapEnd.push(address + size);
      r.mapOffset.push(offset);
      r.mapRecord.push(record);
      r.mapAccess.push(false);
    } else {
      r.mapStart.splice(at, 0, address);
      r.mapEnd.splice(at, 0, address + size);
      r.mapOffset.splice(at, 0, offset);
      r.mapRecord.splice(at, 0, record);
      r.mapAccess.splice(at, 0, false);
    }
    record.mapCount++;
  }

  /** Set by tiling(): the mappings [tileFirst, tileLast] of the last range it checked (no result object per call). */
  private tileFirst = 0;
  private tileLast = 0;

  /**
   * The reservation whose mappings [tileFirst, tileLast] exactly tile [address,
   * address+size) with no gap, or a VmmError naming the first byte that breaks the rule.
   */
  private tiling(call: string, address: number, size: number): Reservation {
    const g = this.granularity;
    if (size === 0) throw vmmError(INVALID_VALUE, call, rangeArgs(address, size), "size is 0");
    if (address % g !== 0 || size % g !== 0) {
      throw vmmError(INVALID_VALUE, call, rangeArgs(address, size), `ptr and size must be multiples of the granularity ${g}`);
    }
    const r = this.containing(address, size);
    if (!r || r.isAlloc) throw vmmError(INVALID_VALUE, call, rangeArgs(address, size), "the range is not inside one reservation");
    const first = r.floor(address);
    if (first < r.head || r.mapEnd[first]! <= address) {
      throw vmmError(INVALID_VALUE, call, rangeArgs(address, size), `${hex(address)} is not mapped`);
    }
    if (r.mapStart[first] !== address) {
      throw vmmError(INVALID_VALUE, call, rangeArgs(address, size), "the range starts inside a mapping");
    }
    const end = address + size;
    let last = first;
    while (r.mapEnd[last]! < end) {
      const next = last + 1;
      if (next >= r.mapStart.length || r.mapStart[next] !== r.mapEnd[last]) {
        throw vmmError(INVALID_VALUE, call, rangeArgs(address, size), `${hex(r.mapEnd[last]!)} is not mapped`);
      }
      last = next;
    }
    if (r.mapEnd[last] !== end) {
      throw vmmError(INVALID_VALUE, call, rangeArgs(address, size), "the range ends inside a mapping");
    }
    this.tileFirst = first;
    this.tileLast = last;
    return r;
  }

  /**
   * Checks a cuMemUnmap and removes the mappings in the range. As in CUDA, the range must
   * lie in one reservation and cut no mapping, but bytes in it need not be mapped (an H200
   * accepts unmapping a gap); with `strict`, every byte must be (a bug finder for callers).
   * `onRemoved` sees each mapping removed (its record and size) before the record's memory
   * is refunded, if it was released and this was its last mapping. Returns the count removed.
   * Hot: pass a callback made once, not a new closure per call.
   */
  unmap(
    call: string,
    address: number,
    size: number,
    strict = false,
    onRemoved?: (record: PhysicalRecord, bytes: number) => void,
  ): number {
    const g = this.granularity;
    if (size === 0) throw vmmError(INVALID_VALUE, call, rangeArgs(address, size), "size is 0");
    if (address % g !== 0 || size % g !== 0) {
      throw vmmError(INVALID_VALUE, call, rangeArgs(address, size), `ptr and size must be multiples of the granularity ${g}`);
    }
    const r = this.containing(address, size);
    if (!r || r.isAlloc) throw vmmError(INVALID_VALUE, call, rangeArgs(address, size), "the range is not inside one reservation");
    if (strict) this.tiling(call, address, size);
    const end = address + size;
    let first = r.floor(address);
    if (first >= r.head && r.mapEnd[first]! > address && r.mapStart[first]! < address) {
      throw vmmError(
        MISUSE_CODES.unmapPartial,
        call,
        rangeArgs(address, size),
        "the range starts inside a mapping (a mapping is unmapped whole)",
      );
    }
    if (first < r.head || r.mapEnd[first]! <= address) first++;
    let last = first - 1;
    while (last + 1 < r.mapStart.length && r.mapStart[last + 1]! < end) last++;
    if (last >= first && r.mapEnd[last]! > end) {
      throw vmmError(
        MISUSE_CODES.unmapPartial,
        call,
        rangeArgs(address, size),
        "the range ends inside a mapping (a mapping is unmapped whole)",
      );
    }
    const n = last - first + 1;
    if (n <= 0) return 0;
    for (let i = first; i <= last; i++) {
      const rec = r.mapRecord[i]!;
      if (onRemoved !== undefined) onRemoved(rec, r.mapEnd[i]! - r.mapStart[i]!);
      rec.mapCount--;
      if (rec.freed) this.refund(rec.size);
    }
    if (last === r.mapStart.length - 1) {
      // Removing the tail (often the whole reservation): truncate, no garbage.
      const keep = first === r.head ? 0 : first;
      if (keep === 0) r.head = 0;
      r.mapStart.length = keep;
      r.mapEnd.length = keep;
      r.mapOffset.length = keep;
      r.mapRecord.length = keep;
      r.mapAccess.length = keep;
    } else if (first === r.head) {
      // Removing from the front (a run unmapped left to right): advance head.
      for (let i = first; i <= last; i++) r.mapRecord[i] = null; // let released records go
      r.head = last + 1;
      if (r.head >= 32 && r.head * 2 >= r.mapStart.length) {
        const dead = r.head;
        r.mapStart.splice(0, dead);
        r.mapEnd.splice(0, dead);
        r.mapOffset.splice(0, dead);
        r.mapRecord.splice(0, dead);
        r.mapAccess.splice(0, dead);
        r.head = 0;
      }
    } else {
      r.mapStart.splice(first, n);
      r.mapEnd.splice(first, n);
      r.mapOffset.splice(first, n);
      r.mapRecord.splice(first, n);
      r.mapAccess.splice(first, n);
    }
    return n;
  }

  /**
   * Checks a cuMemSetAccess (whole mappings, no gaps) and grants access; `perMapping`
   * sees each mapping's size (the sim charges per mapping). Returns the mapping count.
   */
  setAccess(call: string, address: number, size: number, perMapping?: (bytes: number) => void): number {
    const r = this.tiling(call, address, size);
    const first = this.tileFirst;
    const last = this.tileLast;
    for (let i = first; i <= last; i++) {
      r.mapAccess[i] = true;
      if (perMapping !== undefined) perMapping(r.mapEnd[i]! - r.mapStart[i]!);
    }
    return last - first + 1;
  }

  /** Walks the accessible pieces of [address, address+size) for a read/write/memset, or throws. */
  access(call: string, address: number, size: number, visit: SegmentVisitor): void {
    const args = (): string => rangeArgs(address, size);
    if (size === 0) return;
    const r = this.containing(address, size);
    if (!r) throw vmmError(INVALID_VALUE, call, args, "the range is not inside one reservation or allocation");
    const end = address + size;
    let i = r.floor(address);
    let cursor = address;
    while (cursor < end) {
      if (i < r.head || i >= r.mapStart.length || r.mapStart[i]! > cursor || r.mapEnd[i]! <= cursor) {
        throw vmmError(INVALID_VALUE, call, args, `${hex(cursor)} is not mapped`);
      }
      if (!r.mapAccess[i]) throw vmmError(INVALID_VALUE, call, args, `${hex(cursor)} is mapped without access (cuMemSetAccess)`);
      const pieceEnd = Math.min(end, r.mapEnd[i]!);
      visit(r.mapRecord[i]!, r.mapOffset[i]! + (cursor - r.mapStart[i]!), pieceEnd - cursor, cursor - address);
      cursor = pieceEnd;
      i++;
    }
  }

  /** A plain allocation: a reservation with one accessible mapping of `record`. */
  addAllocation(address: number, record: PhysicalRecord): void {
    const r = this.addReservation(address, record.size, true);
    r.mapStart.push(address);
    r.mapEnd.push(address + record.size);
    r.mapOffset.push(0);
    r.mapRecord.push(record);
    r.mapAccess.push(true);
    record.mapCount = 1;
  }

  /** Checks a cuMemFree and removes the allocation, returning its record. */
  freeAllocation(call: string, address: number): PhysicalRecord {
    const r = this.at(address);
    if (!r || !r.isAlloc) throw vmmError(INVALID_VALUE, call, `ptr=${hex(address)}`, "not an address returned by memAlloc");
    this.removeReservation(r);
    const rec = r.mapRecord[0]!;
    rec.mapCount = 0;
    rec.released = true;
    this.refund(rec.size);
    return rec;
  }
}
