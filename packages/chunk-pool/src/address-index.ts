/**
 * Mapping start address -> chunk id: the pool's one global look-up, on every map and unmap.
 *
 * A JS Map of tens of thousands of addresses churned by map/unmap costs about 1 us per
 * insert in a replay: addresses above 2^31 are boxed keys, and deleted entries pile up
 * until the whole table is rehashed into a fresh (large-object) allocation. This is an
 * open-addressing table in two typed arrays instead: linear probing, Fibonacci hashing
 * of the granule number, deletion by backward shift (no tombstones, so no rehash on
 * churn), doubled when half full. Nothing is allocated per call.
 *
 * Keys the table cannot hold (not a non-negative safe integer; a driver refuses those
 * before the pool records them, but a lenient one may not) go to a side Map, so the
 * index answers exactly as a Map would for any number.
 */
const EMPTY = -1;
const MIN_BITS = 10;

export class AddressIndex {
  private bits = MIN_BITS;
  private mask = (1 << MIN_BITS) - 1;
  private keys = new Float64Array(1 << MIN_BITS).fill(EMPTY);
  private vals = new Int32Array(1 << MIN_BITS);
  private count = 0;
  /** Keys that are not non-negative safe integers (never in practice): Map semantics. */
  private odd: Map<number, number> | null = null;

  /** 1 / granularity: addresses are multiples of it in practice, so hashing the quotient spreads them. */
  private readonly perGranule: number;

  constructor(granularity: number) {
    this.perGranule = 1 / granularity;
  }

  get size(): number {
    return this.count + (this.odd?.size ?? 0);
  }

  private static fits(address: number): boolean {
    return Number.isSafeInteger(address) && address >= 0;
  }

  /** Home slot of a key: the top `bits` of (granule number * 2^32 / phi). */
  private home(address: number): number {
    // A multiply, not a division (exact for the power-of-two granularities drivers have;
    // for any other, still the same slot for the same key, which is all a hash needs).
    const q = address * this.perGranule;
    const mixed = (q | 0) ^ ((q / 4294967296) | 0);
    return Math.imul(mixed, 0x9e3779b1) >>> (32 - this.bits);
  }

  /** The slot holding `address`, or -1. */
  private slotOf(address: number): number {
    const keys = this.keys;
    const mask = this.mask;
    for (let i = this.home(address); ; i = (i + 1) & mask) {
      const k = keys[i]!;
      if (k === address) return i;
      if (k === EMPTY) return -1;
    }
  }

  /** The chunk id mapped at `address`, or -1. */
  get(address: number): number {
    if (!AddressIndex.fits(address)) return this.odd?.get(address) ?? -1;
    const i = this.slotOf(address);
    return i < 0 ? -1 : this.vals[i]!;
  }

  has(address: number): boolean {
    return this.get(address) >= 0;
  }

  /** Records `address` -> `id` (`id` >= 0); replaces an existing entry. */
  set(address: number, id: number): void {
    if (!AddressIndex.fits(address)) {
      (this.odd ??= new Map()).set(address, id);
      return;
    }
    const keys = this.keys;
    const mask = this.mask;
    let i = this.home(address);
    for (; keys[i] !== EMPTY; i = (i + 1) & mask) {
      if (keys[i] === address) {
        this.vals[i] = id;
        return;
      }
    }
    keys[i] = address;
    this.vals[i] = id;
    if (++this.count * 2 > keys.length) this.grow();
  }

  /** Removes `address`; returns whether it was there. */
  delete(address: number): boolean {
    if (!AddressIndex.fits(address)) return this.odd?.delete(address) ?? false;
    let hole = this.slotOf(address);
    if (hole < 0) return false;
    // Backward shift: pull later keys of the probe run into the hole when the hole lies
    // on their probe path (between their home slot and where they sit, cyclically).
    const keys = this.keys;
    const vals = this.vals;
    const mask = this.mask;
    for (let j = (hole + 1) & mask; keys[j] !== EMPTY; j = (j + 1) & mask) {
      const h = this.home(keys[j]!);
      if (((j - h) & mask) >= ((j - hole) & mask)) {
        keys[hole] = keys[j]!;
        vals[hole] = vals[j]!;
        hole = j;
      }
    }
    keys[hole] = EMPTY;
    this.count--;
    return true;
  }

  /** Every key (unordered). */
  addresses(): number[] {
    const out: number[] = [];
    const keys = this.keys;
    for (let i = 0; i < keys.length; i++) if (keys[i] !== EMPTY) out.push(keys[i]!);
    if (this.odd) for (const k of this.odd.keys()) out.push(k);
    return out;
  }

  private grow(): void {
    const oldKeys = this.keys;
    const oldVals = this.vals;
    this.bits++;
    this.mask = (1 << this.bits) - 1;
    this.keys = new Float64Array(1 << this.bits).fill(EMPTY);
    this.vals = new Int32Array(1 << this.bits);
    const keys = this.keys;
    const mask = this.mask;
    for (let s = 0; s < oldKeys.length; s++) {
      const k = oldKeys[s]!;
      if (k === EMPTY) continue;
      let i = this.home(k);
      while (keys[i] !== EMPTY) i = (i + 1) & mask;
      keys[i] = k;
      this.vals[i] = oldVals[s]!;
    }
  }
}
