// The publishable packages of the workspace and what they share, read from the root
// package.json (version, license, repository, author, engines.node): one place to change
// them, scripts/release/sync.mjs to write them into every package.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

export function readJson(path) {
  return JSON.parse(readFileSync(path, "utf8"));
}

export const rootManifest = () => readJson(join(ROOT, "package.json"));

/** Every workspace package: { dir (relative to the root), manifest }, packages/* then apps/*. */
export function workspacePackages() {
  const out = [];
  for (const group of ["packages", "apps"]) {
    for (const name of readdirSync(join(ROOT, group)).sort()) {
      const dir = `${group}/${name}`;
      const path = join(ROOT, dir, "package.json");
      if (existsSync(path)) out.push({ dir, manifest: readJson(path) });
    }
  }
  return out;
}

/** Subpath exports ("./policy") with a "types" condition: node10 finds them through typesVersions. */
export function typedSubpaths(manifest) {
  const out = {};
  for (const [key, target] of Object.entries(manifest.exports ?? {})) {
    if (key === "." || key.includes("*") || typeof target !== "object" || !target.types) continue;
    out[key.slice(2)] = [target.types];
  }
  return out;
}
