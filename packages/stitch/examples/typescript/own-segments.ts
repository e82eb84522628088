import { Block, registerPolicy, roundSize, type PolicyContext, type PolicyInstance } from "@gmlake/stitch/policy";

/** The knobs as create() receives them: an interface is fine. */
interface Knobs {
  slackBytes: number;
}

/** Each allocation is a cudaMalloc'd segment of its own; its free gives the segment back. */
class OwnSegments implements PolicyInstance {
  private readonly ctx: PolicyContext;
  private readonly slack: number;

  constructor(ctx: PolicyContext, knobs: Knobs) {
    this.ctx = ctx;
    this.slack = knobs.slackBytes;
  }

  malloc(size: number, stream: number): Block | null {
    const bytes = roundSize(size) + this.slack;
    const addr = this.ctx.segmentAlloc(bytes, stream);
    return addr < 0 ? null : new Block(addr, bytes, stream, null); // -1: out of memory
  }

  free(b: Block): void {
    this.ctx.segmentFree(b.addr, b.size, b.stream);
  }

  emptyCache(): void {} // nothing cached
  teardown(): void {} // nothing held once every block is freed
}

export default registerPolicy<Knobs>({
  name: "own-segments",
  description: "one cudaMalloc segment per allocation, freed at its free",
  knobs: {
    slackBytes: { type: "bytes", default: 0, multipleOf: 512, description: "bytes added to each segment" },
  },
  create: (ctx, knobs) => new OwnSegments(ctx, knobs),
});
