/**
 * `@gmlake/stitch/testing`: the contract every policy is held to (the four built-ins run it
 * in this package's tests), for a policy of your own:
 *
 *   import { runPolicyContract } from "@gmlake/stitch/testing";
 *   runPolicyContract(myPolicy, { drivers: ["sim", "host"] }); // throws PolicyContractError on a violation
 *
 * On each driver: random mixes of sizes and streams with two-phase frees and empty_cache,
 * the invariant checker at every operation (a block inside memory the policy obtained,
 * overlapping no live block and sharing no physical byte with one; reserved = what the
 * driver holds) and integrity where memory exists (host, cuda: every block stamped and
 * checked at its free, on both sides of stitch seams); random operation sequences under a
 * tight and a roomy capacity; out-of-memory returned as null, then recovered; and a
 * teardown that leaves no handle, mapping, segment or reservation, with the driver's free
 * memory back where it was. Every allocator here runs under the engine's policy guard, the
 * built-ins' too (every block, free and segment call checked: PolicyGuard). A policy with mallocCached has a third of its mallocs asked
 * that way first, which must make no driver call on memory; a seventh go through tryMallocHeld
 * first (mallocHeld, else mallocCached), which must create nothing and reserve no byte more; a policy with peekCached is asked
 * before every other malloc, which must then land where it said. No test framework needed: it
 * throws, or returns a report.
 */
import "./register-builtins.js";
import { createDriver, cudaAvailable, DRIVER_CALLS, mulberry32, SimDriver, withCapacity, type VmmDriver } from "@gmlake/vmm";
import type { Block } from "./core/block.js";
import { Allocator } from "./core/engine.js";
import { StitchError } from "./core/errors.js";
import { getPolicy, type Policy, type PolicyOptions } from "./core/policy.js";

const MiB = 2 ** 20;

/** A driver to run the contract on: "sim", "host", "cuda", or your own factory. */
export type ContractDriver = "sim" | "host" | "cuda" | { name: string; make: () => VmmDriver; integrity: boolean };

export interface ContractOptions {
  /** Default ["sim", "host"], and "cuda" when a GPU is there. */
  drivers?: readonly ContractDriver[];
  /** The policy's knob values (default: its defaults). */
  options?: PolicyOptions;
  /** Seeds of the random mixes (default [1, 2, 3]) and operations per mix (default 400). */
  seeds?: readonly number[];
  ops?: number;
  /** Random operation sequences per driver (default 40 on sim, 8 elsewhere). */
  sequences?: number;
}

export interface ContractCheck {
  driver: string;
  check: "mixes" | "sequences" | "out-of-memory";
  ok: boolean;
  /** What failed (and how to reproduce it: seed, operation), or null. */
  message: string | null;
  ms: number;
}

export interface ContractReport {
  policy: string;
  passed: boolean;
  checks: ContractCheck[];
}

/** A policy broke its contract: `report` holds every check; the message lists the failures. */
export class PolicyContractError extends StitchError {
  readonly report: ContractReport;
  constructor(report: ContractReport) {
    const failed = report.checks.filter((c) => !c.ok);
    super("CONTRACT", `policy ${report.policy} fails its contract: ${failed.map((c) => `${c.check} on ${c.driver}: ${c.message}`).join("; ")}`);
    this.name = "PolicyContractError";
    this.report = report;
  }
}

function driverOf(d: ContractDriver): { name: string; make: () => VmmDriver; integrity: boolean } {
  if (typeof d !== "string") return d;
  if (d === "sim") return { name: "sim", make: () => new SimDriver(), integrity: false };
  if (d === "host") return { name: "host", make: () => createDriver("host", { capacityBytes: 8 * 1024 * MiB }), integrity: true };
  if (d === "cuda") return { name: "cuda", make: () => createDriver("cuda"), integrity: true };
  throw new StitchError("BAD_ARGUMENT", `Expected a contract driver of sim, host, cuda or { name, make, integrity } but received ${JSON.stringify(d)}`);
}

function fail(message: string): never {
  throw new Error(message);
}

/** Request sizes as programs make them: tiny, small-pool, mid, large, and the edge cases 0 and 10 MiB + 1. */
function size(r: () => number): number {
  const x = r();
  if (x < 0.35) return 1 + Math.floor(r() * 4096);
  if (x < 0.6) return Math.floor(r() * MiB) + 1;
  if (x < 0.85) return MiB + Math.floor(r() * 19 * MiB);
  if (x < 0.97) return 20 * MiB + Math.floor(r() * 120 * MiB);
  return r() < 0.5 ? 0 : 10 * MiB + 1;
}

/** Driver calls that create, map, unmap or free memory (every mem* call but the query): mallocCached makes none of them. */
const MEMORY_CALLS = DRIVER_CALLS.filter((c) => c.startsWith("mem") && c !== "memGetInfo");

