import type { VmmDriver } from "@gmlake/vmm";
import type { Block } from "./block.js";

const STAMP = 8;
/**
 * Full mode stamps and checks a block a window at a time (each window its own pattern,
 * salted by its offset): a 4 GiB block then costs 2 x 8 MiB of buffers, not 8 GiB on top
 * of the block itself.
 */
const WINDOW = 8 * 1024 * 1024;

/**
 * Proves that bytes land where the allocator says: each allocation is stamped with a
 * pattern derived from its id (its first and last bytes and both sides of every stitch
 * seam, or every byte in full mode) and checked when it is freed. A mismatch means two
 * live blocks shared memory or a mapping pointed at the wrong chunk.
 */
export class IntegrityChecker {
  private readonly driver: VmmDriver;
  private readonly full: boolean;
  errors = 0;
  checked = 0;
  readonly messages: string[] = [];

  constructor(driver: VmmDriver, full: boolean) {
    this.driver = driver;
    this.full = full;
  }

  private static pattern(id: number, n: number, salt: number): Uint8Array {
    const out = new Uint8Array(n);
    // xorshift32, a whole word per step (full mode stamps gigabytes: byte steps cost 4x)
    let x = (Math.imul(id, 0x9e3779b1) ^ Math.imul(salt + 1, 0x85ebca6b)) | 1;
    const words = new Uint32Array(out.buffer, 0, n >>> 2);
    for (let i = 0; i < words.length; i++) {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      words[i] = x;
    }
    for (let i = words.length * 4; i < n; i++) {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      out[i] = x & 0xff;
    }
    return out;
  }

  /** Offsets (from block start) of the stamped ranges, each STAMP bytes or less. */
  private spots(b: Block): number[] {
    const n = b.size;
    const raw = [0, n - STAMP];
    if (b.seams) for (const seam of b.seams) raw.push(seam - STAMP, seam);
    raw.sort((x, y) => x - y);
    // non-overlapping, inside the block
    const out: number[] = [];
    let next = 0;
    for (const o of raw) {
      if (o >= next && o < n) {
        out.push(o);
        next = o + STAMP;
      }
    }
    return out;
  }

  stamp(b: Block): void {
    if (b.size === 0) return;
    if (this.full) {
      for (let off = 0; off < b.size; off += WINDOW) {
        this.driver.write(b.addr + off, IntegrityChecker.pattern(b.id, Math.min(WINDOW, b.size - off), off));
      }
      return;
    }
    for (const off of this.spots(b)) {
      this.driver.write(b.addr + off, IntegrityChecker.pattern(b.id, Math.min(STAMP, b.size - off), off));
    }
  }

  /** Returns true when the block still holds its stamp. */
  check(b: Block): boolean {
    if (b.size === 0) return true;
    this.checked++;
    let ok = true;
    if (this.full) {
      for (let off = 0; off < b.size && ok; off += WINDOW) {
        const n = Math.min(WINDOW, b.size - off);
        ok = equal(this.driver.read(b.addr + off, n), IntegrityChecker.pattern(b.id, n, off));
      }
    } else {
      for (const off of this.spots(b)) {
        const want = IntegrityChecker.pattern(b.id, Math.min(STAMP, b.size - off), off);
        if (!equal(this.driver.read(b.addr + off, want.length), want)) ok = false;
      }
    }
    if (!ok) {
      this.errors++;
      if (this.messages.length < 20) this.messages.push(`allocation ${b.id} at 0x${b.addr.toString(16)} (${b.size} B) lost its stamp`);
    }
    return ok;
  }
}

function equal(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  return Buffer.from(a.buffer, a.byteOffset, a.length).equals(b); // memcmp
}
