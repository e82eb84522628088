// Compares a misuse-probe result (bench/misuse-probe.mjs cuda --json FILE) with the table
// host and sim are tested against (packages/vmm/test/fixtures/h200-misuse.json): prints
// each case that differs, exits 1 if any does. Run by full-run.sh.
//   node scripts/gpu/misuse-check.mjs <probe.json> <fixture.json>
import { readFileSync } from "node:fs";

const [probeFile, fixtureFile] = process.argv.slice(2);
if (!probeFile || !fixtureFile) {
  console.error("usage: node misuse-check.mjs <probe.json> <fixture.json>");
  process.exit(2);
}
const got = JSON.parse(readFileSync(probeFile, "utf8")).results;
const want = JSON.parse(readFileSync(fixtureFile, "utf8")).results;
let diff = 0;
for (const k of new Set([...Object.keys(want), ...Object.keys(got)])) {
  if (got[k] !== want[k]) {
    diff++;
    console.log(`differs: ${k}: this GPU ${got[k] ?? "(no case)"}, fixture ${want[k] ?? "(no case)"}`);
  }
}
console.log(`misuse table: ${Object.keys(want).length - diff} of ${Object.keys(want).length} cases as in the fixture${diff ? `, ${diff} differ` : ""}`);
process.exit(diff ? 1 : 0);
