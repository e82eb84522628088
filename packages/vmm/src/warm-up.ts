import type { VmmDriver } from "./driver.js";

/**
 * Makes each kind of driver call a few times at a few sizes, leaving nothing behind. The
 * first calls of a process pay the driver's lazy initialization (on the H200: caching's
 * gpt2_ft replay took 84.6 ms of driver time as a worker's first task, 25.4 ms later for
 * the same calls): a benchmark runs this untimed before it measures, so that cost, the
 * process's and not an allocator's, lands on no trace.
 */
export function warmUpDriver(d: VmmDriver, granules: readonly number[] = [1, 10, 32, 256], rounds = 4): void {
  const g = d.device.granularity.recommended;
  for (const n of granules) {
    const size = n * g;
    for (let i = 0; i < rounds; i++) {
      const h = d.memCreate(size);
      const va = d.memAddressReserve(size);
      d.memMap(va, size, 0, h);
      d.memSetAccess(va, size);
      d.memUnmap(va, size);
      d.memAddressFree(va, size);
      d.memRelease(h);
      d.memFree(d.memAlloc(size));
    }
  }
}
