import { parseArgs } from "node:util";
import { UsageError } from "./cli-error.js";
import type { Command, OptionSpec, ParsedValues } from "./command.js";
import { didYouMean } from "./suggest.js";

/** Options every command takes beside its own. */
export const COMMON_OPTIONS: OptionSpec = { help: { type: "boolean", short: "h" }, limit: { type: "string", multiple: true } };

/**
 * Rewrites argv for parseArgs: `--export FORMAT FILE` (two words) as --export=FORMAT=FILE,
 * and a value that starts with a dash after an option that takes one (`--capacity -1`) as
 * --capacity=-1, so that the option's own check says what is wrong with it.
 */
function normalize(argv: readonly string[], options: OptionSpec): string[] {
  const takesValue = new Set<string>();
  for (const [name, o] of Object.entries(options)) {
    if (o.type !== "string") continue;
    takesValue.add(`--${name}`);
    if (o.short) takesValue.add(`-${o.short}`);
  }
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const next = argv[i + 1];
    const file = argv[i + 2];
    if (a === "--") {
      out.push(...argv.slice(i));
      break;
    }
    if (a === "--export" && next !== undefined && !next.includes("=") && file !== undefined && !file.startsWith("-")) {
      out.push(`--export=${next}=${file}`);
      i += 2;
    } else if (takesValue.has(a) && next !== undefined && /^-[\d.]/.test(next)) {
      out.push(`${a}=${next}`);
      i += 1;
    } else out.push(a);
  }
  return out;
}

/** Every spelling of the command's options, for suggestions: --name and -x. */
function spellings(options: OptionSpec): string[] {
  return Object.entries(options).flatMap(([name, o]) => [`--${name}`, ...(o.short ? [`-${o.short}`] : [])]);
}

/**
 * A command's argv parsed: its options (and --help, --limit), positionals where it takes
 * them. Every mistake is one UsageError line: an unknown option with the nearest known one
 * ("did you mean --capacity?"), an option without its value, and an option that takes one
 * value given twice (the second would silently win).
 */
export function parseCommandLine(cmd: Command, argv: readonly string[]): { values: ParsedValues; positionals: string[] } {
  const options = { ...cmd.options, ...COMMON_OPTIONS };
  const see = `see 'gmlake ${cmd.name} --help'`;
  let parsed: ReturnType<typeof parseArgs<{ options: OptionSpec; tokens: true; allowPositionals: boolean; strict: true }>>;
  try {
    parsed = parseArgs({ args: normalize(argv, options), options, allowPositionals: cmd.positionals !== "none", strict: true, tokens: true });
  } catch (e) {
    const code = (e as { code?: string }).code;
    const message = (e as Error).message;
    if (code === "ERR_PARSE_ARGS_UNKNOWN_OPTION") {
      const raw = /'([^']*)'/.exec(message)?.[1] ?? "?";
      const name = raw.split("=")[0]!;
      throw new UsageError(`unknown option ${name} for ${cmd.name}${didYouMean(name, spellings(options)) || ` (${see})`}`);
    }
    if (code === "ERR_PARSE_ARGS_INVALID_OPTION_VALUE") {
      const long = /--([\w-]+)/.exec(message)?.[1];
      const opt = long === undefined ? "an option" : `--${long}`;
      if (/argument missing/.test(message)) throw new UsageError(`${opt} needs a value (${see})`);
      const at = argv.indexOf(opt);
      const given = at >= 0 ? argv[at + 1] : undefined;
      throw new UsageError(`${opt} needs a value${given !== undefined ? `, not the option '${given}'` : ""} (a value that starts with '-' is written ${opt}=-VALUE)`);
    }
    if (code === "ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL") {
      const arg = /'([^']*)'/.exec(message)?.[1] ?? "";
      throw new UsageError(`${cmd.name} takes no trace or other argument: '${arg}' (${see})`);
    }
    throw e;
  }
  const seen = new Map<string, string>();
  for (const t of parsed.tokens) {
    if (t.kind !== "option" || t.value === undefined || options[t.name]?.multiple) continue;
    const first = seen.get(t.name);
    if (first !== undefined && first !== t.value) {
      throw new UsageError(`--${t.name} given twice ('${first}', then '${t.value}'): give it once`);
    }
    seen.set(t.name, t.value);
  }
  return { values: parsed.values as ParsedValues, positionals: parsed.positionals };
}
