import type { Chunk } from "@gmlake/chunk-pool";
import { HOST_RESOURCE_CODES, VmmError } from "@gmlake/vmm";
import type { AllocatorSettings } from "@gmlake/trace";
import { Block } from "../core/block.js";
import type { AllocatorContext } from "../core/context.js";
import { StitchError } from "../core/errors.js";
import type { DeviceFacts, MapAccess, PhysicalChunk, PolicyContext } from "../core/policy-context.js";
import { policyModuleOf, type Policy, type PolicyInstance, type PolicyOptions } from "../core/policy.js";
import { RangeSet } from "./range-set.js";
import { kMinBlockSize } from "../core/rounding.js";

/**
 * What an outside policy did wrong: it broke one of the engine's rules (`rule`), or threw,
 * in a call the engine made. One line naming the policy and the module it came from;
 * StitchError code BAD_POLICY, which the CLI reports as bad input (exit 2), not as its own
 * failure. Live, the allocation that met it fails with this message.
 */
export class PolicyFault extends StitchError {
  readonly policy: string;
  /** The --policy-module it was loaded from, when the loader knows. */
  readonly module: string | null;
  readonly rule: string;
  constructor(policy: Policy, rule: string, detail: string) {
    const module = policyModuleOf(policy) ?? null;
    super("BAD_POLICY", `policy ${policy.name} (${module === null ? "not a built-in" : `module ${module}`}) ${detail}`);
    this.name = "PolicyFault";
    this.policy = policy.name;
    this.module = module;
    this.rule = rule;
  }
}

/** Told when a guarded policy call begins and ends (a watchdog in another thread: apps/cli's, apps/bench's). */
export interface PolicyCallWatch {
  /** `label`: "policy NAME (module M)"; `call`: malloc, free, create ... */
  enter(label: string, call: string): void;
  leave(): void;
}

let watch: PolicyCallWatch | null = null;

/** Report every guarded policy call to `w` (null: stop). One per process (thread): the last set wins. */
export function watchPolicyCalls(w: PolicyCallWatch | null): void {
  watch = w;
}

/** The watch, for the module loader: an import is a call of the module's too. */
export function policyCallWatch(): PolicyCallWatch | null {
  return watch;
}

/** The call's text, only for a fault: built per call it cost a third of the guard's time. */
const where = (call: string, size: number, stream: number) => `${call}(${size}, stream ${stream})`;

const hex = (a: number) => (typeof a === "number" && Number.isFinite(a) ? "0x" + a.toString(16) : String(a));

/** What a policy threw, in one line, whatever it is (an object whose toString throws too). */
function described(e: unknown): string {
  try {
    return e instanceof Error ? `${e.name}: ${String(e.message).split("\n")[0]}` : `a non-error value ${String(e).slice(0, 80)}`;
  } catch {
    return `a value that cannot be printed (${typeof e})`;
  }
}

/** A Block of this package or of another installed copy of it (a policy package with its own @gmlake/stitch). */
function isBlock(b: unknown): b is Block {
  if (b instanceof Block) return true;
  if (typeof b !== "object" || b === null) return false;
  for (let p: unknown = Object.getPrototypeOf(b); p !== null && p !== Object.prototype; p = Object.getPrototypeOf(p)) {
    if ((p as { constructor?: { name?: string } }).constructor?.name === "Block") return true;
  }
  return false;
}

/**
 * The engine's distrust of a policy that is not a built-in: every block it returns is
 * checked before anyone sees it, every free, unmap and segment call against the engine's
 * own books, and every call it makes is caught, so that a buggy policy stops with one
 * PolicyFault naming it and the rule rather than handing out shared memory or bending the
 * numbers. The books: the ranges its context mapped or cudaMalloc'd (with the chunk behind
 * each mapping: a chunk mapped twice aliases), and the live blocks as served.
 *
 * Rules for a block from malloc / mallocCached: a Block (not a look-alike object); integer
 * address and size; size >= the request rounded to 512 B (PyTorch's kMinBlockSize, the
 * least any of its allocators charges); address 512 B aligned; inside memory the context
 * mapped, and inside one of its reservations or segments; overlapping no live block, virtually or through another mapping of the same chunk;
 * not live already; unchanged (address, size, stream) until its free.
 */