function cachedMalloc(a: Allocator, size: number, stream: number): Block | null {
  const d = a.ctx.driver;
  const before = d.stats().calls;
  const counts = MEMORY_CALLS.map((c) => before[c]);
  const reserved = a.stats.reservedBytes;
  const b = a.tryMallocCached(size, stream);
  const after = d.stats().calls;
  MEMORY_CALLS.forEach((c, i) => {
    if (after[c] !== counts[i]) fail(`mallocCached(${size}) made ${after[c] - counts[i]!} ${c} call(s): it must serve from memory the policy holds`);
  });
  if (a.stats.reservedBytes !== reserved) fail(`mallocCached(${size}) changed reserved bytes from ${reserved} to ${a.stats.reservedBytes}`);
  if (b !== null && b.size < size) fail(`mallocCached(${size}) returned a block of ${b.size} B`);
  return b;
}

/** tryMallocHeld (mallocHeld, else mallocCached): no byte more reserved, no handle or segment created. */
function heldMalloc(a: Allocator, size: number, stream: number): Block | null {
  const d = a.ctx.driver;
  const before = d.stats().calls;
  const reserved = a.stats.reservedBytes;
  const b = a.tryMallocHeld(size, stream);
  const after = d.stats().calls;
  for (const c of ["memCreate", "memAlloc"] as const) {
    if (after[c] !== before[c]) fail(`mallocHeld(${size}) made ${after[c] - before[c]} ${c} call(s): it must serve from memory the policy holds`);
  }
  if (a.stats.reservedBytes > reserved) fail(`mallocHeld(${size}) raised reserved bytes from ${reserved} to ${a.stats.reservedBytes}`);
  if (b !== null && b.size < size) fail(`mallocHeld(${size}) returned a block of ${b.size} B`);
  return b;
}

/** peekCached (optional): no driver call, nothing counted, and the malloc right after lands where it said. */
function peekedMalloc(a: Allocator, size: number, stream: number): Block | null {
  const d = a.ctx.driver;
  const calls = d.stats().totalCalls;
  const { reservedBytes, allocatedBytes, allocations } = a.stats;
  const p = a.peekCached(size, stream);
  if (d.stats().totalCalls !== calls) fail(`peekCached(${size}) made ${d.stats().totalCalls - calls} driver call(s): it must change nothing`);
  if (a.stats.reservedBytes !== reservedBytes || a.stats.allocatedBytes !== allocatedBytes || a.stats.allocations !== allocations) {
    fail(`peekCached(${size}) changed the books`);
  }
  const b = a.tryMalloc(size, stream);
  if (p !== null && b?.addr !== p) fail(`peekCached(${size}, stream ${stream}) said 0x${p.toString(16)}, then malloc served ${b === null ? "nothing" : "0x" + b.addr.toString(16)}`);
  return b;
}

/** `ops` random operations on three streams: mallocs, frees (a fifth of them completed later), flushes, empty_cache. */
function mix(a: Allocator, r: () => number, ops: number, sizeOf: (r: () => number) => number): void {
  const streams = [0, 0x5a5a00, 0x7b7b00];
  const live: Block[] = [];
  const pending: Block[] = [];
  const plain = a.peeks ? peekedMalloc : (x: Allocator, s: number, st: number) => x.tryMalloc(s, st);
  for (let i = 0; i < ops; i++) {
    const x = r();
    try {
      if (x < 0.5 || live.length === 0) {
        const n = sizeOf(r);
        const stream = streams[Math.floor(r() * streams.length)]!;
        // mallocCached (optional): served from what the policy holds, no driver call on memory
        // mallocHeld (optional): no byte more reserved
        const y = r();
        const b =
          a.servesCached && y < 0.3 ? (cachedMalloc(a, n, stream) ?? plain(a, n, stream)) : y > 0.85 ? (heldMalloc(a, n, stream) ?? plain(a, n, stream)) : plain(a, n, stream);
        if (b !== null) live.push(b);
      } else if (x < 0.9) {
        const j = Math.floor(r() * live.length);
        const b = live[j]!;
        live[j] = live[live.length - 1]!;
        live.pop();
        a.freeRequested(b);
        if (r() < 0.8) a.freeCompleted(b);
        else pending.push(b);
      } else if (x < 0.97) {
        while (pending.length > 0) a.freeCompleted(pending.pop()!);
      } else {
        a.emptyCache();
      }
    } catch (e) {
      fail(`operation ${i}: ${(e as Error).message}`);
    }
  }
  a.check();
  for (const b of pending) a.freeCompleted(b);
  a.close(live);
}

function expectZero(a: Allocator): void {
  const s = a.stats;
  if (s.allocatedBytes !== 0 || s.activeBytes !== 0 || s.reservedBytes !== 0) {
    fail(`after teardown: allocated ${s.allocatedBytes} B, active ${s.activeBytes} B, reserved ${s.reservedBytes} B (all must be 0)`);
  }
  if (s.peakReservedBytes < s.peakAllocatedBytes) fail(`peak reserved ${s.peakReservedBytes} B < peak allocated ${s.peakAllocatedBytes} B`);
}

