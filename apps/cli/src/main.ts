#!/usr/bin/env node
import { terminalSafe } from "@gmlake/output";
import { EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_OUTPUT, EXIT_RESOURCE, UsageError, isInputError, isOutputError, isResourceError } from "./cli-error.js";
import type { Command } from "./command.js";
import { COMMANDS } from "./commands/index.js";
import { runCli } from "./outside-policy.js";
import { setReadLimits } from "./load-trace.js";
import { printText } from "./outputs.js";
import { formatHelp } from "./help.js";
import { parseCommandLine } from "./parse-args.js";
import { didYouMean } from "./suggest.js";

const HELP = `gmlake: how much GPU memory each allocator wastes on your PyTorch job

Usage: gmlake <command> [options]

Commands:
${COMMANDS.map((c) => `  ${c.name.padEnd(9)} ${c.summary}`).join("\n")}

Run 'gmlake <command> --help' for a command's options and an example.
A trace argument of '-' reads stdin. Every command takes --limit NAME=N (repeatable) to
raise one of the reader's resource limits (maxInputBytes, maxInflatedBytes,
maxStackDepth, maxMemoEntries, maxValueBytes, maxDecodedBytes, maxIntBytes; also
GMLAKE_READ_LIMITS=NAME=N,NAME=N): a ...Bytes limit takes a size as --capacity does
(64MiB, 64MB), the others a count (4e6).
Without a trace argument, compare runs on a small embedded trace.
Exit codes: 0 success (an out-of-memory found by a replay is a result), 2 bad input or usage,
3 an output could not be written (disk full, read-only, stdout closed), 4 a limit of this
machine hit by the host driver (ulimit -n, vm.max_map_count), 1 internal failure,
or for verify: a mismatch.`;

async function runCommand(cmd: Command, argv: string[]): Promise<number> {
  const { values, positionals } = parseCommandLine(cmd, argv);
  if (values.help) {
    printText(formatHelp(cmd.help));
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
      process.stderr.write(formatHelp(HELP) + "\n");
      return EXIT_BAD_INPUT;
    }
    if (name === "--help" || name === "-h" || name === "help") {
      printText(formatHelp(HELP));
      return 0;
    }
    if (name === "--version" || name === "-V") {
      printText("gmlake 0.1.0");
      return 0;
    }
    const cmd = COMMANDS.find((c) => c.name === name);
    if (!cmd) {
      const names = COMMANDS.map((c) => c.name);
      throw new UsageError(`unknown command '${name}'${didYouMean(name, names) || ` (commands: ${names.join(", ")})`}`);
    }
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

const code = await runCli(main, process.argv.slice(2), new URL(import.meta.url), (line) => report(line, EXIT_BAD_INPUT));
if (code !== null) process.exitCode = code;
