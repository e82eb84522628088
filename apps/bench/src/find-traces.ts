import { existsSync, readdirSync, statSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** ../shared/traces beside the repo (GMLAKE_SHARED overrides the shared folder). */
export function defaultTraceDir(): string {
  if (process.env.GMLAKE_SHARED) return join(process.env.GMLAKE_SHARED, "traces");
  const repo = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
  return join(repo, "..", "shared", "traces");
}

const TRACE_FILE = /\.(pickle|pkl)(\.gz)?$/;

/** Every snapshot file in `dir` and its sub-folders, sorted by path. */
export function findTraces(dir: string): string[] {
  if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new Error(`no trace folder at ${dir}`);
  const out: string[] = [];
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (TRACE_FILE.test(e.name)) out.push(p);
    }
  };
  walk(dir);
  return out.sort();
}

/** "gpt2_ft_expandable.pickle.gz" -> "gpt2_ft_expandable"; small/ files keep their folder. */
export function traceLabel(dir: string, path: string): string {
  const rel = path.slice(dir.length + 1).replace(/\\/g, "/");
  return rel.replace(TRACE_FILE, "") || basename(path);
}
