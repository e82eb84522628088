import { Block, registerPolicy, type PhysicalChunk, type Policy, type PolicyContext, type PolicyInstance } from "../src/policy-kit.js";

/** Knobs: every key with its default value. */
interface NoCacheOptions extends Record<string, unknown> {
  /** Chunk size in bytes (0 = the driver's granularity). */
  chunkBytes: number;
}

/** No caching at all: each malloc reserves a range and maps fresh chunks; each free gives them back. */
class NoCache implements PolicyInstance {
  private readonly chunk: number;
  constructor(
    private readonly ctx: PolicyContext,
    o: NoCacheOptions,
  ) {
    this.chunk = o.chunkBytes || ctx.device.granularity;
  }

  malloc(size: number, stream: number): Block | null {
    const bytes = Math.max(1, Math.ceil(size / this.chunk)) * this.chunk;
    const chunks: PhysicalChunk[] = [];
    for (let i = 0; i < bytes / this.chunk; i++) {
      const c = this.ctx.createChunk(this.chunk);
      if (c === null) {
        for (const m of chunks) this.ctx.releaseChunk(m); // out of memory: undo, report null
        return null;
      }
      chunks.push(c);
    }
    const va = this.ctx.reserve(bytes);
    this.ctx.mapChunks(va, chunks, stream);
    const b = new Block(va, bytes, stream, null);
    b.data = chunks;
    return b;
  }

  free(b: Block): void {
    const chunks = b.data as PhysicalChunk[];
    this.ctx.unmapChunks(b.addr, chunks, b.stream);
    this.ctx.reserveFree(b.addr, b.size);
    for (const c of chunks) this.ctx.releaseChunk(c);
  }

  emptyCache(): void {} // nothing cached
  teardown(): void {} // nothing held once every block is freed
}

export const noCachePolicy: Policy<NoCacheOptions> = {
  name: "no-cache",
  description: "maps fresh chunks for every allocation and releases them at free",
  knobs: {
    chunkBytes: { type: "bytes", default: 0, description: "bytes of one chunk (0 = the device's granularity)" },
  },
  create: (ctx, o) => new NoCache(ctx, o),
};

registerPolicy(noCachePolicy);
