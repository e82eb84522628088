import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The repo root: the nearest folder above this file holding pnpm-workspace.yaml. */
export function repoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, "pnpm-workspace.yaml"))) {
    const up = dirname(dir);
    if (up === dir) throw new Error("repo root not found");
    dir = up;
  }
  return dir;
}

/** ../shared/traces relative to the repo root (or $GMLAKE_SHARED/traces), or null when absent. */
export function tracesDir(): string | null {
  const shared = process.env.GMLAKE_SHARED ?? resolve(repoRoot(), "..", "shared");
  const dir = join(shared, "traces");
  return existsSync(join(dir, "README.md")) ? dir : null;
}

export const fixture = (name: string): string => join(dirname(fileURLToPath(import.meta.url)), "fixtures", name);

export const SKIP_MESSAGE = "shared traces not found (set GMLAKE_SHARED or put them at <repo root>/../shared/traces): skipping";