export class PolicyGuard {
  readonly policy: Policy;
  readonly label: string;
  /** What the policy gets instead of the context's own view. */
  readonly view: PolicyContext;
  private readonly ctx: AllocatorContext;
  /** Mapped and cudaMalloc'd ranges: the chunk mapped there, or null for a plain segment. */
  readonly mapped = new RangeSet<Chunk | null>();
  /** Its reservations and plain segments: a block lies inside one (a copy or kernel cannot cross into the next). */
  readonly regions = new RangeSet<null>();
  private readonly live = new RangeSet<Block>();
  /** Live block -> its slot in the arrays below: what was served. */
  private readonly served = new Map<Block, number>();
  private readonly sAddr: number[] = [];
  private readonly sSize: number[] = [];
  private readonly sStream: number[] = [];
  /** The request served and whether its free was requested: the engine's own fields of the block, which the policy can reach too. */
  private readonly sRequested: number[] = [];
  private readonly sPending: boolean[] = [];
  private readonly spare: number[] = [];

  constructor(policy: Policy, ctx: AllocatorContext) {
    this.policy = policy;
    this.ctx = ctx;
    const m = policyModuleOf(policy);
    this.label = `policy ${policy.name} (${m === undefined ? "not a built-in" : `module ${m}`})`;
    this.view = new GuardedView(ctx.policyView, this);
  }

  fault(rule: string, detail: string): PolicyFault {
    return new PolicyFault(this.policy, rule, detail);
  }

  /** An error thrown inside the policy's `call`, as its fault (the host driver's machine limits pass: they are not the policy's). */
  private threw(call: string, e: unknown): unknown {
    if (e instanceof PolicyFault) return e;
    if (e instanceof VmmError && HOST_RESOURCE_CODES.includes(e.code)) return e;
    return this.fault("threw", `threw in ${call}: ${described(e)}`);
  }

  /** Runs one call of the policy's: its errors become its faults; the watch sees it begin and end. */
  call<R>(name: string, f: () => R): R {
    const w = watch;
    if (w !== null) w.enter(this.label, name);
    try {
      return f();
    } catch (e) {
      throw this.threw(name, e);
    } finally {
      if (w !== null) w.leave();
    }
  }

  /** The policy's malloc, checked (the hot path: no closure per call, unlike call()). */
  malloc(inst: PolicyInstance, size: number, stream: number): Block | null {
    const w = watch;
    if (w !== null) w.enter(this.label, "malloc");
    let b: unknown;
    try {
      b = inst.malloc(size, stream);
    } catch (e) {
      throw this.threw("malloc", e);
    } finally {
      if (w !== null) w.leave();
    }
    return this.accept(b, size, stream, "malloc");
  }

  /** The policy takes a block back: off the books first, so that it may unmap it. */
  free(inst: PolicyInstance, b: Block): void {
    this.release(b);
    const w = watch;
    if (w !== null) w.enter(this.label, "free");
    try {
      inst.free(b);
    } catch (e) {
      throw this.threw("free", e);
    } finally {
      if (w !== null) w.leave();
    }
  }

  create(options: PolicyOptions): PolicyInstance {
    const inst = this.call("create", () => this.policy.create(this.view, options));
    if (typeof inst !== "object" || inst === null) throw this.fault("instance", `create() returned ${inst === null ? "null" : typeof inst}, not an allocator`);
    for (const m of ["malloc", "free", "emptyCache", "teardown"] as const) {
      if (typeof inst[m] !== "function") throw this.fault("instance", `create() returned an allocator without ${m}()`);
    }
    return inst;
  }

