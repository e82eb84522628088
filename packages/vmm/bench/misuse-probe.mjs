// Asks a driver how it answers each misuse, one line per case, so host and sim can be
// checked against real CUDA: `node bench/misuse-probe.mjs cuda|host|sim [--json FILE]`.
// Run after `pnpm --filter @gmlake/vmm build`. Each case cleans up after itself.
import { writeFileSync } from "node:fs";

import { createDriver } from "../dist/index.js";

const name = process.argv[2] ?? "host";
const jsonAt = process.argv.indexOf("--json");
const d = createDriver(name);
const g = d.device.granularity.minimum;
const PiB = 2 ** 50;

function code(f) {
  try {
    f();
    return "ok";
  } catch (e) {
    return e?.code ?? `${e?.constructor?.name}: ${e?.message}`;
  }
}
/** Runs `body(ctx)` with fresh handles/reservations, cleaning up whatever is left, swallowing cleanup errors. */
function scenario(body) {
  const handles = [];
  const res = [];
  const maps = [];
  const ctx = {
    create: (n) => {
      const h = d.memCreate(n * g);
      handles.push(h);
      return h;
    },
    reserve: (n) => {
      const va = d.memAddressReserve(n * g);
      res.push([va, n * g]);
      return va;
    },
    map: (va, n, h, offset = 0) => {
      d.memMap(va, n * g, offset, h);
      maps.push([va, n * g]);
    },
    forget: (h) => handles.splice(handles.indexOf(h), 1),
  };
  let out;
  try {
    out = body(ctx);
  } catch (e) {
    out = `setup failed: ${e?.code ?? e?.message}`;
  }
  for (const [va, size] of maps.reverse()) code(() => d.memUnmap(va, size));
  for (const [va, size] of res) code(() => d.memAddressFree(va, size));
  for (const h of handles) code(() => d.memRelease(h));
  return out;
}

