import { Block, registerPolicy, roundSize } from "@gmlake/stitch/policy";

/** Each allocation maps fresh physical chunks into a range of its own; its free gives them back. */
class FreshChunks {
  constructor(ctx, knobs) {
    this.ctx = ctx;
    this.chunk = knobs.chunkBytes || ctx.device.granularity;
  }

  malloc(size, stream) {
    const bytes = Math.ceil(roundSize(size) / this.chunk) * this.chunk;
    const chunks = [];
    while (chunks.length * this.chunk < bytes) {
      const c = this.ctx.createChunk(this.chunk);
      if (c === null) {
        for (const m of chunks) this.ctx.releaseChunk(m); // out of memory: undo, answer null
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

  free(b) {
    this.ctx.unmapChunks(b.addr, b.data, b.stream);
    this.ctx.reserveFree(b.addr, b.size);
    for (const c of b.data) this.ctx.releaseChunk(c);
  }

  emptyCache() {} // nothing cached
  teardown() {} // nothing held once every block is freed
}

export default registerPolicy({
  name: "fresh-chunks",
  description: "maps fresh chunks for every allocation and releases them at its free",
  knobs: {
    chunkBytes: { type: "bytes", default: 0, description: "bytes of one chunk (0 = the device granularity)" },
  },
  create: (ctx, knobs) => new FreshChunks(ctx, knobs),
});