  /** A block the policy returned for malloc(size, stream) (or mallocCached): checked, then booked live. */
  accept(b: unknown, size: number, stream: number, call: string): Block | null {
    if (b === null) return null;
    if (!isBlock(b)) throw this.fault("not-a-block", `${where(call, size, stream)} returned ${b === undefined ? "undefined" : typeof b === "object" ? "a plain object" : typeof b}, not a Block or null`);
    // the engine writes its fields into the block (allocated, requested, ...)
    if (!Object.isExtensible(b)) throw this.fault("not-a-block", `${where(call, size, stream)} returned a frozen or sealed Block: the engine writes its fields`);
    const { addr, size: bytes } = b;
    if (!Number.isSafeInteger(addr) || addr < 0 || !Number.isSafeInteger(bytes) || !Number.isSafeInteger(b.stream)) {
      throw this.fault("bad-block", `${where(call, size, stream)} returned a block at ${hex(addr)} of ${bytes} B on stream ${b.stream}: not integers`);
    }
    const least = size <= kMinBlockSize ? kMinBlockSize : Math.ceil(size / kMinBlockSize) * kMinBlockSize;
    if (bytes < least) throw this.fault("too-small", `${where(call, size, stream)} returned ${bytes} B at ${hex(addr)}, less than the request rounded to 512 B (${least} B)`);
    if (addr % kMinBlockSize !== 0) throw this.fault("misaligned", `${where(call, size, stream)} returned a block at ${hex(addr)}, not 512 B aligned`);
    if (this.served.has(b)) throw this.fault("already-live", `${where(call, size, stream)} returned the block at ${hex(addr)} that is live already`);
    const end = addr + bytes;
    const o = this.live.overlapping(addr, end);
    if (o !== null) throw this.fault("overlap", `${where(call, size, stream)} returned [${hex(addr)}, +${bytes}) overlapping the live block [${hex(o[0])}, +${o[1] - o[0]})`);
    this.spanStart = addr;
    this.spanEnd = end;
    const gap = this.mapped.firstUncovered(addr, end, this.visitMapping);
    if (this.aliased !== null) {
      const [id, other] = this.aliased;
      this.aliased = null;
      throw this.fault("shared-physical", `${where(call, size, stream)} returned [${hex(addr)}, +${bytes}) whose chunk ${id} also backs the live block at ${hex(other)}`);
    }
    if (gap < end) throw this.fault("unmapped", `${where(call, size, stream)} returned [${hex(addr)}, +${bytes}) of which ${hex(gap)} is not memory its context mapped`);
    const region = this.regions.at(addr);
    if (region === null || region[1] < end) {
      throw this.fault("spans", `${where(call, size, stream)} returned [${hex(addr)}, +${bytes}) across the end of its reservation or segment at ${region === null ? "?" : hex(region[1])}`);
    }
    this.live.add(addr, end, b);
    // what was served, in number arrays by slot (a record object per block was a tenth of the time, in GC)
    const slot = this.spare.length > 0 ? this.spare.pop()! : this.sAddr.length;
    this.sAddr[slot] = addr;
    this.sSize[slot] = bytes;
    this.sStream[slot] = b.stream;
    this.sRequested[slot] = size;
    this.sPending[slot] = false;
    this.served.set(b, slot);
    return b;
  }

  private spanStart = 0;
  private spanEnd = 0;
  /** Set by visitMapping: [chunk id, the live block's address] of a chunk that backs a live block elsewhere. */
  private aliased: [number, number] | null = null;
  /** A mapping under the block being checked: when its chunk is mapped elsewhere too, the same bytes there must not be live. */
  private readonly visitMapping = (s: number, e: number, chunk: Chunk | null): void => {
    if (chunk === null || chunk.mappings.length < 2 || this.aliased !== null) return;
    const lo = Math.max(s, this.spanStart) - s;
    const hi = Math.min(e, this.spanEnd) - s;
    for (const m of chunk.mappings) {
      if (m === s) continue;
      const o = this.live.overlapping(m + lo, m + hi);
      if (o !== null) {
        this.aliased = [chunk.id, o[0]];
        return;
      }
    }
  };

  /** A live block as the engine is about to free it: still what was served. */
  checkLive(b: Block): void {
    const i = this.served.get(b);
    if (i === undefined) return; // not live: the engine's own check refuses it (the caller's error)
    const a = this.sAddr[i]!;
    const z = this.sSize[i]!;
    const st = this.sStream[i]!;
    if (b.addr !== a || b.size !== z || b.stream !== st) {
      throw this.fault("mutated", `changed the live block served at ${hex(a)} (${z} B, stream ${st}) to ${hex(b.addr)} (${b.size} B, stream ${b.stream})`);
    }
    if (b.allocated !== true || b.requested !== this.sRequested[i] || b.pendingFree !== this.sPending[i]) {
      throw this.fault("mutated", `changed the engine's fields of the live block at ${hex(a)} (allocated ${b.allocated}, requested ${b.requested}, pendingFree ${b.pendingFree})`);
    }
  }