const cases = {
  "memCreate(g+1)": () => code(() => d.memRelease(d.memCreate(g + 1))),
  "memCreate(0)": () => code(() => d.memCreate(0)),
  "memCreate(1 PiB)": () => code(() => d.memRelease(d.memCreate(PiB))),
  "reserve(0)": () => code(() => d.memAddressReserve(0)),
  "reserve(g+1)": () => code(() => d.memAddressFree(d.memAddressReserve(g + 1), g + 1)),
  "reserve(1 PiB)": () => code(() => d.memAddressFree(d.memAddressReserve(PiB), PiB)),
  "reserve(g, alignment 3g)": () => code(() => d.memAddressFree(d.memAddressReserve(g, 3 * g), g)),
  "map over the same mapped range": () =>
    scenario(({ create, reserve, map }) => {
      const h = create(1);
      const va = reserve(2);
      map(va, 1, h);
      return code(() => map(va, 1, h));
    }),
  "map overlapping the tail of a mapping": () =>
    scenario(({ create, reserve, map }) => {
      const h = create(2);
      const h2 = create(1);
      const va = reserve(4);
      map(va, 2, h);
      return code(() => map(va + g, 1, h2));
    }),
  "map with offset g (of a 2g handle)": () =>
    scenario(({ create, reserve, map }) => {
      const h = create(2);
      const va = reserve(2);
      return code(() => map(va, 1, h, g));
    }),
  "map g of a 2g handle (offset 0)": () =>
    scenario(({ create, reserve, map }) => {
      const h = create(2);
      const va = reserve(2);
      return code(() => map(va, 1, h));
    }),
  "map size unaligned (g+1)": () =>
    scenario(({ create, reserve }) => {
      const h = create(2);
      const va = reserve(2);
      return code(() => d.memMap(va, g + 1, 0, h));
    }),
  "map past the handle's end": () =>
    scenario(({ create, reserve, map }) => {
      const h = create(1);
      const va = reserve(4);
      return code(() => map(va, 2, h));
    }),
  "map past the reservation's end": () =>
    scenario(({ create, reserve, map }) => {
      const h = create(2);
      const va = reserve(1);
      return code(() => map(va, 2, h));
    }),
  "map at a freed (unreserved) address": () =>
    scenario(({ create }) => {
      const h = create(1);
      const va = d.memAddressReserve(g);
      d.memAddressFree(va, g);
      const r = code(() => d.memMap(va, g, 0, h));
      if (r === "ok") code(() => d.memUnmap(va, g));
      return r;
    }),
  "map a released handle": () =>
    scenario(({ create, reserve, map, forget }) => {
      const h = create(1);
      const va = reserve(1);
      d.memRelease(h);
      forget(h);
      return code(() => map(va, 1, h));
    }),
  "unmap what is not mapped": () => scenario(({ reserve }) => code(() => d.memUnmap(reserve(2), g))),
  "unmap half of a 2g mapping": () =>
    scenario(({ create, reserve, map }) => {
      const h = create(2);
      const va = reserve(2);
      map(va, 2, h);
      return code(() => d.memUnmap(va, g));
    }),
  "unmap two adjacent mappings at once": () =>
    scenario(({ create, reserve }) => {
      const a = create(1);
      const b = create(1);
      const va = reserve(2);
      d.memMap(va, g, 0, a);
      d.memMap(va + g, g, 0, b);
      return code(() => d.memUnmap(va, 2 * g));
    }),
  "unmap a mapping and a gap": () =>
    scenario(({ create, reserve, map }) => {
      const a = create(1);
      const va = reserve(2);
      map(va, 1, a);
      return code(() => d.memUnmap(va, 2 * g));
    }),
  "setAccess on unmapped bytes": () => scenario(({ reserve }) => code(() => d.memSetAccess(reserve(1), g))),
  "setAccess on half of a 2g mapping": () =>
    scenario(({ create, reserve, map }) => {
      const h = create(2);
      const va = reserve(2);
      map(va, 2, h);
      return code(() => d.memSetAccess(va + g, g));
    }),
  "setAccess over two adjacent mappings": () =>
    scenario(({ create, reserve, map }) => {
      const a = create(1);
      const b = create(1);
      const va = reserve(2);
      map(va, 1, a);
      map(va + g, 1, b);
      return code(() => d.memSetAccess(va, 2 * g));
    }),
  "setAccess over a mapping and a gap": () =>
    scenario(({ create, reserve, map }) => {
      const a = create(1);
      const va = reserve(2);
      map(va, 1, a);
      return code(() => d.memSetAccess(va, 2 * g));
    }),
  "addressFree with a live mapping": () =>
    scenario(({ create, reserve, map }) => {
      const h = create(1);
      const va = reserve(1);
      map(va, 1, h);
      return code(() => d.memAddressFree(va, g));
    }),
  "addressFree with the wrong size": () => scenario(({ reserve }) => code(() => d.memAddressFree(reserve(2), g))),
  "addressFree inside a reservation": () =>
    scenario(({ reserve }) => {
      const va = reserve(2);
      return code(() => d.memAddressFree(va + g, g));
    }),
  "release while mapped, then use the mapping": () =>
    scenario(({ create, reserve, map, forget }) => {
      const h = create(1);
      const va = reserve(1);
      map(va, 1, h);
      d.memSetAccess(va, g);
      d.memRelease(h);
      forget(h);
      d.memset(va, 9, 64);
      return d.read(va, 4).every((x) => x === 9) ? "ok (data still there)" : "data lost";
    }),
  "release twice": () =>
    scenario(({ create, forget }) => {
      const h = create(1);
      d.memRelease(h);
      forget(h);
      return code(() => d.memRelease(h));
    }),
  "memAlloc(0)": () => code(() => d.memAlloc(0)),
  "memAlloc(1 PiB)": () => code(() => d.memFree(d.memAlloc(PiB))),
  "memFree(reserved address)": () => scenario(({ reserve }) => code(() => d.memFree(reserve(1)))),
  "memFree twice": () => {
    const p = d.memAlloc(g);
    d.memFree(p);
    return code(() => d.memFree(p));
  },
  // Last: copies from bad addresses (on cuda these could upset the context).
  "read reserved, unmapped bytes": () => scenario(({ reserve }) => code(() => d.read(reserve(1), 8))),
  "read mapped bytes without setAccess": () =>
    scenario(({ create, reserve, map }) => {
      const h = create(1);
      const va = reserve(1);
      map(va, 1, h);
      return code(() => d.read(va, 8));
    }),
};

const results = {};
for (const [label, f] of Object.entries(cases)) {
  results[label] = f();
  console.log(`${label.padEnd(45)} ${results[label]}`);
}
let healthy;
try {
  const p = d.memAlloc(g);
  d.memset(p, 1, 8);
  healthy = d.read(p, 8).every((x) => x === 1) ? "ok" : "wrong data";
  d.memFree(p);
} catch (e) {
  healthy = e?.code ?? String(e);
}
console.log(`${"driver still healthy afterwards".padEnd(45)} ${healthy}`);
results["driver still healthy afterwards"] = healthy;
if (jsonAt > 0) writeFileSync(process.argv[jsonAt + 1], JSON.stringify({ driver: name, device: d.device, results }, null, 2));
d.close();
