#!/usr/bin/env node
import { parseArgs } from "node:util";
import { terminalSafe } from "@gmlake/output";
import { EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_OUTPUT, EXIT_RESOURCE, UsageError, isInputError, isOutputError, isResourceError } from "./cli-error.js";
import type { Command } from "./command.js";
import { COMMANDS } from "./commands/index.js";
import { setReadLimits } from "./load-trace.js";
import { printText } from "./outputs.js";

const HELP = `gmlake: how much GPU memory each allocator wastes on your PyTorch job

Usage: gmlake <command> [options]

Commands:
${COMMANDS.map((c) => `  ${c.name.padEnd(9)} ${c.summary}`).join("\n")}

Run 'gmlake <command> --help' for a command's options and an example.
A trace argument of '-' reads stdin. Every command takes --limit NAME=N (repeatable) to
raise one of the reader's resource limits (maxInputBytes, maxInflatedBytes,
maxStackDepth, maxMemoEntries, maxValueBytes, maxDecodedBytes, maxIntBytes; also
GMLAKE_READ_LIMITS=NAME=N,NAME=N).
Without a trace argument, compare runs on a small embedded trace.
Exit codes: 0 success (an out-of-memory found by a replay is a result), 2 bad input or usage,
3 an output could not be written (disk full, read-only, stdout closed), 4 a limit of this
machine hit by the host driver (ulimit -n, vm.max_map_count), 1 internal failure,
or for verify: a mismatch.`;

/** `--export FORMAT FILE` takes two words; parseArgs takes one, so join them as FORMAT=FILE. */
function joinExportArgs(argv: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = argv[i + 1];
    const file = argv[i + 2];
    if (a === "--export" && next !== undefined && !next.includes("=") && file !== undefined && !file.startsWith("-")) {
      out.push(`--export=${next}=${file}`);
      i += 2;
    } else out.push(a);
  }
  return out;
}

async function runCommand(cmd: Command, argv: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args: joinExportArgs(argv),
    options: { ...cmd.options, help: { type: "boolean", short: "h" }, limit: { type: "string", multiple: true } },
    allowPositionals: cmd.positionals !== "none",
    strict: true,
  });
  if (values.help) {
    printText(cmd.help);
    return 0;
  }
  if (cmd.positionals === "one" && positionals.length !== 1) {
    throw new UsageError(`${cmd.name} takes exactly one trace file (see 'gmlake ${cmd.name} --help')`);
  }
  if (cmd.positionals === "many" && positionals.length === 0) {
    throw new UsageError(`${cmd.name} needs at least one trace file (see 'gmlake ${cmd.name} --help')`);
  }
  setReadLimits(values.limit);
  const { limit: _limit, ...rest } = values;
  return (await cmd.run(rest, positionals)) ?? 0;
}

export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  try {
    if (name === undefined) {
      process.stderr.write(HELP + "\n");
      return EXIT_BAD_INPUT;
    }
    if (name === "--help" || name === "-h" || name === "help") {
      printText(HELP);
      return 0;
    }
    if (name === "--version" || name === "-V") {
      printText("gmlake 0.1.0");
      return 0;
    }
    const cmd = COMMANDS.find((c) => c.name === name);
    if (!cmd) throw new UsageError(`unknown command '${name}' (commands: ${COMMANDS.map((c) => c.name).join(", ")})`);
    return await runCommand(cmd, rest);
  } catch (e) {
    // One line, with whatever of the user's data it quotes made safe for a terminal.
    const line = (e instanceof Error ? e.message : String(e)).split("\n")[0]!;
    if (isInputError(e)) return report(line, EXIT_BAD_INPUT);
    if (isOutputError(e)) return report(line, EXIT_OUTPUT);
    if (isResourceError(e)) return report(`the host driver hit a limit of this machine (not the device's memory): ${line}`, EXIT_RESOURCE);
    report(`internal error: ${line}`, EXIT_INTERNAL);
    if (process.env.GMLAKE_DEBUG && e instanceof Error) process.stderr.write(`${e.stack}\n`);
    return EXIT_INTERNAL;
  }
}

function report(line: string, code: number): number {
  try {
    process.stderr.write(`gmlake: ${terminalSafe(line)}\n`);
  } catch {
    // stderr is gone too: the exit code still tells
  }
  return code;
}

// Output goes through writeStdout (outputs.ts), which raises write errors itself; a
// stray stream error (EPIPE after the last write) must not become an uncaught exception.
process.stdout.on("error", () => {});

const code = await main(process.argv.slice(2));
process.exitCode = code;
