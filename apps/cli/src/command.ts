import type { ParseArgsConfig } from "node:util";

export type OptionSpec = NonNullable<ParseArgsConfig["options"]>;
export type ParsedValues = Record<string, string | boolean | (string | boolean)[] | undefined>;

/** One `gmlake` subcommand: its options, its help (with an example) and what it does. */
export interface Command {
  name: string;
  summary: string;
  /** Usage line(s), option descriptions and at least one example. */
  help: string;
  options: OptionSpec;
  /** Whether it takes positional arguments (trace files). */
  positionals: "none" | "one" | "many" | "optional-many";
  /** Resolves to the exit status when it is not 0 (verify: 1 on a mismatch). */
  run(values: ParsedValues, positionals: string[]): Promise<void | number>;
}
