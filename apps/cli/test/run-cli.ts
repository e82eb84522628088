import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { isInputError } from "../src/cli-error.js";
import { COMMANDS } from "../src/commands/index.js";

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

export type Outcome = "ok" | "bad-input";

/**
 * `gmlake CMD FILE ...` in this process, as main.ts runs it (parseArgs over the command's
 * options, then its run()), with stdout and stderr swallowed. Throws on an internal failure;
 * `seen.message` gets a bad input's message.
 */
export async function gmlakeInProcess(argv: string[], seen: { message?: string } = {}): Promise<Outcome> {
  const cmd = COMMANDS.find((c) => c.name === argv[0])!;
  const out = process.stdout.write;
  const err = process.stderr.write;
  process.stdout.write = (() => true) as typeof process.stdout.write;
  process.stderr.write = (() => true) as typeof process.stderr.write;
  try {
    const { values, positionals } = parseArgs({ args: argv.slice(1), options: { ...cmd.options, help: { type: "boolean" } }, allowPositionals: true, strict: true });
    await cmd.run(values, positionals);
    return "ok";
  } catch (e) {
    if (isInputError(e)) {
      if (e.message.length === 0) throw new Error("bad input with an empty message");
      seen.message = e.message;
      return "bad-input";
    }
    throw e;
  } finally {
    process.stdout.write = out;
    process.stderr.write = err;
  }
}
