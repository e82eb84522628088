// One version and one set of shared metadata for every package in the workspace.
//   node scripts/release/sync.mjs            write the root's version, license, repository,
//                                            author, homepage, bugs, engines.node and
//                                            publishConfig.access (public) into
//                                            every package, the node10 type fallbacks
//                                            (top-level "types", typesVersions) from exports
//                                            and, beside "dist" in files, "src" (the source
//                                            maps point there) and "!dist/**/*.tsbuildinfo";
//                                            copy the root LICENSE into every package
//   node scripts/release/sync.mjs 0.2.0      set the version first (root and every package)
//   node scripts/release/sync.mjs --check    exit 1, naming each difference, if a write is due
// `workspace:*` dependencies become this exact version when pnpm publishes.
import { copyFileSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { ROOT, rootManifest, typedSubpaths, workspacePackages } from "./workspace.mjs";

const args = process.argv.slice(2);
const check = args.includes("--check");
const newVersion = args.find((a) => !a.startsWith("--"));
if (newVersion !== undefined && !/^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/.test(newVersion)) {
  console.error(`sync: not a semver version: ${newVersion}`);
  process.exit(2);
}

const root = rootManifest();
if (newVersion && !check) {
  root.version = newVersion;
  writeFileSync(join(ROOT, "package.json"), `${JSON.stringify(root, null, 2)}\n`);
}

/** The manifest as it should be: shared fields from the root, type fallbacks from exports. */
function expected(dir, m) {
  const e = structuredClone(m);
  e.version = root.version;
  e.license = root.license;
  e.author = root.author;
  e.homepage = `${root.homepage.replace(/#.*$/, "")}/tree/main/${dir}#readme`;
  e.bugs = root.bugs;
  e.repository = { ...root.repository, directory: dir };
  e.engines = { ...(m.engines ?? {}), node: root.engines.node };
  // Scoped packages are private on a first `npm publish` unless told otherwise.
  e.publishConfig = { ...(m.publishConfig ?? {}), access: "public" };
  // dist's source maps point at src: ship it; tsc's build info stays home.
  if (e.files?.includes("dist")) {
    const extra = [existsSync(join(ROOT, dir, "src")) ? "src" : null, "!dist/**/*.tsbuildinfo"].filter((f) => f && !e.files.includes(f));
    e.files.splice(e.files.indexOf("dist") + 1, 0, ...extra);
  }
  const main = m.exports?.["."];
  if (main && typeof main === "object") {
    e.main = main.default;
    e.types = main.types;
  }
  const subpaths = typedSubpaths(m);
  if (Object.keys(subpaths).length > 0) e.typesVersions = { "*": subpaths };
  else delete e.typesVersions;
  return e;
}

const diffs = [];
for (const { dir, manifest } of workspacePackages()) {
  const want = expected(dir, manifest);
  for (const key of new Set([...Object.keys(manifest), ...Object.keys(want)])) {
    if (JSON.stringify(manifest[key]) !== JSON.stringify(want[key])) diffs.push(`${dir}/package.json: "${key}"`);
  }
  const license = join(ROOT, dir, "LICENSE");
  if (!existsSync(license) || !readFileSync(license).equals(readFileSync(join(ROOT, "LICENSE")))) {
    diffs.push(`${dir}/LICENSE`);
    if (!check) copyFileSync(join(ROOT, "LICENSE"), license);
  }
  if (!check) {
    // Field order of a hand-written manifest: the shared fields after "license".
    const ordered = {};
    for (const k of ["name", "version", "description", "keywords", "type", "license", "author", "homepage", "bugs", "repository", "engines"])
      if (want[k] !== undefined) ordered[k] = want[k];
    for (const k of Object.keys(manifest)) if (!(k in ordered) && want[k] !== undefined) ordered[k] = want[k];
    for (const k of Object.keys(want)) if (!(k in ordered)) ordered[k] = want[k];
    writeFileSync(join(ROOT, dir, "package.json"), `${JSON.stringify(ordered, null, 2)}\n`);
  }
}
if (check && diffs.length > 0) {
  console.error(`sync --check: ${diffs.length} field(s) differ from what \`node scripts/release/sync.mjs\` writes:\n  ${diffs.join("\n  ")}`);
  process.exit(1);
}
if (!check) console.log(`sync: ${workspacePackages().length} packages at ${root.version}${diffs.length ? ` (${diffs.length} field(s) written)` : ""}`);
