import { DEFAULT_ALLOCATOR_SETTINGS, type AllocatorSettings } from "@gmlake/trace";
import { describe, type PyValue } from "./pickle-vm.js";
import { SnapshotError } from "./snapshot-error.js";
import type { Annotation, BlockState, SegmentState } from "./snapshot.js";

/** Converts the small, generically-read parts of a snapshot (segments, settings, annotations). */
export class ShapeReader {
  /** Integer fields (segments, annotations, settings) a double cannot hold exactly. */
  inexactIntegers = 0;

  constructor(private readonly source: string) {}

  private bad(where: string, detail: string): never {
    throw new SnapshotError("BAD_SHAPE", this.source, `${where} ${detail}`);
  }

  private dict(v: PyValue, where: string): Map<string, PyValue> {
    if (!(v instanceof Map)) this.bad(where, `is ${describe(v)}, expected a dict`);
    return v;
  }

  private list(v: PyValue, where: string): PyValue[] {
    if (!Array.isArray(v)) this.bad(where, `is ${describe(v)}, expected a list`);
    return v;
  }

  private num(d: Map<string, PyValue>, key: string, where: string, dflt?: number): number {
    const v = d.get(key);
    if (typeof v === "number") return v;
    if (typeof v === "bigint") {
      this.inexactIntegers++;
      return Number(v);
    }
    if (typeof v === "boolean") return v ? 1 : 0;
    if (v === undefined && dflt !== undefined) return dflt;
    return this.bad(`${where}.${key}`, v === undefined ? "is missing" : `is ${describe(v)}, expected a number`);
  }

  /**
   * An integer field in [0, max): what c10 records as size_t / uintptr_t / a device index.
   * NaN, fractions, negatives and out-of-range values are BAD_VALUE errors naming the field.
   */
  private int(d: Map<string, PyValue>, key: string, where: string, max: number, what: string, dflt?: number): number {
    const v = this.num(d, key, where, dflt);
    if (!(v >= 0 && v < max && Math.floor(v) === v)) {
      throw new SnapshotError("BAD_VALUE", this.source, `${where}.${key} is ${v}: ${what}`);
    }
    return v;
  }

  private bytes(d: Map<string, PyValue>, key: string, where: string, dflt?: number): number {
    return this.int(d, key, where, 2 ** 53, "a byte count must be an integer in [0, 2^53)", dflt);
  }

  private addr(d: Map<string, PyValue>, key: string, where: string, dflt?: number): number {
    return this.int(d, key, where, 2 ** 53, "an address must be an integer in [0, 2^53)", dflt);
  }

  private device(d: Map<string, PyValue>, where: string): number {
    return this.int(d, "device", where, 256, "a device index must be an integer in [0, 256)", 0);
  }

  private str(d: Map<string, PyValue>, key: string, dflt: string): string {
    const v = d.get(key);
    return typeof v === "string" ? v : dflt;
  }

  segments(v: PyValue): SegmentState[] {
    if (v === undefined) return [];
    const out: SegmentState[] = [];
    const list = this.list(v, "segments");
    for (let i = 0; i < list.length; i++) {
      const where = `segments[${i}]`;
      const s = this.dict(list[i], where);
      const blocks: BlockState[] = [];
      const bl = s.get("blocks");
      if (bl !== undefined) {
        const bs = this.list(bl, `${where}.blocks`);
        for (let j = 0; j < bs.length; j++) {
          const bw = `${where}.blocks[${j}]`;
          const b = this.dict(bs[j], bw);
          blocks.push({
            address: this.addr(b, "address", bw),
            size: this.bytes(b, "size", bw),
            requestedSize: this.bytes(b, "requested_size", bw, 0),
            state: this.str(b, "state", "inactive"),
          });
        }
      }
      const pool = s.get("segment_pool_id");
      out.push({
        device: this.device(s, where),
        address: this.addr(s, "address", where),
        totalSize: this.bytes(s, "total_size", where),
        allocatedSize: this.bytes(s, "allocated_size", where, 0),
        activeSize: this.bytes(s, "active_size", where, 0),
        requestedSize: this.bytes(s, "requested_size", where, 0),
        stream: this.int(s, "stream", where, 2 ** 53, "a cudaStream_t must be an integer in [0, 2^53)", 0),
        segmentType: this.str(s, "segment_type", "large"),
        isExpandable: s.get("is_expandable") === true,
        poolId: Array.isArray(pool) && pool.length === 2 && typeof pool[0] === "number" && typeof pool[1] === "number" ? [pool[0], pool[1]] : null,
        blocks,
      });
    }
    this.checkDisjoint(out);
    return out;
  }

