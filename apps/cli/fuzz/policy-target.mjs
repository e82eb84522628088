// The fuzz target of outside policies (engine.mjs --target policy-target.mjs): bytes -> a
// generated policy module (one of five bases: fresh chunks, or a copy of a built-in under
// another name, so guarded as a module's would be; with up to three bugs, each set off at
// its n-th call) and a program of allocations, frees, empty_cache and the rest, run either
// live (the Allocator that @gmlake/torch-alloc drives) or as a replay of a trace.
//
// A run may end in a PolicyFault (one line, naming the policy); anything else thrown is a
// finding, and so is a wrong result that no error announced: live, every block handed out is
// checked from outside the engine (a Block of whole numbers, at least the request, 512 B
// aligned, apart from every other live block, and tags written through the driver at its
// two ends that read back intact at its free: shared or unmapped memory cannot hide), and
// until a fault the engine's books must equal ours; a replay that ends must report peaks
// that add up (requested = the trace's own peak, allocated >= requested, reserved >=
// allocated, utilization <= 1) and no integrity error.
const { Allocator, Block, PolicyFault, getPolicy, replay } = await import("@gmlake/stitch");
const { SimDriver } = await import("@gmlake/vmm");
const { EventKind, EventLog } = await import("@gmlake/trace");

const MiB = 1 << 20;
const ALIGN = 512;
const MAX_OPS = 160;

/** Each allocation maps fresh chunks into a range of its own (the README's example policy). */
const fresh = {
  name: "fresh",
  description: "fresh chunks per allocation",
  knobs: {},
  create: (ctx) => ({
    malloc(size, stream) {
      const g = ctx.device.granularity;
      const bytes = Math.max(g, Math.ceil(size / g) * g);
      const chunks = [];
      while (chunks.length * g < bytes) {
        const c = ctx.createChunk(g);
        if (c === null) {
          for (const m of chunks) ctx.releaseChunk(m);
          return null;
        }
        chunks.push(c);
      }
      const va = ctx.reserve(bytes);
      ctx.mapChunks(va, chunks, stream);
      const b = new Block(va, bytes, stream, null);
      b.data = chunks;
      return b;
    },
    free(b) {
      ctx.unmapChunks(b.addr, b.data, b.stream);
      ctx.reserveFree(b.addr, b.size);
      for (const c of b.data) ctx.releaseChunk(c);
    },
    emptyCache() {},
    teardown() {},
  }),
};
const BASES = [fresh, ...["caching", "expandable", "gmlake", "vms"].map((n) => getPolicy(n))];

/** The chunk mapped under a block's first byte, or null. */
const chunkUnder = (ctx, b) => (b === null ? null : ctx.chunkMappedAt(b.addr));

/**
 * Bugs a module can have: each replaces one of the instance's calls and misbehaves at that
 * call's n-th time (p: a parameter byte). `last` is the last block malloc returned.
 */
