import { existsSync, readFileSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, isAbsolute, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { StitchError } from "../core/errors.js";
import { getPolicy, notePolicyModule, registerPolicy, type Policy } from "../core/policy.js";
import { policyCallWatch } from "./policy-guard.js";

/** A path (./x.js, ../x.mjs, /abs/x.js, x.js) rather than a package name. */
function looksLikePath(spec: string): boolean {
  return spec.startsWith(".") || isAbsolute(spec) || /\.(c|m)?js$/.test(spec) || spec.includes("\\");
}

/** The entry a package's "exports" (or "main") gives for import. */
function packageEntry(dir: string): string | null {
  let pkg: { exports?: unknown; main?: string };
  try {
    pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
  } catch {
    return null;
  }
  let e: unknown = pkg.exports;
  if (e !== null && typeof e === "object" && !Array.isArray(e) && "." in e) e = (e as Record<string, unknown>)["."];
  for (let depth = 0; depth < 4 && e !== null && typeof e === "object" && !Array.isArray(e); depth++) {
    const c = e as Record<string, unknown>;
    e = c.import ?? c.node ?? c.default ?? null;
  }
  const rel = typeof e === "string" ? e : (pkg.main ?? "index.js");
  return join(dir, rel);
}

/** The path of a file: URL (as the live bridge's config may give one); null for anything else. */
function filePathOf(spec: string): string | null {
  if (!/^file:/i.test(spec)) return null;
  try {
    return fileURLToPath(spec);
  } catch (e) {
    throw new StitchError("BAD_MODULE", `policy module ${spec}: not a file URL of this machine (${(e as Error).message})`);
  }
}

/**
 * Where a --policy-module points: a file (relative to `from`, or a file: URL) or a package
 * name resolved as Node resolves it from `from` (node_modules up the tree). Returns an
 * absolute path.
 */
export function resolvePolicyModule(spec: string, from: string = process.cwd()): string {
  if (typeof spec !== "string" || spec.trim() === "") throw new StitchError("BAD_MODULE", "Expected a policy module path or package name but received an empty string");
  const url = filePathOf(spec);
  if (url !== null || looksLikePath(spec)) {
    const p = url ?? resolve(from, spec);
    if (!existsSync(p) || !statSync(p).isFile()) throw new StitchError("BAD_MODULE", `policy module ${spec}: no such file (${p})`);
    return p;
  }
  try {
    return createRequire(join(from, "noop.js")).resolve(spec);
  } catch {
    // an import-only package ("exports": {"import": ...}): find it in node_modules up the tree
    for (let d = resolve(from); ; d = dirname(d)) {
      const entry = packageEntry(join(d, "node_modules", spec));
      if (entry !== null && existsSync(entry)) return entry;
      if (dirname(d) === d) break;
    }
  }
  throw new StitchError("BAD_MODULE", `policy module ${spec}: no file of that name and no package of that name installed (from ${from})`);
}

function isPolicy(p: unknown): p is Policy {
  return typeof p === "object" && p !== null && typeof (p as Policy).name === "string" && typeof (p as Policy).create === "function";
}

/**
 * Load a module whose default export is a policy or a list of policies, and register them
 * (a policy the module registered itself at import, in this copy of @gmlake/stitch or in
 * its own, is the same object in the one registry: nothing changes). The one loader of the
 * CLI, the bench and the live engine (@gmlake/torch-alloc's policyModule). Errors are
 * StitchError BAD_MODULE (cannot load, no policy exported) or the registry's
 * (DUPLICATE_POLICY: another policy has that name; BAD_ARGUMENT: a malformed policy).
 */
export async function loadPolicyModule(spec: string, from: string = process.cwd()): Promise<Policy[]> {
  const path = resolvePolicyModule(spec, from);
  let mod: { default?: unknown };
  // a watchdog (apps/cli's, apps/bench's) times the import as one call of the module's
  const watch = policyCallWatch();
  watch?.enter(`policy module ${spec}`, "import");
  try {
    mod = (await import(pathToFileURL(path).href)) as { default?: unknown };
  } catch (e) {
    throw new StitchError("BAD_MODULE", `cannot load the policy module ${spec}: ${(e as Error)?.message?.split("\n")[0] ?? String(e)}`);
  } finally {
    watch?.leave();
  }
  const d = mod.default;
  const list = Array.isArray(d) ? d : [d];
  if (list.length === 0 || !list.every(isPolicy)) {
    throw new StitchError("BAD_MODULE", `policy module ${spec} has no policy as its default export (export default a policy object or a list of them)`);
  }
  for (const p of list) {
    registerPolicy(p);
    notePolicyModule(p, spec);
  }
  return list.map((p) => getPolicy(p.name));
}

/** Load several modules (--policy-module, repeatable); returns the names of the policies they export, in order. */
export async function loadPolicyModules(specs: readonly string[], from: string = process.cwd()): Promise<string[]> {
  const names: string[] = [];
  for (const s of specs) for (const p of await loadPolicyModule(s, from)) if (!names.includes(p.name)) names.push(p.name);
  return names;
}
