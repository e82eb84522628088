// Prints the node_modules/.pnpm folders (relative to the repo root) that the given
// packages need at run time, following pnpm's symlinks: each .pnpm/<id>/node_modules
// holds the package itself plus links to its dependencies.
//   node scripts/gpu/closure.mjs <repo root> <link>...   e.g. packages/vmm/node_modules/vitest
import { lstatSync, readdirSync, realpathSync } from "node:fs";
import { join, relative, resolve, sep } from "node:path";

const [root, ...starts] = process.argv.slice(2);
const store = resolve(root, "node_modules/.pnpm");
const seen = new Set();

/** The .pnpm/<id> folder holding `dir`, if it is inside the store. */
function storeEntry(dir) {
  const rel = relative(store, dir);
  if (rel.startsWith("..")) return undefined;
  return join(store, rel.split(sep)[0]);
}

function visit(pkgDir) {
  const entry = storeEntry(realpathSync(pkgDir));
  if (!entry || seen.has(entry)) return;
  seen.add(entry);
  const nm = join(entry, "node_modules");
  for (const name of readdirSync(nm)) {
    const names = name.startsWith("@") ? readdirSync(join(nm, name)).map((n) => join(name, n)) : [name];
    for (const n of names) {
      const p = join(nm, n);
      if (lstatSync(p).isSymbolicLink()) {
        try {
          visit(p);
        } catch {
          // a dangling optional dependency (another platform's binary): not needed here
        }
      }
    }
  }
}

for (const s of starts) visit(resolve(root, s));
for (const e of [...seen].sort()) console.log(relative(resolve(root), e));
