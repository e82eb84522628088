import { dirname, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { Worker } from "node:worker_threads";
import { describe, expect, it } from "vitest";

import { HostDriver, SimDriver, VmmError, cudaAvailable } from "../src/index.js";

/**
 * Drivers made in several worker_threads at once (apps/bench runs replays in workers):
 * each worker stitches its own chunks, stamps and verifies its own bytes, and reports
 * its driver's stats; nothing may leak between them (per-instance bookkeeping, ids,
 * stats; the addon's per-environment state). Workers load the built package (dist), as
 * apps/bench does. See the README's "Threads" section for what is and is not safe.
 */

const here = dirname(fileURLToPath(import.meta.url));
const DIST = pathToFileURL(resolve(here, "../dist/index.js")).href;
const WORKERS = 4;
const ROUNDS = 12;
const K = 3; // chunks stitched per round, each with a spacer between

interface Report {
  id: number;
  firstHandleId: number;
  calls: Record<string, number>;
  bytesChecked: number;
  mismatches: number;
  peerReadRefused: boolean;
  peerCode: string;
  peerSame: boolean;
  leaks: { reservations: number; mappings: number; liveBytes: number } | null;
}

// The worker: a plain script (eval), importing the built package.
const WORKER_SRC = `
const { parentPort, workerData } = require("node:worker_threads");
(async () => {
  const vmm = await import(workerData.url);
  const { id, kind, rounds, k, shared } = workerData;
  const vas = new Float64Array(shared, 0, 64);
  const gate = new Int32Array(shared, 512, 4);
  const d = kind === "host" ? new vmm.HostDriver() : kind === "sim" ? new vmm.SimDriver() : vmm.createDriver("cuda");
  const g = d.device.granularity.minimum;
  let firstHandleId = -1, bytesChecked = 0, mismatches = 0, peerReadRefused = false, peerCode = "", peerSame = false;
  const pattern = (round, n) => { const b = new Uint8Array(n); let x = (id * 7919 + round * 104729) | 1; for (let i = 0; i < n; i++) { x ^= x << 13; x ^= x >>> 17; x ^= x << 5; b[i] = x & 0xff; } return b; };
  // everyone starts together, so the drivers really run at the same time
  Atomics.add(gate, 0, 1);
  while (Atomics.load(gate, 0) < workerData.workers) Atomics.wait(gate, 0, Atomics.load(gate, 0), 5);
  for (let r = 0; r < rounds; r++) {
    const chunks = [], spacers = [];
    for (let i = 0; i < k; i++) { chunks.push(d.memCreate(g)); spacers.push(d.memCreate(g)); }
    if (firstHandleId < 0) firstHandleId = chunks[0].id;
    const va = d.memAddressReserve(k * g);
    for (let i = 0; i < k; i++) d.memMap(va + i * g, g, 0, chunks[i]);
    d.memSetAccess(va, k * g);
    // bytes across every seam, then each chunk read through a mapping of its own
    const span = 64 * 1024;
    const data = pattern(r, k * span);
    for (let i = 0; i < k; i++) d.write(va + i * g + g - span / 2, data.subarray(i * span, i * span + span / 2));
    for (let i = 0; i + 1 < k; i++) d.write(va + (i + 1) * g, data.subarray(i * span + span / 2, (i + 1) * span));
    const back = d.read(va + g - span / 2, span);
    for (let i = 0; i < span; i++) if (back[i] !== data[i]) { mismatches++; break; }
    bytesChecked += span;
    const alias = d.memAddressReserve(g);
    d.memMap(alias, g, 0, chunks[1]);
    d.memSetAccess(alias, g);
    const viaAlias = d.read(alias + g - span / 2, span / 2);
    for (let i = 0; i < span / 2; i++) if (viaAlias[i] !== data[span + i]) { mismatches++; break; }
    bytesChecked += span / 2;
    if (r === 0) {
      // publish this worker's range; another driver must refuse it (its bookkeeping has no such range)
      vas[id] = va;
      Atomics.add(gate, 1, 1);
      while (Atomics.load(gate, 1) < workerData.workers) Atomics.wait(gate, 1, Atomics.load(gate, 1), 5);
      const peer = vas[(id + 1) % workerData.workers];
      peerSame = peer === va;
      try { d.read(peer, 8); } catch (e) { peerReadRefused = e instanceof vmm.VmmError; peerCode = e.code; }
      Atomics.add(gate, 2, 1);
      while (Atomics.load(gate, 2) < workerData.workers) Atomics.wait(gate, 2, Atomics.load(gate, 2), 5);
    }
    // unmap only once the work queued on the memory is done (the live engine's rule)
    const done = d.eventCreate();
    d.eventRecord(done, 0);
    d.eventSynchronize(done);
    d.eventDestroy(done);
    d.memUnmap(alias, g);
    d.memAddressFree(alias, g);
    d.memUnmap(va, k * g);
    d.memAddressFree(va, k * g);
    for (const h of [...chunks, ...spacers]) d.memRelease(h);
  }
  const s = d.stats();
  parentPort.postMessage({ id, firstHandleId, calls: s.calls, bytesChecked, mismatches, peerReadRefused, peerCode, peerSame, leaks: d.leaks ? d.leaks() : null });
  d.close();
})().catch((e) => { throw e; });
`;

function runWorkers(kind: "host" | "sim" | "cuda"): Promise<Report[]> {
  const shared = new SharedArrayBuffer(1024);
  return Promise.all(
    Array.from(
      { length: WORKERS },
      (_, id) =>
        new Promise<Report>((res, rej) => {
          const w = new Worker(WORKER_SRC, { eval: true, workerData: { url: DIST, id, kind, rounds: ROUNDS, k: K, shared, workers: WORKERS } });
          w.once("message", (m: Report) => res(m));
          w.once("error", rej);
          w.once("exit", (code) => code !== 0 && rej(new Error(`worker ${id} exited ${code}`)));
        }),
    ),
  );
}

/** The exact calls one worker makes: anything else is another worker's. */
const EXPECTED = {
  memCreate: ROUNDS * 2 * K,
  memRelease: ROUNDS * 2 * K,
  memAddressReserve: ROUNDS * 2,
  memAddressFree: ROUNDS * 2,
  memMap: ROUNDS * (K + 1),
  memUnmap: ROUNDS * 2,
  memSetAccess: ROUNDS * 2,
  memGetInfo: 0,
  memAlloc: 0,
  memFree: 0,
  eventCreate: ROUNDS,
  eventRecord: ROUNDS,
  eventQuery: 0,
  eventSynchronize: ROUNDS,
  eventDestroy: ROUNDS,
  streamWaitEvent: 0,
  streamSynchronize: 0,
  ctxSynchronize: 0,
};

describe.each(["host", "sim", "cuda"] as const)(`%s drivers in ${WORKERS} worker threads at once`, (kind) => {
  const skip = kind === "cuda" && !cudaAvailable();
  it.skipIf(skip)(`${WORKERS} workers each stitch, stamp and verify their own memory; no cross-talk`, async () => {
    const reports = await runWorkers(kind);
    expect(reports.map((r) => r.id).sort()).toEqual([0, 1, 2, 3]);
    for (const r of reports) {
      expect(r.mismatches, `worker ${r.id}`).toBe(0);
      expect(r.bytesChecked).toBe(ROUNDS * 96 * 1024);
      expect(r.calls, `worker ${r.id} stats`).toEqual(EXPECTED);
      // ids are per driver instance: each worker's first handle is its driver's first
      expect(r.firstHandleId).toBe(1);
      if (kind === "sim") {
        // each sim is an address space of its own, reproducible: every worker got the same addresses
        expect(r.peerSame).toBe(true);
      } else {
        // one process address space: every worker got ranges of its own
        expect(r.peerSame).toBe(false);
        // host: a range another worker's driver mapped is unknown to this one: refused, not read.
        // cuda: every thread shares the device's primary context, so a peer's mapped range
        // is readable, as it is for any CUDA code in the process (seen on the H200).
        if (kind === "host") expect(r.peerReadRefused, `worker ${r.id}: ${r.peerCode}`).toBe(true);
      }
      if (r.leaks) expect(r.leaks).toEqual({ reservations: 0, mappings: 0, liveBytes: 0 });
    }
  });
});

describe("two drivers in one thread", () => {
  it.each([() => new HostDriver(), () => new SimDriver()])("keep separate books and stats", (make) => {
    const a = make();
    const b = make();
    const g = a.device.granularity.minimum;
    const h = a.memCreate(g);
    const va = a.memAddressReserve(g);
    a.memMap(va, g, 0, h);
    a.memSetAccess(va, g);
    expect(b.stats().totalCalls).toBe(0);
    expect(() => b.read(va, 8)).toThrow(VmmError);
    const vb = b.memAddressReserve(g);
    expect(() => b.memMap(vb, g, 0, h)).toThrow(TypeError); // a's handle is foreign to b
    b.memAddressFree(vb, g);
    a.memUnmap(va, g);
    a.memAddressFree(va, g);
    a.memRelease(h);
    expect(a.leaks()).toEqual({ reservations: 0, mappings: 0, liveBytes: 0 });
  });
});
