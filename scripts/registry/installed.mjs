// What an install put in <dir>/node_modules: every package (nested ones too) and the bytes
// on disk. With --expect a,b,c: exit 1 unless exactly those packages are there.
//   node scripts/registry/installed.mjs <dir> [--expect @gmlake/stitch,...] [--max-mb 5]
import { lstatSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";

const [dir, ...rest] = process.argv.slice(2);
const opt = (name) => {
  const i = rest.indexOf(name);
  return i >= 0 ? rest[i + 1] : undefined;
};

const found = new Map(); // name -> version
function packagesIn(nm) {
  let entries;
  try {
    entries = readdirSync(nm);
  } catch {
    return;
  }
  for (const e of entries) {
    if (e.startsWith(".")) continue;
    const names = e.startsWith("@") ? readdirSync(join(nm, e)).map((n) => `${e}/${n}`) : [e];
    for (const name of names) {
      const m = JSON.parse(readFileSync(join(nm, name, "package.json"), "utf8"));
      found.set(name, m.version);
      packagesIn(join(nm, name, "node_modules"));
    }
  }
}
function bytes(p) {
  const s = lstatSync(p);
  return s.isDirectory() ? readdirSync(p).reduce((t, e) => t + bytes(join(p, e)), 0) : s.size;
}

packagesIn(join(dir, "node_modules"));
const total = bytes(join(dir, "node_modules"));
const names = [...found.keys()].sort();
console.log(`installed: ${names.length} packages, ${(total / 1e6).toFixed(2)} MB (${total} bytes): ${names.map((n) => `${n}@${found.get(n)}`).join(" ")}`);

const problems = [];
const expect = opt("--expect");
if (expect) {
  const want = expect.split(",").sort();
  const extra = names.filter((n) => !want.includes(n)), missing = want.filter((n) => !found.has(n));
  if (extra.length) problems.push(`unexpected: ${extra.join(" ")}`);
  if (missing.length) problems.push(`missing: ${missing.join(" ")}`);
}
const maxMb = opt("--max-mb");
if (maxMb && total > Number(maxMb) * 1e6) problems.push(`${(total / 1e6).toFixed(2)} MB is over ${maxMb} MB`);
if (problems.length) {
  console.error(`installed.mjs: ${problems.join("; ")}`);
  process.exit(1);
}