const BUGS = {
  shift: { on: "malloc", bad: (b, p) => Object.assign(b, { addr: b.addr + ALIGN * (1 + (p % 7)) }) },
  oddShift: { on: "malloc", bad: (b, p) => Object.assign(b, { addr: b.addr + 1 + (p % 255) }) },
  shrink: { on: "malloc", bad: (b, p) => Object.assign(b, { size: b.size - ALIGN * (1 + (p % 9)) }) },
  grow: { on: "malloc", bad: (b, p) => Object.assign(b, { size: b.size + ALIGN * (1 + p) * 8 }) },
  nan: { on: "malloc", bad: (b, p) => Object.assign(b, p & 1 ? { size: NaN } : { addr: Infinity }) },
  negative: { on: "malloc", bad: (b, p) => Object.assign(b, p & 1 ? { size: -4096 } : { addr: -ALIGN }) },
  // a copy: a policy whose own block says 2^53 B sizes its books by it (a heap blow-up, the policy thread's to stop)
  huge: { on: "malloc", bad: (b) => Object.assign(new Block(b.addr, 2 ** 53, b.stream, null), { data: b.data }) },
  madeUp: { on: "malloc", bad: (b, p) => Object.assign(b, { addr: ALIGN * (8 + p) }) },
  plain: { on: "malloc", bad: (b) => ({ ...b }) },
  notObject: { on: "malloc", bad: (b, p) => [undefined, 0, "block", b.addr, true][p % 5] },
  otherStream: { on: "malloc", bad: (b, p) => Object.assign(b, { stream: b.stream === 0 ? 7 + (p % 3) : 0 }) },
  frozen: { on: "malloc", bad: (b) => Object.freeze(b) },
  twice: { on: "malloc", bad: (b, _p, s) => (s.last !== null && s.last.allocated ? s.last : b) },
  stale: { on: "malloc", bad: (b, _p, s) => s.freed ?? b },
  overlapHalf: {
    on: "malloc",
    bad: (b, _p, s) => (s.last !== null && s.last.allocated ? new Block(s.last.addr + Math.floor(s.last.size / 2 / ALIGN) * ALIGN, b.size, b.stream, null) : b),
  },
  alias: {
    // maps the chunk under the last live block again and hands that out
    on: "malloc",
    bad: (b, _p, s, ctx) => {
      const c = s.last !== null && s.last.allocated ? chunkUnder(ctx, s.last) : null;
      if (c === null) return b;
      const va = ctx.reserve(c.size);
      ctx.mapChunks(va, [c], b.stream);
      return new Block(va, Math.min(c.size, b.size), b.stream, null);
    },
  },
  mutateLive: {
    on: "malloc",
    bad: (b, p, s) => {
      const l = s.last;
      if (l !== null && l.allocated) {
        const f = p % 6;
        if (f === 0) l.size += ALIGN;
        else if (f === 1) l.addr += ALIGN;
        else if (f === 2) l.stream = l.stream + 1;
        else if (f === 3) l.liveSlot = -1;
        else if (f === 4) l.allocated = false;
        else l.pendingFree = true;
      }
      return b;
    },
  },
  unmapLive: {
    on: "malloc",
    bad: (b, _p, s, ctx) => {
      const c = s.last !== null && s.last.allocated ? chunkUnder(ctx, s.last) : null;
      if (c !== null) ctx.unmapChunks(s.last.addr, [c], s.last.stream);
      return b;
    },
  },
  releaseLive: {
    on: "malloc",
    bad: (b, _p, s, ctx) => {
      const c = s.last !== null && s.last.allocated ? chunkUnder(ctx, s.last) : null;
      if (c !== null) ctx.releaseChunk(c);
      return b;
    },
  },
  reserveFreeLive: {
    on: "malloc",
    bad: (b, _p, s, ctx) => {
      if (s.last !== null && s.last.allocated) ctx.reserveFree(s.last.addr, s.last.size);
      return b;
    },
  },
  segmentFreeLive: {
    on: "malloc",
    bad: (b, p, s, ctx) => {
      if (s.last !== null && s.last.allocated) ctx.segmentFree(s.last.addr, p & 1 ? s.last.size : 2 * MiB, s.last.stream);
      return b;
    },
  },
  throwMalloc: { on: "malloc", bad: (_b, p) => { throw p & 1 ? new RangeError("bug") : Object.create(null); } },
  leakFree: { on: "free", bad: () => {} },
  doubleFree: { on: "free", bad: (b, _p, _s, _c, base) => (base(b), base(b)) },
  throwFree: { on: "free", bad: () => { throw new TypeError("free bug"); } },
  freeOther: { on: "free", bad: (b, _p, s, _c, base) => base(s.last !== null && s.last !== b && s.last.allocated ? s.last : b) },
  emptyUnmaps: {
    on: "emptyCache",
    bad: (_x, _p, s, ctx) => {
      const c = s.last !== null && s.last.allocated ? chunkUnder(ctx, s.last) : null;
      if (c !== null) ctx.unmapChunks(s.last.addr, [c], s.last.stream);
    },
  },
  throwEmpty: { on: "emptyCache", bad: () => { throw new Error("emptyCache bug"); } },
  throwTeardown: { on: "teardown", bad: () => { throw new Error("teardown bug"); } },
  leakTeardown: { on: "teardown", bad: (_x, _p, _s, ctx) => void ctx.createChunk(ctx.device.granularity) },
  badCounters: { on: "counters", bad: (_x, p) => [{ stitches: NaN }, null, 7, { x: "1" }, { y: Infinity }][p % 5] },
  badCreate: { on: "create" },
};
const BUG_NAMES = Object.keys(BUGS);

