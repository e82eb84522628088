/**
 * The per-call benchmark's alloc+free pattern (python/gmlake_torch/pair_bench.cc, the
 * H200's in-process benchmark): 4096 sizes 512 B << 0..17 (up to 64 MiB) from a fixed
 * xorshift, a window of 64 live blocks replaced in turn, one stream. Driven through the
 * bridge's `call` by bench/live-pair.mjs (Node, no native layer) and by the bridge's
 * OP_BENCH_PAIRS (the same loop inside the embedded Node: threading_bench's `js_pair`).
 */
import { OP_ALLOC, OP_FREE } from "./ops.js";

export type CallFn = (op: number, a: number, b: number, c: number) => number;

export class PairPattern {
  private readonly sizes = new Float64Array(4096);
  private readonly addr = new Float64Array(64);
  private readonly sz = new Float64Array(64);
  private at = 0;
  private filled = false;

  constructor(
    private readonly call: CallFn,
    private readonly stream: number,
    private readonly device = 0,
  ) {
    let x = 0x2545f491;
    for (let i = 0; i < this.sizes.length; i++) {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      this.sizes[i] = 512 * 2 ** ((x >>> 0) % 18);
    }
  }

  /** The window of 64 live blocks. */
  fill(): void {
    if (this.filled) return;
    for (let i = 0; i < 64; i++) {
      this.sz[i] = this.sizes[i]!;
      this.addr[i] = this.alloc(this.sz[i]!);
    }
    this.filled = true;
  }

  private alloc(size: number): number {
    const p = this.call(OP_ALLOC, size, this.device, this.stream);
    if (p < 0) throw new Error(`pair pattern: alloc(${size}) failed (status ${p})`);
    return p;
  }

  /** n alloc+free pairs: a new block replaces the oldest of the window. */
  run(n: number): void {
    this.fill();
    const { sizes, addr, sz, call, stream } = this;
    for (let j = 0; j < n; j++, this.at++) {
      const k = this.at & 63;
      const s = sizes[this.at & 4095]!;
      const p = this.alloc(s);
      if (call(OP_FREE, addr[k]!, sz[k]!, stream) !== 0) throw new Error(`pair pattern: free(0x${addr[k]!.toString(16)}) failed`);
      addr[k] = p;
      sz[k] = s;
    }
  }

  /** Nanoseconds per pair over n pairs (after the window is filled). */
  time(n: number): number {
    this.fill();
    const t0 = process.hrtime.bigint();
    this.run(n);
    return Number(process.hrtime.bigint() - t0) / n;
  }

  /** Frees the window. */
  drain(): void {
    if (!this.filled) return;
    for (let i = 0; i < 64; i++) this.call(OP_FREE, this.addr[i]!, this.sz[i]!, this.stream);
    this.filled = false;
  }
}
