// The snapshot files (.pickle, .pickle.gz) under a folder, sorted, sub-folders included;
// none when it does not exist. Shared by the bench scripts.
import { existsSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";

export function traceFiles(dir) {
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .sort()
    .flatMap((n) => (statSync(join(dir, n)).isDirectory() ? traceFiles(join(dir, n)) : /\.pickle(\.gz)?$/.test(n) ? [join(dir, n)] : []));
}