/** Reads the input a byte at a time (0 past its end). */
class Bytes {
  constructor(data) {
    this.data = data;
    this.i = 0;
  }
  get done() {
    return this.i >= this.data.length;
  }
  u8() {
    return this.i < this.data.length ? this.data[this.i++] : 0;
  }
  size() {
    const c = this.u8() % 4;
    const v = this.u8() | (this.u8() << 8);
    if (c === 0) return 1 + (v % 4096);
    if (c === 1) return 1 + (v * 17) % MiB;
    if (c === 2) return 1 + (v * 131) % (8 * MiB);
    return 1 + (v * 1031) % (64 * MiB);
  }
}

/** The module a run loads: `base` (renamed: an outside policy) with `bugs` wired into its instance. */
function generatedPolicy(base, bugs, id) {
  const name = `mix-${base.name}-${id}`;
  const create = bugs.find((b) => b.kind === "badCreate");
  return {
    ...base,
    name,
    create: (ctx, options) => {
      if (create !== undefined) {
        const p = create.p % 4;
        if (p === 0) throw new Error("create bug");
        if (p === 1) return null;
        if (p === 2) return { malloc: () => null, emptyCache() {}, teardown() {} };
      }
      const inst = base.create(ctx, options);
      const s = { last: null, freed: null };
      const calls = { malloc: 0, free: 0, emptyCache: 0, teardown: 0, counters: 0 };
      const m0 = inst.malloc.bind(inst);
      const f0 = inst.free.bind(inst);
      const e0 = inst.emptyCache.bind(inst);
      const t0 = inst.teardown.bind(inst);
      const c0 = typeof inst.counters === "function" ? inst.counters.bind(inst) : () => ({});
      const fire = (on) => {
        const n = ++calls[on];
        return bugs.filter((b) => BUGS[b.kind].on === on && b.n === n);
      };
      inst.malloc = (size, stream) => {
        const due = fire("malloc");
        let b = m0(size, stream);
        if (b === null) return null;
        for (const bug of due) b = BUGS[bug.kind].bad(b, bug.p, s, ctx);
        if (b instanceof Block) s.last = b;
        return b;
      };
      inst.free = (b) => {
        s.freed = b;
        const due = fire("free");
        if (due.length === 0) return f0(b);
        for (const bug of due) BUGS[bug.kind].bad(b, bug.p, s, ctx, f0);
      };
      inst.emptyCache = () => {
        for (const bug of fire("emptyCache")) BUGS[bug.kind].bad(null, bug.p, s, ctx);
        return e0();
      };
      inst.teardown = () => {
        for (const bug of fire("teardown")) BUGS[bug.kind].bad(null, bug.p, s, ctx);
        return t0();
      };
      inst.counters = () => {
        const due = fire("counters");
        return due.length === 0 ? c0() : BUGS[due[0].kind].bad(null, due[0].p, s, ctx);
      };
      return inst;
    },
  };
}

/** Only a PolicyFault in one line naming the policy may end a run; anything else is a finding. */
function expectFault(e, policy) {
  if (!(e instanceof PolicyFault)) throw e;
  if (e.message.includes("\n") || !e.message.startsWith(`policy ${policy.name} (`) || e.policy !== policy.name) {
    throw new Error(`a PolicyFault that is not one line naming ${policy.name}: ${JSON.stringify(e.message.slice(0, 300))}`);
  }
}

class Wrong extends Error {
  constructor(what) {
    super(`a wrong result no error announced: ${what}`);
    this.name = "Wrong";
  }
}

function decode(data) {
  const r = new Bytes(data);
  const base = BASES[r.u8() % BASES.length];
  const live = (r.u8() & 1) === 1;
  const bugs = [];
  for (let k = r.u8() % 4; k > 0; k--) bugs.push({ kind: BUG_NAMES[r.u8() % BUG_NAMES.length], n: 1 + (r.u8() % 48), p: r.u8() });
  const ops = [];
  while (!r.done && ops.length < MAX_OPS) {
    const k = r.u8();
    const t = k % 10;
    if (t < 6) ops.push({ op: "alloc", size: r.size(), stream: k & 0x80 ? 7 : 0 });
    else if (t < 8) ops.push({ op: "free", i: r.u8() });
    else if (t === 8) ops.push({ op: "emptyCache" });
    else ops.push({ op: ["recordStream", "counters", "check", "cached"][r.u8() % 4], i: r.u8(), size: r.size() });
  }
  return { base, live, bugs, ops };
}

