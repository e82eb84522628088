// Packs every workspace package with `pnpm pack` (what `pnpm publish` uploads) and checks
// each tarball as a user would receive it:
//   - no build leftovers (.tsbuildinfo, __pycache__, .o, CMake's cache); every source
//     map's sources are in the tarball;
//   - LICENSE and README.md; no workspace: or catalog: left in the dependencies;
//   - every file that main, types, typesVersions, exports and bin name is there, and every
//     `new URL("...", import.meta.url)` the compiled code resolves (the CLI's default trace);
//   - types for node16/bundler ("types" conditions) and node10 (top-level types, typesVersions);
//   - the platform package holds a stripped addon that needs no glibc newer than it declares.
//   node scripts/release/check-pack.mjs [--keep DIR]   (needs `pnpm build` first)
// Exit 1 with one line per problem.
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, posix, relative } from "node:path";

import { ROOT, typedSubpaths, workspacePackages } from "./workspace.mjs";

const { checkBinary } = await import(join(ROOT, "packages/vmm-linux-x64-gnu/glibc-check.mjs"));

const keepAt = process.argv.indexOf("--keep");
const work = keepAt > 0 ? process.argv[keepAt + 1] : mkdtempSync(join(tmpdir(), "gmlake-pack-"));
mkdirSync(work, { recursive: true });
const problems = [];

function filesUnder(dir, base = dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? filesUnder(join(dir, e.name), base) : [relative(base, join(dir, e.name)).split("\\").join("/")],
  );
}

/** Every file path an exports value names (all conditions). */
function exportTargets(value) {
  if (typeof value === "string") return [value];
  if (value && typeof value === "object") return Object.values(value).flatMap(exportTargets);
  return [];
}

const norm = (p) => posix.normalize(p.replace(/^\.\//, ""));

function checkPackage(dir, manifest) {
  const name = manifest.name;
  const bad = (msg) => problems.push(`${name}: ${msg}`);
  const out = join(work, dir.replace("/", "-"));
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  const packed = execFileSync("pnpm", ["pack", "--pack-destination", out], { cwd: join(ROOT, dir), encoding: "utf8" });
  const tgz = readdirSync(out).find((f) => f.endsWith(".tgz"));
  if (!tgz) return bad(`pnpm pack made no tarball:\n${packed}`);
  execFileSync("tar", ["-xzf", join(out, tgz), "-C", out]);
  const pkg = join(out, "package");
  const files = new Set(filesUnder(pkg));
  const m = JSON.parse(readFileSync(join(pkg, "package.json"), "utf8"));

  for (const f of files) {
    if (/\.tsbuildinfo$|(^|\/)__pycache__\/|\.pyc$|\.o$|(^|\/)CMakeCache\.txt$|(^|\/)CMakeFiles\//.test(f)) bad(`ships a build leftover: ${f}`);
    if (f.endsWith(".map")) {
      const map = JSON.parse(readFileSync(join(pkg, f), "utf8"));
      for (const s of map.sources ?? []) {
        const target = norm(posix.join(posix.dirname(f), map.sourceRoot ?? "", s));
        if (!files.has(target)) bad(`${f} points at ${target}, which is not in the tarball`);
      }
    }
    if (f.endsWith(".js")) {
      const js = readFileSync(join(pkg, f), "utf8");
      for (const u of js.matchAll(/new URL\(\s*["'`](\.{1,2}\/[^"'`$]+)["'`]\s*,\s*import\.meta\.url\s*\)/g)) {
        const target = norm(posix.join(posix.dirname(f), u[1]));
        // A URL may name a folder; a .node is the source build's output, made at install.
        if (!target.endsWith(".node") && !files.has(target) && ![...files].some((x) => x.startsWith(`${target}/`)))
          bad(`${f} resolves ${u[1]} (${target}), which is not in the tarball`);
      }
    }
  }
  for (const need of ["LICENSE", "README.md", "package.json"]) if (!files.has(need)) bad(`no ${need}`);

  for (const field of ["dependencies", "optionalDependencies", "peerDependencies"])
    for (const [dep, spec] of Object.entries(m[field] ?? {}))
      if (/^(workspace|catalog):/.test(spec)) bad(`${field}.${dep} is still ${spec}`);

  const named = [m.main, m.types, ...exportTargets(m.exports), ...Object.values(m.typesVersions?.["*"] ?? {}).flat()];
  const bins = typeof m.bin === "string" ? [m.bin] : Object.values(m.bin ?? {});
  for (const t of [...named, ...bins]) if (t && !files.has(norm(t))) bad(`names ${t}, which is not in the tarball`);
  for (const b of bins) if (files.has(norm(b)) && !readFileSync(join(pkg, norm(b)), "utf8").startsWith("#!")) bad(`bin ${b} has no #! line`);

  const root = m.exports?.["."];
  if (root && typeof root === "object") {
    if (!root.types) bad(`exports["."] has no "types" condition (node16/bundler)`);
    if (!m.types) bad(`no top-level "types" (node10)`);
  }
  for (const sub of Object.keys(typedSubpaths(m)))
    if (!m.typesVersions?.["*"]?.[sub]) bad(`exports["./${sub}"] has no typesVersions entry (node10)`);
  if (!m.license || !m.repository || !m.engines?.node || !(m.keywords?.length > 0)) bad("license, repository, engines.node or keywords missing");

  if (m.name.startsWith("@gmlake/vmm-")) {
    if (!files.has("gmlake_vmm.node")) bad("no gmlake_vmm.node");
    else if (process.platform === "linux") {
      const c = checkBinary(join(pkg, "gmlake_vmm.node"));
      for (const p of c.problems) bad(p.replace(join(pkg, ""), ""));
    }
  }
  const bytes = [...files].reduce((s, f) => s + statSync(join(pkg, f)).size, 0);
  return { name, files: files.size, tarball: statSync(join(out, tgz)).size, unpacked: bytes };
}

const rows = [];
for (const { dir, manifest } of workspacePackages()) {
  if (manifest.private) continue;
  const r = checkPackage(dir, manifest);
  if (r) rows.push(r);
}
for (const r of rows) console.log(`${r.name.padEnd(28)} ${String(r.files).padStart(4)} files  ${(r.tarball / 1024).toFixed(1).padStart(7)} KiB packed  ${(r.unpacked / 1024).toFixed(1).padStart(7)} KiB unpacked`);
if (keepAt < 0) rmSync(work, { recursive: true, force: true });
if (problems.length > 0) {
  console.error(`check-pack: ${problems.length} problem(s):\n  ${problems.join("\n  ")}`);
  process.exit(1);
}
console.log(`check-pack: ${rows.length} tarballs clean`);
