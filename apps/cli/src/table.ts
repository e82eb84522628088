/** Plain-text and Markdown tables for the human outputs, sized to the terminal. */
export interface Column<T> {
  header: string;
  value: (row: T) => string;
  align?: "left" | "right";
}

/** The narrowest terminal the outputs are laid out for. */
export const MIN_WIDTH = 80;

/**
 * The columns text output may use: the terminal's (stdout's, else $COLUMNS), never fewer
 * than 80 (a pipe or an unknown terminal gets 80).
 */
export function terminalWidth(): number {
  const cols = process.stdout.isTTY ? process.stdout.columns : undefined;
  const env = Number.parseInt(process.env.COLUMNS ?? "", 10);
  const w = cols && cols > 0 ? cols : Number.isFinite(env) && env > 0 ? env : MIN_WIDTH;
  return Math.max(MIN_WIDTH, w);
}

function renderTable<T>(cells: string[][], columns: readonly Column<T>[], widths: number[], pick: number[]): string {
  const pad = (s: string, i: number) => (columns[i].align === "left" ? s.padEnd(widths[i]) : s.padStart(widths[i]));
  const line = (row: string[]) => pick.map((i) => pad(row[i], i)).join("  ").trimEnd();
  return [line(columns.map((c) => c.header)), line(widths.map((w) => "-".repeat(w))), ...cells.map(line)].join("\n");
}

/**
 * A table in `width` columns (the terminal's by default): when its columns do not fit side
 * by side, the rest go into further tables below, each led by the first `keep` columns
 * again (the row's name), so that no line is wider than the terminal.
 */
export function textTable<T>(rows: readonly T[], columns: readonly Column<T>[], o: { width?: number; keep?: number } = {}): string {
  const width = o.width ?? terminalWidth();
  const keep = Math.min(o.keep ?? 1, columns.length);
  const cells = rows.map((r) => columns.map((c) => c.value(r)));
  const widths = columns.map((c, i) => Math.max(c.header.length, ...cells.map((row) => row[i].length)));
  const lead = widths.slice(0, keep).reduce((a, w) => a + w + 2, 0);
  const parts: number[][] = [];
  let part: number[] = [];
  let used = lead;
  for (let i = keep; i < columns.length; i++) {
    if (part.length > 0 && used + widths[i] > width) {
      parts.push(part);
      part = [];
      used = lead;
    }
    part.push(i);
    used += widths[i] + 2;
  }
  if (part.length > 0 || parts.length === 0) parts.push(part);
  const head = [...Array(keep).keys()];
  return parts.map((p) => renderTable(cells, columns, widths, [...head, ...p])).join("\n\n");
}

export function markdownTable<T>(rows: readonly T[], columns: readonly Column<T>[]): string {
  const head = `| ${columns.map((c) => c.header).join(" | ")} |`;
  const rule = `| ${columns.map((c) => (c.align === "left" ? "---" : "---:")).join(" | ")} |`;
  const body = rows.map((r) => `| ${columns.map((c) => c.value(r).replace(/\|/g, "\\|")).join(" | ")} |`);
  return [head, rule, ...body].join("\n");
}

const NBSP = "\u00a0";
/** A number and the unit after it ("38.97 GiB", "8 %", "2 MiB,"): one word, never split across lines. */
const NUMBER_UNIT = /(\d) (?=(?:[KMGTP]i?B|B|kB|GB|MB|TB|%|ms|us|µs|s|x)\b|%)/g;

/** Words of a text, each number joined to its unit. */
export function words(text: string): string[] {
  return text.replace(NUMBER_UNIT, `$1${NBSP}`).split(/[ \t\n]+/).filter(Boolean);
}

/**
 * `prefix` as written (a label and its padding), then `ws` filled to `width` columns,
 * continuation lines starting at column `indent` (by default under the first word).
 */
export function fillWords(prefix: string, ws: readonly string[], width = terminalWidth(), indent = prefix.length): string {
  const lines: string[] = [];
  let line = prefix;
  let fresh = true;
  for (const w of ws) {
    const sep = fresh ? "" : " ";
    if (!fresh && line.length + sep.length + w.length > width) {
      lines.push(line.trimEnd());
      line = " ".repeat(indent) + w;
    } else line += sep + w;
    fresh = false;
  }
  lines.push(line.trimEnd());
  return lines.join("\n").replaceAll(NBSP, " ");
}

/** "  label           value": the value wrapped to the terminal, continuing under itself. */
export function field(label: string, value: string, column = 18, width = terminalWidth()): string {
  return fillWords(`  ${label}`.padEnd(column), words(value), width);
}

/**
 * Text wrapped at `width` columns (the terminal's by default) on word boundaries, a number
 * never parted from its unit; continuation lines indented by `indent`.
 */
export function wrap(text: string, width = terminalWidth(), indent = "  "): string {
  return fillWords("", words(text), width, indent.length);
}

/** Each line of `text` wrapped to the terminal, continuing two columns right of its own indent. */
export function fitLines(text: string, width = terminalWidth()): string {
  return text
    .split("\n")
    .map((l) => {
      const indent = l.length - l.trimStart().length;
      return l.length <= width ? l : fillWords(l.slice(0, indent), words(l), width, indent + 2);
    })
    .join("\n");
}

/** A cell no wider than `max`: the end kept, the start elided. */
export function fitCell(s: string, max: number): string {
  return s.length <= max ? s : `…${s.slice(s.length - max + 1)}`;
}