let runs = 0;

export function fuzzOne(data) {
  const prog = decode(data);
  const policy = generatedPolicy(prog.base, prog.bugs, runs++);
  if (prog.live) runLive(policy, prog.ops);
  else runReplay(policy, prog.ops);
}

/** The live path: our own books of every block handed out, and tags in its memory. */
function runLive(policy, ops) {
  const driver = new SimDriver();
  let a;
  try {
    a = new Allocator(policy, driver, { recorder: null });
  } catch (e) {
    expectFault(e, policy);
    return;
  }
  const live = []; // { b, addr, size, req, tag }
  let faulted = false;
  let serial = 0;
  const tagBytes = (tag, n) => {
    const t = new Uint8Array(Math.min(8, n));
    for (let i = 0; i < t.length; i++) t[i] = (tag >>> (8 * (i % 4))) & 0xff ^ i;
    return t;
  };
  const ends = (x) => (x.req < 16 ? [x.addr] : [x.addr, x.addr + x.req - 8]);
  const readTags = (x, when) => {
    for (const at of ends(x)) {
      let got;
      try {
        got = driver.read(at, Math.min(8, x.req));
      } catch (e) {
        throw new Wrong(`the live block at 0x${x.addr.toString(16)} (${x.req} B) cannot be read ${when}: ${e.message}`);
      }
      const want = tagBytes(x.tag, x.req);
      for (let i = 0; i < want.length; i++) {
        if (got[i] !== want[i]) throw new Wrong(`the live block at 0x${x.addr.toString(16)} (${x.req} B) was overwritten ${when} (another block shares its memory)`);
      }
    }
  };
  const handedOut = (b, req) => {
    if (!(b instanceof Block)) throw new Wrong(`malloc handed out ${typeof b}, not a Block`);
    const addr = b.addr;
    const size = b.size;
    if (!Number.isSafeInteger(addr) || !Number.isSafeInteger(size) || addr < 0) throw new Wrong(`a block at ${addr} of ${size} B`);
    if (size < req) throw new Wrong(`a block of ${size} B for a request of ${req} B`);
    if (addr % ALIGN !== 0) throw new Wrong(`a block at 0x${addr.toString(16)}, not ${ALIGN} B aligned`);
    for (const x of live) {
      if (addr < x.addr + x.size && x.addr < addr + size) throw new Wrong(`[0x${addr.toString(16)}, +${size}) overlaps the live block [0x${x.addr.toString(16)}, +${x.size})`);
    }
    const x = { b, addr, size, req, tag: ++serial * 2654435761 };
    for (const at of ends(x)) {
      try {
        driver.write(at, tagBytes(x.tag, req));
      } catch (e) {
        throw new Wrong(`the block handed out at 0x${addr.toString(16)} (${req} B) cannot be written: ${e.message}`);
      }
    }
    live.push(x);
  };
  const books = () => {
    if (faulted) return;
    let bytes = 0;
    for (const x of live) bytes += x.size;
    if (a.liveBlocks !== live.length || a.stats.allocatedBytes !== bytes) {
      throw new Wrong(`the engine's books: ${a.liveBlocks} live blocks of ${a.stats.allocatedBytes} B; handed out and not freed: ${live.length} of ${bytes} B`);
    }
    if (a.stats.allocatedBytes > a.stats.reservedBytes) throw new Wrong(`allocated ${a.stats.allocatedBytes} B above reserved ${a.stats.reservedBytes} B`);
  };
  const guarded = (f) => {
    try {
      f();
      return true;
    } catch (e) {
      expectFault(e, policy);
      faulted = true;
      return false;
    }
  };
  for (const o of ops) {
    if (o.op === "alloc" || (o.op === "cached" && a.servesCached)) {
      let b = null;
      if (!guarded(() => (b = o.op === "alloc" ? a.tryMalloc(o.size, o.stream) : a.tryMallocCached(o.size, 0)))) continue;
      if (b !== null) handedOut(b, o.size);
    } else if (o.op === "free" && live.length > 0) {
      const [x] = live.splice(o.i % live.length, 1);
      readTags(x, "before its free");
      guarded(() => a.free(x.b));
    } else if (o.op === "emptyCache") {
      guarded(() => a.emptyCache());
    } else if (o.op === "recordStream" && live.length > 0) {
      guarded(() => a.recordStream(live[o.i % live.length].b, 7));
    } else if (o.op === "counters") {
      guarded(() => a.counters());
    } else if (o.op === "check") {
      guarded(() => a.check());
    }
    books();
  }
  for (const x of live) readTags(x, "at the end");
  guarded(() => a.close());
}