  /** Segments live at one time on one device cannot share a byte (the pool tagging relies on it). */
  private checkDisjoint(segs: readonly SegmentState[]): void {
    const order = segs.map((_, i) => i).sort((x, y) => segs[x].device - segs[y].device || segs[x].address - segs[y].address);
    for (let k = 1; k < order.length; k++) {
      const p = segs[order[k - 1]];
      const c = segs[order[k]];
      if (p.device === c.device && c.address < p.address + p.totalSize) {
        throw new SnapshotError("BAD_VALUE", this.source, `segments[${order[k]}] (address ${c.address}) overlaps segments[${order[k - 1]}] (address ${p.address}, ${p.totalSize} bytes) on device ${c.device}`);
      }
    }
  }

  annotations(v: PyValue): Annotation[] {
    if (v === undefined) return [];
    const list = this.list(v, "external_annotations");
    return list.map((a, i) => {
      const where = `external_annotations[${i}]`;
      const d = this.dict(a, where);
      return {
        stage: this.str(d, "stage", ""),
        name: this.str(d, "name", ""),
        device: this.device(d, where),
        timeUs: this.num(d, "time_us", where, 0),
      };
    });
  }

  allocatorSettings(v: PyValue): AllocatorSettings {
    if (v === undefined) return { ...DEFAULT_ALLOCATOR_SETTINGS, roundupPower2Divisions: [...DEFAULT_ALLOCATOR_SETTINGS.roundupPower2Divisions], raw: {} };
    const d = this.dict(v, "allocator_settings");
    const where = "allocator_settings";
    const raw = toPlain(d) as Record<string, unknown>;
    const allocConf = this.str(d, "PYTORCH_CUDA_ALLOC_CONF", "");
    const msRaw = this.num(d, "max_split_size", where, -1);
    const gc = this.num(d, "garbage_collection_threshold", where, 0);
    // c10 records roundup_power2_divisions as {"1": d0, "2": d1, "4": d2, ... "32768": d15}:
    // key 2^i (MiB) holds the divisions of interval i, i.e. sizes with log2(size) - 20 = i
    // (index 0 also covers sizes below 1 MiB, 15 everything from 32 GiB up).
    const divisions = new Array<number>(16).fill(0);
    const rp = d.get("roundup_power2_divisions");
    if (rp instanceof Map) {
      for (const [k, val] of rp) {
        const key = Number(k);
        const i = Math.log2(key);
        if (Number.isInteger(i) && i >= 0 && i < 16 && typeof val === "number") divisions[i] = val;
      }
    } else if (Array.isArray(rp)) {
      for (let i = 0; i < Math.min(16, rp.length); i++) if (typeof rp[i] === "number") divisions[i] = rp[i] as number;
    }
    const conf = parseAllocConf(allocConf);
    let maxNonSplitRounding = DEFAULT_ALLOCATOR_SETTINGS.maxNonSplitRounding;
    const mnsr = d.get("max_non_split_rounding");
    if (typeof mnsr === "number") maxNonSplitRounding = mnsr;
    else if (conf.max_non_split_rounding_mb !== undefined && /^\d+$/.test(conf.max_non_split_rounding_mb)) maxNonSplitRounding = Number(conf.max_non_split_rounding_mb) * 1024 * 1024;
    const es = d.get("expandable_segments");
    return {
      allocConf,
      maxSplitSize: msRaw < 0 ? null : msRaw,
      garbageCollectionThreshold: gc,
      expandableSegments: typeof es === "boolean" ? es : conf.expandable_segments?.toLowerCase() === "true",
      roundupPower2Divisions: divisions,
      maxNonSplitRounding,
      raw,
    };
  }
}

/** PYTORCH_CUDA_ALLOC_CONF "k:v,k:v" (lists in brackets kept whole). */
export function parseAllocConf(conf: string): Record<string, string> {
  const out: Record<string, string> = Object.create(null) as Record<string, string>;
  let depth = 0;
  let start = 0;
  const parts: string[] = [];
  for (let i = 0; i <= conf.length; i++) {
    const c = conf[i];
    if (c === "[") depth++;
    else if (c === "]") depth--;
    else if ((c === "," && depth === 0) || i === conf.length) {
      parts.push(conf.slice(start, i));
      start = i + 1;
    }
  }
  for (const p of parts) {
    const j = p.indexOf(":");
    if (j > 0) out[p.slice(0, j).trim()] = p.slice(j + 1).trim();
  }
  return out;
}

/**
 * Generic pickle values -> JSON-like plain values (Maps become objects). Shared and cyclic
 * references (possible through the memo) are expanded at most `budget` nodes in all and
 * cut at depth 32, so a hostile pickle cannot blow this up.
 */
export function toPlain(v: PyValue, budget = { left: 100_000 }, depth = 0): unknown {
  if (--budget.left < 0 || depth > 32) return null;
  if (v instanceof Map) {
    const o: Record<string, unknown> = {};
    for (const [k, x] of v) Object.defineProperty(o, k, { value: toPlain(x, budget, depth + 1), enumerable: true, writable: true, configurable: true });
    return o;
  }
  if (Array.isArray(v)) {
    const out: unknown[] = [];
    for (const x of v) {
      if (budget.left < 0) break;
      out.push(toPlain(x, budget, depth + 1));
    }
    return out;
  }
  return v;
}