  /** The engine requested the live block's free (its pendingFree is the engine's from now on). */
  freeRequested(b: Block): void {
    const i = this.served.get(b);
    if (i !== undefined) this.sPending[i] = true;
  }

  /** The engine knows `b` as live (its own list may disagree when the policy changed the block's engine fields). */
  has(b: Block): boolean {
    return this.served.has(b);
  }

  /** A block's free completed: off the books before the policy takes it back. */
  release(b: Block): void {
    const i = this.served.get(b)!;
    this.served.delete(b);
    this.spare.push(i);
    this.live.remove(this.sAddr[i]!);
  }

  /** [addr, addr + bytes) is about to be unmapped or freed: no live block may be there. */
  checkIdle(addr: number, bytes: number, what: string): void {
    const o = this.live.overlapping(addr, addr + bytes);
    if (o !== null) throw this.fault("freed-live", `${what} [${hex(addr)}, +${bytes}) under the live block at ${hex(o[0])} (${o[1] - o[0]} B)`);
  }

  segmentFree(addr: number, size: number): void {
    const had = this.ctx.plainSegments.get(addr);
    if (had === undefined) throw this.fault("segment-free", `freed a segment at ${hex(addr)} that its context did not allocate (or freed it twice)`);
    if (had !== size) throw this.fault("segment-free", `freed the ${had} B segment at ${hex(addr)} as ${size} B`);
    this.checkIdle(addr, size, "freed the segment");
  }

  reserveFree(addr: number, size: number): void {
    const had = this.ctx.reservations.get(addr);
    if (had === undefined) throw this.fault("reserve-free", `freed an address range at ${hex(addr)} that its context did not reserve (or freed it twice)`);
    if (had !== size) throw this.fault("reserve-free", `freed the ${had} B address range at ${hex(addr)} as ${size} B`);
    const m = this.mapped.overlapping(addr, addr + size);
    if (m !== null) throw this.fault("reserve-free", `freed the address range at ${hex(addr)} with memory still mapped at ${hex(m[0])}`);
  }

  /**
   * The invariant checker on an outside policy's allocator: what it finds (books that do not
   * add up, the policy's own check() failing or throwing) is the policy's fault, not ours.
   */
  invariant(f: () => void): void {
    const w = watch;
    if (w !== null) w.enter(this.label, "check");
    try {
      f();
    } catch (e) {
      if (e instanceof PolicyFault || (e instanceof VmmError && HOST_RESOURCE_CODES.includes(e.code))) throw e;
      throw this.fault("invariant", `broke an invariant: ${e instanceof StitchError ? e.message.split("\n")[0] : described(e)}`);
    } finally {
      if (w !== null) w.leave();
    }
  }

  /** counters(): a record of finite numbers. */
  counters(inst: PolicyInstance): Record<string, number> {
    const f = inst.counters;
    if (f === undefined) return {};
    const c = this.call("counters", () => f.call(inst));
    if (typeof c !== "object" || c === null) throw this.fault("counters", `counters() returned ${c === null ? "null" : typeof c}, not a record of numbers`);
    for (const [k, v] of Object.entries(c)) {
      if (typeof v !== "number" || !Number.isFinite(v)) throw this.fault("counters", `counters() gave ${k} = ${String(v)}, not a finite number`);
    }
    return c;
  }

  /** peekCached's answer: an address or null. */
  peeked(a: unknown): number | null {
    if (a === null || (Number.isSafeInteger(a) && (a as number) >= 0)) return a as number | null;
    throw this.fault("peek", `peekCached returned ${String(a)}, not an address or null`);
  }
}

/**
 * The PolicyContext an outside policy gets: the context's own view, with each call that
 * gives memory back checked against the engine's books first and each one that maps or
 * allocates noted in them after (the real view keeps the driver out of reach: a private field).
 */