/** The replay path: a trace of the program's allocations, whose result must add up. */
function runReplay(policy, ops) {
  const l = new EventLog(2 * ops.length + 8);
  const sid = { 0: l.streamId(0), 7: l.streamId(7) };
  const live = [];
  let addr = 1 << 30;
  let requested = 0;
  let peakRequested = 0;
  let t = 0;
  for (const o of ops) {
    if (o.op === "alloc") {
      l.push(EventKind.alloc, addr, o.size, sid[o.stream], 0, t++);
      live.push([addr, o.size, sid[o.stream]]);
      requested += o.size;
      peakRequested = Math.max(peakRequested, requested);
      addr += 128 * MiB;
    } else if (o.op === "free" && live.length > 0) {
      const [at, size, stream] = live.splice(o.i % live.length, 1)[0];
      l.push(EventKind.freeRequested, at, size, stream, 0, t);
      l.push(EventKind.freeCompleted, at, size, stream, 0, t++);
      requested -= size;
    } else if (o.op === "emptyCache") {
      l.push(EventKind.emptyCache, 0, 0, 0, 0, t++);
    }
  }
  let r;
  try {
    r = replay(l, { policy, driver: new SimDriver(), recorder: null, integrity: true, onOom: "continue", checkInvariants: ops.length % 3 === 0 ? 16 : false });
  } catch (e) {
    expectFault(e, policy);
    return;
  }
  const n = [r.peakRequestedBytes, r.peakAllocatedBytes, r.peakReservedBytes, r.utilization];
  if (!n.every((v) => Number.isFinite(v) && v >= 0)) throw new Wrong(`peaks ${n.join(", ")}`);
  if (r.ooms === 0 && r.peakRequestedBytes !== peakRequested) throw new Wrong(`peak requested ${r.peakRequestedBytes} B, the trace's is ${peakRequested} B`);
  if (r.ooms === 0 && r.peakAllocatedBytes < r.peakRequestedBytes) throw new Wrong(`peak allocated ${r.peakAllocatedBytes} B below requested ${r.peakRequestedBytes} B`);
  if (r.peakReservedBytes < r.peakAllocatedBytes) throw new Wrong(`peak reserved ${r.peakReservedBytes} B below allocated ${r.peakAllocatedBytes} B`);
  if (r.utilization > 1) throw new Wrong(`utilization ${r.utilization}`);
  if (r.integrityErrors !== 0) throw new Wrong(`${r.integrityErrors} integrity errors`);
}

/** Seeds: every base with each bug set off early, half live, half replayed, over a mixed program. */
export function seeds() {
  const out = [];
  let x = 0x9e3779b9;
  const rnd = () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x & 0xff;
  };
  for (let base = 0; base < BASES.length; base++) {
    for (let bug = 0; bug <= BUG_NAMES.length; bug++) {
      const head = bug === BUG_NAMES.length ? [base, bug & 1, 0] : [base, bug & 1, 1, bug, 1 + (bug % 5), rnd()];
      const body = [];
      for (let i = 0; i < 24; i++) {
        if (i % 9 === 8) body.push(8);
        else if (i % 4 === 3) body.push(6, rnd());
        else body.push(rnd() & 0x80, rnd() % 3, rnd(), rnd());
      }
      out.push(Uint8Array.from([...head, ...body]));
    }
  }
  return out;
}

/** For the mutator: the op bytes and small counts. */
export const dictionary = [[0], [6], [8], [9], [1], [2], [3], [0x80]].map((a) => Uint8Array.from(a));
