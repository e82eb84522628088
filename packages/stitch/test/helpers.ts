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

/** Deterministic PRNG (mulberry32). */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export const MiB = 1 << 20;
export const GiB = 2 ** 30;
