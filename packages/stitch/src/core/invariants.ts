import type { Block } from "./block.js";
import type { AllocatorContext } from "./context.js";
import { StitchError } from "./errors.js";
import type { Policy, PolicyInstance } from "./policy.js";
import type { AllocatorStats } from "./stats.js";

/** What the checker reads of its allocator (engine.ts's Allocator, which makes the checker: named here, not imported). */
interface Checked {
  readonly policy: Policy;
  readonly instance: PolicyInstance;
  readonly ctx: AllocatorContext;
  readonly stats: AllocatorStats;
}

function fail(msg: string): never {
  throw new StitchError("INVARIANT", msg);
}

const hex = (a: number) => "0x" + a.toString(16);

/**
 * Checks, while an allocator runs, what must hold whatever the policy:
 * - no two live blocks share an address range (at every malloc, against an address-ordered list);
 * - no two live blocks share a physical byte (full check: each live block's range is
 *   translated through the chunk pool's mappings; memAlloc'd memory is its own physical);
 * - reserved = bytes of live handles + live memAlloc'd segments;
 * - the policy's own check() (pool order, block chains ...).
 */
export class InvariantChecker {
  private readonly a: Checked;
  private readonly period: number;
  private ops = 0;
  /** Live blocks sorted by address. */
  private readonly live: Block[] = [];

  constructor(a: Checked, period: number) {
    this.a = a;
    this.period = period;
  }

  private indexOf(addr: number): number {
    const live = this.live;
    let lo = 0;
    let hi = live.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (live[mid]!.addr < addr) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  onMalloc(b: Block): void {
    if (!(b.size > 0) || b.size < b.requested) fail(`block at ${hex(b.addr)} of ${b.size} B serves a ${b.requested} B request`);
    const i = this.indexOf(b.addr);
    const prev = i > 0 ? this.live[i - 1]! : null;
    const next = i < this.live.length ? this.live[i]! : null;
    if (prev !== null && prev.addr + prev.size > b.addr) fail(`live blocks overlap: ${hex(prev.addr)}+${prev.size} and ${hex(b.addr)}+${b.size}`);
    if (next !== null && b.addr + b.size > next.addr) fail(`live blocks overlap: ${hex(b.addr)}+${b.size} and ${hex(next.addr)}+${next.size}`);
    this.live.splice(i, 0, b);
    this.tick();
  }

  onFree(b: Block): void {
    const i = this.indexOf(b.addr);
    if (this.live[i] !== b) fail(`freeing a block at ${hex(b.addr)} that is not live`);
    this.live.splice(i, 1);
    this.tick();
  }

  private tick(): void {
    if (this.period > 0 && ++this.ops % this.period === 0) this.full();
  }

  /** Every check, now. */
  full(): void {
    const ctx = this.a.ctx;
    const st = this.a.stats;
    const held = ctx.chunks.liveBytes + ctx.plainBytes;
    if (st.reservedBytes !== held) {
      fail(`reserved ${st.reservedBytes} B != live handles ${ctx.chunks.liveBytes} B + segments ${ctx.plainBytes} B`);
    }
    let allocated = 0;
    let active = 0;
    for (const b of this.live) {
      active += b.size;
      if (!b.pendingFree) allocated += b.size;
    }
    if (allocated !== st.allocatedBytes || active !== st.activeBytes) {
      fail(`allocated/active ${st.allocatedBytes}/${st.activeBytes} B != live blocks ${allocated}/${active} B`);
    }
    this.physical();
    const msg = this.a.instance.check?.() ?? null;
    if (msg !== null) fail(`${this.a.policy.name}: ${msg}`);
  }

  /** No physical byte in two live blocks. Pieces are (chunk id or -1 for plain memory, offset, length). */
  private physical(): void {
    const chunks = this.a.ctx.chunks;
    if (chunks.mappingCount === 0) return; // only plain segments: virtual = physical, checked by address
    const keys: number[] = [];
    const ends: number[] = [];
    const owner: Block[] = [];
    const plain = this.a.ctx.plainSegments.size > 0;
    for (const b of this.live) {
      let a = b.addr;
      const end = b.addr + b.size;
      while (a < end) {
        const t = chunks.translate(a);
        if (t === null) {
          // plain memAlloc'd memory: its virtual range is its physical one (checked at malloc)
          if (!plain) fail(`live block ${hex(b.addr)}+${b.size} touches unmapped address ${hex(a)}`);
          break;
        }
        const len = Math.min(t.chunk.size - t.offset, end - a);
        // (chunk id, offset / 512) as one sortable number: ids < 2^21, chunks < 2 TiB
        keys.push(t.chunk.id * 2 ** 32 + t.offset / 512);
        ends.push(t.chunk.id * 2 ** 32 + (t.offset + len) / 512);
        owner.push(b);
        a += len;
      }
    }
    const order = keys.map((_, i) => i).sort((x, y) => keys[x]! - keys[y]!);
    for (let j = 1; j < order.length; j++) {
      const p = order[j - 1]!;
      const q = order[j]!;
      if (ends[p]! > keys[q]!) fail(`live blocks ${hex(owner[p]!.addr)} and ${hex(owner[q]!.addr)} share physical memory`);
    }
  }
}
