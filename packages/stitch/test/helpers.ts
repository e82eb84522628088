import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** ../shared relative to the repo root, or $GMLAKE_SHARED. */
export function sharedDir(): string {
  if (process.env.GMLAKE_SHARED) return process.env.GMLAKE_SHARED;
  const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
  return join(repoRoot, "..", "shared");
}

export function tracePath(name: string): string | null {
  const p = join(sharedDir(), "traces", name);
  return existsSync(p) ? p : null;
}

/** Deterministic PRNG: the one the fault injector uses, so seeds mean the same everywhere. */
import { mulberry32 as rng } from "@gmlake/vmm";
export { rng };

export const MiB = 1 << 20;
export const GiB = 2 ** 30;