class GuardedView implements PolicyContext {
  readonly #v: PolicyContext;
  readonly #g: PolicyGuard;
  readonly device: DeviceFacts;
  readonly settings: Readonly<AllocatorSettings>;

  constructor(v: PolicyContext, g: PolicyGuard) {
    this.#v = v;
    this.#g = g;
    this.device = v.device;
    this.settings = v.settings;
  }

  get reservedBytes(): number {
    return this.#v.reservedBytes;
  }
  get plainSegmentBytes(): number {
    return this.#v.plainSegmentBytes;
  }
  get capacityBytes(): number {
    return this.#v.capacityBytes;
  }
  get deviceBytes(): number {
    return this.#v.deviceBytes;
  }
  get mapOnly(): boolean {
    return this.#v.mapOnly;
  }
  get integrity(): boolean {
    return this.#v.integrity;
  }
  get lendPoolMemory(): boolean {
    return this.#v.lendPoolMemory;
  }
  segmentAlloc(size: number, stream: number): number {
    const a = this.#v.segmentAlloc(size, stream);
    if (a >= 0) {
      this.#g.mapped.add(a, a + size, null);
      this.#g.regions.add(a, a + size, null);
    }
    return a;
  }
  segmentFree(addr: number, size: number, stream: number): void {
    this.#g.segmentFree(addr, size);
    this.#v.segmentFree(addr, size, stream);
    this.#g.mapped.remove(addr);
    this.#g.regions.remove(addr);
  }
  createChunk(size: number, tentative = false): PhysicalChunk | null {
    return this.#v.createChunk(size, tentative);
  }
  commitReserved(): void {
    this.#v.commitReserved();
  }
  releaseChunk(chunk: PhysicalChunk): void {
    this.#v.releaseChunk(chunk);
  }
  reserve(size: number, alignment = 0): number {
    const a = this.#v.reserve(size, alignment);
    if (Number.isSafeInteger(a) && a >= 0) this.#g.regions.add(a, a + size, null);
    return a;
  }
  reserveFree(addr: number, size: number): void {
    this.#g.reserveFree(addr, size);
    this.#v.reserveFree(addr, size);
    this.#g.regions.remove(addr);
  }
  mapChunks(addr: number, chunks: readonly PhysicalChunk[], stream = 0, access: MapAccess = "range"): number {
    const bytes = this.#v.mapChunks(addr, chunks, stream, access);
    let at = addr;
    for (const c of chunks) {
      this.#g.mapped.add(at, at + c.size, c as Chunk);
      at += c.size;
    }
    return bytes;
  }
  unmapChunks(addr: number, chunks: readonly PhysicalChunk[], stream = 0, after?: number): number {
    let bytes = 0;
    for (const c of chunks) bytes += typeof c?.size === "number" ? c.size : 0;
    this.#g.checkIdle(addr, bytes, "unmapped");
    try {
      return this.#v.unmapChunks(addr, chunks, stream, after);
    } finally {
      // off the books whatever is unmapped now, also when the call failed part way (a bad
      // entry in the list after good ones): books that still said mapped let a block in
      // unmapped memory through
      let at = addr;
      for (const c of chunks) {
        if (this.#v.chunkMappedAt(at) === null) this.#g.mapped.remove(at);
        if (typeof c?.size !== "number") break;
        at += c.size;
      }
    }
  }
  markStream(stream: number): number {
    return this.#v.markStream(stream);
  }
  markDone(mark: number): boolean {
    return this.#v.markDone(mark);
  }
  chunkMappedAt(addr: number): PhysicalChunk | null {
    return this.#v.chunkMappedAt(addr);
  }
  freeDeviceBytes(): number {
    return this.#v.freeDeviceBytes();
  }
  retried(): void {
    this.#v.retried();
  }
  waitForStream(from: number, to: number): void {
    this.#v.waitForStream(from, to);
  }
  segmentMapped(addr: number, size: number, stream: number): void {
    this.#v.segmentMapped(addr, size, stream);
  }
  segmentUnmapped(addr: number, size: number, stream: number): void {
    this.#v.segmentUnmapped(addr, size, stream);
  }
  record(kind: number, addr: number, size: number, stream: number, aux = 0): void {
    this.#v.record(kind, addr, size, stream, aux);
  }
}
