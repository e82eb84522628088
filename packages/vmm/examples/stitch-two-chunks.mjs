// Two physical chunks, created apart, stitched side by side into one virtual range with
// the host driver; a write across the seam reads back whole, and each chunk holds its half.
//   pnpm --filter @gmlake/vmm build && node packages/vmm/examples/stitch-two-chunks.mjs
import { createDriver } from "@gmlake/vmm";

const d = createDriver("host"); // or "cuda" on a GPU, or "sim"
const g = d.device.granularity.minimum; // 2 MiB

const a = d.memCreate(g);
const spacer = d.memCreate(g); // so a and b are not neighbours
const b = d.memCreate(g);

const va = d.memAddressReserve(2 * g);
d.memMap(va, g, 0, a);
d.memMap(va + g, g, 0, b);
d.memSetAccess(va, 2 * g); // one call over both mappings

const text = new TextEncoder().encode("stitched across the seam");
d.write(va + g - 8, text); // 8 bytes land in a, the rest in b
console.log(new TextDecoder().decode(d.read(va + g - 8, text.length)));

// b seen on its own, through a second mapping: it starts with what was written past the seam.
const view = d.memAddressReserve(g);
d.memMap(view, g, 0, b);
d.memSetAccess(view, g);
console.log(new TextDecoder().decode(d.read(view, text.length - 8)));

d.memUnmap(view, g);
d.memAddressFree(view, g);
d.memUnmap(va, 2 * g); // both mappings at once
d.memAddressFree(va, 2 * g);
for (const h of [a, spacer, b]) d.memRelease(h);
console.log(d.stats().calls, `${d.stats().totalTimeUs.toFixed(1)} us in the driver`);
d.close();
