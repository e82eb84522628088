import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { COMMANDS } from "../src/commands/index.js";
import { formatHelp } from "../src/help.js";
import { textTable, wrap } from "../src/table.js";
import { cli, TRACES } from "./run-cli.js";

/** Output fits the terminal: 80 columns at COLUMNS=80, wider where the terminal is. */
const width = (l: string) => [...l].length; // characters, not bytes ("…" is one column)
const over = (text: string, w = 80) => text.split("\n").filter((l) => width(l) > w);

const STACKS = join(TRACES, "gpt2_ft_stacks.pickle.gz");
const SMALL = join(TRACES, "small", "train_expandable.pickle");
const runs: string[][] = [
  ["inspect"],
  ["replay"],
  ["replay", "--policy", "vms", "--capacity", "4GiB"],
  ["verify"],
  ["verify", "--free"],
  ["explain"],
  ["policies"],
  ["doctor"],
  ["compare"],
  ["compare", "--verbose", "--capacity", "5GiB"],
  ...(existsSync(STACKS) ? [["explain", STACKS]] : []),
  ...(existsSync(SMALL) ? [["compare", SMALL, "--capacity", "3GiB", "--no-fit"], ["inspect", SMALL]] : []),
];

describe("COLUMNS=80: no line of any command is wider than 80", () => {
  it.each(runs.map((r) => [r.join(" "), r]))("%s", (_name, args) => {
    const r = cli(args as string[], { env: { COLUMNS: "80" } });
    expect(r.code, r.stderr).toBe(0);
    expect(over(r.stdout)).toEqual([]);
    expect(over(r.stderr)).toEqual([]);
  }, 60_000);

  it("every command's --help and gmlake --help", () => {
    for (const args of [["--help"], ...COMMANDS.map((c) => [c.name, "--help"])]) {
      const r = cli(args, { env: { COLUMNS: "80" } });
      expect(r.code).toBe(0);
      expect(over(r.stdout), args.join(" ")).toEqual([]);
    }
  });

  it("a wider terminal gets wider tables (COLUMNS is read), never narrower than 80", () => {
    const wide = cli(["compare", "--verbose"], { env: { COLUMNS: "220" } });
    expect(over(wide.stdout).length).toBeGreaterThan(0); // the verbose columns side by side
    expect(over(wide.stdout, 220)).toEqual([]);
    const narrow = cli(["compare", "--verbose"], { env: { COLUMNS: "40" } });
    expect(over(narrow.stdout)).toEqual([]);
  }, 60_000);
});

describe("numbers never part from their units", () => {
  it("wrap keeps '38.97 GiB', '8 %' and '2 MiB' on one line wherever the break falls", () => {
    const text = "the allocator reserved 38.97 GiB at its peak, 3.14 GiB 8% more than requested, exact to 2 MiB, in 12 ms";
    for (let w = 10; w <= 60; w++) {
      const lines = wrap(text, w).split("\n");
      for (let i = 1; i < lines.length; i++) {
        expect(`${lines[i - 1]}|${lines[i]!.trim()}`, `width ${w}`).not.toMatch(/\d\|(GiB|MiB|ms|%)/);
      }
    }
  });

  it("a table too wide for the terminal continues below, led by its first column", () => {
    const rows = [{ a: "caching", b: "x".repeat(30), c: "y".repeat(30) }];
    const t = textTable(rows, [
      { header: "allocator", align: "left", value: (r) => r.a },
      { header: "b", value: (r) => r.b },
      { header: "c", value: (r) => r.c },
    ], { width: 50 });
    expect(over(t, 50)).toEqual([]);
    expect(t.split("\n\n")).toHaveLength(2);
    expect(t.split("\n\n").every((part) => part.startsWith("allocator"))).toBe(true);
  });

  it("help is refilled in 80 columns: options at their own column, usage between brackets", () => {
    const help = formatHelp(`Usage: gmlake x [--alpha A] [--beta | --gamma] [--delta D] [--epsilon E] [--zeta Z] [--eta H]

A paragraph that is far too long for one line of a terminal of eighty columns, so it is refilled.

Options:
  --alpha A   what alpha does, at length, so that it must wrap onto a second line under itself
  --beta      short`);
    expect(over(help)).toEqual([]);
    expect(help).toMatch(/\n {6}\[--/); // usage continues, indented, between bracketed groups
    expect(help).toMatch(/\n {14}\S/); // the description continues at its column
    expect(help).toContain("  --beta      short");
  });
});
