import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
export const CLI = resolve(here, "../dist/main.js");
export const REPO = resolve(here, "../../..");
/** ../shared beside the repo (GMLAKE_SHARED overrides). */
export const SHARED = process.env.GMLAKE_SHARED ?? join(REPO, "..", "shared");
export const TRACES = join(SHARED, "traces");
export const haveTraces = existsSync(join(TRACES, "gpt2_ft.pickle.gz"));

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

export function cli(args: string[], options: { cwd?: string; env?: Record<string, string> } = {}): CliRun {
  const r = spawnSync(process.execPath, [CLI, ...args], {
    cwd: options.cwd ?? REPO,
    encoding: "utf8",
    env: { ...process.env, ...options.env },
    timeout: 120_000,
    maxBuffer: 64 * 1024 * 1024,
  });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}

export function json<T = Record<string, unknown>>(r: CliRun): T {
  if (r.code !== 0) throw new Error(`gmlake exited ${r.code}: ${r.stderr}`);
  return JSON.parse(r.stdout) as T;
}