function checkMixes(policy: Policy, d: ReturnType<typeof driverOf>, o: ContractOptions): void {
  const driver = d.make();
  try {
    // a real GPU never reports all of its memory free: compare with the value before
    const before = driver.memGetInfo().freeBytes;
    for (const seed of o.seeds ?? [1, 2, 3]) {
      const a = new Allocator(policy, driver, { guard: true, options: o.options, checkInvariants: 1, integrity: d.integrity });
      try {
        mix(a, mulberry32(seed * 7919), o.ops ?? 400, size);
      } catch (e) {
        fail(`seed ${seed}, ${(e as Error).message}`);
      }
      if (a.integrity) {
        if (a.integrity.errors > 0) fail(`seed ${seed}: ${a.integrity.errors} blocks changed before their free: ${a.integrity.messages.slice(0, 3).join("; ")}`);
        if (a.integrity.checked < 50) fail(`seed ${seed}: only ${a.integrity.checked} blocks were checked`);
      }
      expectZero(a);
      const after = driver.memGetInfo().freeBytes;
      if (after !== before) fail(`seed ${seed}: the driver's free memory is ${after} B after teardown, ${before} B before`);
    }
  } finally {
    driver.close();
  }
}

function checkSequences(policy: Policy, d: ReturnType<typeof driverOf>, o: ContractOptions): void {
  const n = o.sequences ?? (d.name === "sim" ? 40 : 8);
  for (let k = 0; k < n; k++) {
    const r = mulberry32(0x5eed + k);
    const tight = k % 2 === 0;
    const driver = withCapacity(d.make(), tight ? 160 * MiB : 4096 * MiB);
    try {
      const a = new Allocator(policy, driver, { guard: true, options: o.options, checkInvariants: 1 });
      const sizeOf = (q: () => number) => (q() < 0.4 ? Math.floor(q() * 4096) : q() < 0.7 ? Math.floor(q() * 3 * MiB) : MiB + Math.floor(q() * 89 * MiB));
      try {
        mix(a, r, Math.floor(r() * 120), sizeOf);
      } catch (e) {
        fail(`sequence ${k} (${tight ? "160 MiB" : "4 GiB"} capacity), ${(e as Error).message}`);
      }
      expectZero(a);
      if (driver.liveBytes !== 0) fail(`sequence ${k}: ${driver.liveBytes} B still held from the driver after teardown`);
    } finally {
      driver.close();
    }
  }
}

function checkOutOfMemory(policy: Policy, d: ReturnType<typeof driverOf>, o: ContractOptions): void {
  const driver = withCapacity(d.make(), 256 * MiB);
  try {
    const a = new Allocator(policy, driver, { guard: true, options: o.options, checkInvariants: 1, integrity: d.integrity });
    const live: Block[] = [];
    let b: Block | null;
    while ((b = a.tryMalloc(30 * MiB)) !== null) {
      live.push(b);
      if (live.length > 9) fail("more than 256 MiB served out of a 256 MiB capacity");
    }
    if (live.length === 0) fail("not one 30 MiB block out of a 256 MiB capacity");
    if (a.stats.numOoms !== 1) fail(`${a.stats.numOoms} out-of-memory events counted for one failed malloc`);
    let code: unknown = null;
    try {
      a.malloc(300 * MiB);
    } catch (e) {
      code = (e as { code?: unknown }).code;
    }
    if (code !== "OUT_OF_MEMORY") fail(`malloc past the capacity ended in ${code === null ? "a block" : String(code)}, not OUT_OF_MEMORY`);
    for (const x of live.splice(0)) a.free(x);
    // everything cached must be releasable to serve a request of another shape
    const big = a.tryMalloc(200 * MiB);
    if (big === null) fail("after freeing everything, 200 MiB of a 256 MiB capacity could not be served (cached memory not released?)");
    a.close([big]);
    if (driver.liveBytes !== 0) fail(`${driver.liveBytes} B still held from the driver after teardown`);
  } finally {
    driver.close();
  }
}

/**
 * Run the policy contract on each driver; throws PolicyContractError listing every failed
 * check (each says how to reproduce it), or returns the report.
 */
export function runPolicyContract<O extends object>(policy: Policy<O> | string, o: ContractOptions = {}): ContractReport {
  const p = typeof policy === "string" ? getPolicy(policy) : (policy as unknown as Policy); // a Policy<Knobs> of an interface too
  const drivers = (o.drivers ?? (cudaAvailable() ? ["sim", "host", "cuda"] : ["sim", "host"])).map(driverOf);
  const checks: ContractCheck[] = [];
  for (const d of drivers) {
    for (const [check, run] of [
      ["mixes", checkMixes],
      ["sequences", checkSequences],
      ["out-of-memory", checkOutOfMemory],
    ] as const) {
      const t0 = performance.now();
      let message: string | null = null;
      try {
        run(p, d, o);
      } catch (e) {
        message = (e as Error).message.split("\n")[0]!;
      }
      checks.push({ driver: d.name, check, ok: message === null, message, ms: performance.now() - t0 });
    }
  }
  const report: ContractReport = { policy: p.name, passed: checks.every((c) => c.ok), checks };
  if (!report.passed) throw new PolicyContractError(report);
  return report;
}
