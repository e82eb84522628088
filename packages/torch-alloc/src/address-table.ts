/**
 * Live blocks by address: the one lookup of every free. Written here rather than a Map
 * because it is on the hot path of every alloc+free pair: a Map keyed by addresses (numbers
 * above 2^31, boxed) costs about 60 ns per set+get+delete in the embedded Node 18 on the
 * 2-core VM, this table 32 ns (docs/notebook/2026-12-01-per-call-cost-cpu.md). Open addressing
 * with linear probing over a Float64Array of keys (0 = an empty slot: no allocator hands
 * out address 0), deletion by backward shift (no tombstones), at most half full.
 */
export class AddressTable<V> {
  private keys: Float64Array;
  private vals: (V | null)[];
  private mask: number;
  /** 32 - log2(capacity): a slot is the top bits of the multiplicative hash (its low bits repeat for aligned addresses). */
  private shift: number;
  private count = 0;

  constructor(capacity = 1024) {
    let c = 16;
    while (c < capacity) c *= 2;
    this.keys = new Float64Array(c);
    this.vals = new Array<V | null>(c).fill(null);
    this.mask = c - 1;
    this.shift = 32 - Math.log2(c);
  }

  get size(): number {
    return this.count;
  }

  /**
   * The home slot: Fibonacci hashing of the address's 512-byte units, the high word
   * folded in (ToInt32 of the quotient keeps its low 32 bits).
   */
  private home(addr: number): number {
    const q = addr / 512;
    return Math.imul((q | 0) ^ Math.imul((q / 4294967296) | 0, 0x85ebca6b), 0x9e3779b1) >>> this.shift;
  }

  get(addr: number): V | undefined {
    const i = this.slotOf(addr);
    return i < 0 ? undefined : this.vals[i]!;
  }

  set(addr: number, v: V): void {
    if (!(addr > 0)) throw new RangeError(`AddressTable: address ${addr} (addresses are > 0)`);
    if ((this.count + 1) * 2 > this.mask + 1) this.grow();
    const k = this.keys;
    const m = this.mask;
    let i = this.home(addr);
    for (; ; i = (i + 1) & m) {
      const x = k[i]!;
      if (x === addr) {
        this.vals[i] = v;
        return;
      }
      if (x === 0) break;
    }
    k[i] = addr;
    this.vals[i] = v;
    this.count++;
  }

  delete(addr: number): boolean {
    const i = this.slotOf(addr);
    if (i < 0) return false;
    this.removeSlot(i);
    return true;
  }

  /** get and delete in one probe (every free): the value, or undefined (nothing changes) when absent. */
  take(addr: number): V | undefined {
    const i = this.slotOf(addr);
    if (i < 0) return undefined;
    const v = this.vals[i]!;
    this.removeSlot(i);
    return v;
  }

  /** The slot holding addr, or -1. */
  private slotOf(addr: number): number {
    const k = this.keys;
    const m = this.mask;
    for (let i = this.home(addr); ; i = (i + 1) & m) {
      const x = k[i]!;
      if (x === 0) return -1;
      if (x === addr) return i;
    }
  }

  private removeSlot(i: number): void {
    const k = this.keys;
    const m = this.mask;
    // Backward shift: each later entry of the run that may live at i (its home is not in (i, j]) moves there.
    const vals = this.vals;
    for (let j = (i + 1) & m; ; j = (j + 1) & m) {
      const x = k[j]!;
      if (x === 0) break;
      const h = this.home(x);
      if (i <= j ? h <= i || h > j : h <= i && h > j) {
        k[i] = x;
        vals[i] = vals[j]!;
        i = j;
      }
    }
    k[i] = 0;
    vals[i] = null;
    this.count--;
  }

  clear(): void {
    this.keys.fill(0);
    this.vals.fill(null);
    this.count = 0;
  }

  private grow(): void {
    const ok = this.keys;
    const ov = this.vals;
    const c = ok.length * 2;
    this.keys = new Float64Array(c);
    this.vals = new Array<V | null>(c).fill(null);
    this.mask = c - 1;
    this.shift = 32 - Math.log2(c);
    this.count = 0;
    for (let i = 0; i < ok.length; i++) if (ok[i] !== 0) this.set(ok[i]!, ov[i]!);
  }
}
