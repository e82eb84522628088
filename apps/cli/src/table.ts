/** Plain-text and Markdown tables for the human outputs. */
export interface Column<T> {
  header: string;
  value: (row: T) => string;
  align?: "left" | "right";
}

export function textTable<T>(rows: readonly T[], columns: readonly Column<T>[]): string {
  const cells = rows.map((r) => columns.map((c) => c.value(r)));
  const widths = columns.map((c, i) => Math.max(c.header.length, ...cells.map((row) => row[i].length)));
  const pad = (s: string, i: number) => (columns[i].align === "left" ? s.padEnd(widths[i]) : s.padStart(widths[i]));
  const line = (row: string[]) => row.map(pad).join("  ").trimEnd();
  return [line(columns.map((c) => c.header)), line(widths.map((w) => "-".repeat(w))), ...cells.map(line)].join("\n");
}

export function markdownTable<T>(rows: readonly T[], columns: readonly Column<T>[]): string {
  const head = `| ${columns.map((c) => c.header).join(" | ")} |`;
  const rule = `| ${columns.map((c) => (c.align === "left" ? "---" : "---:")).join(" | ")} |`;
  const body = rows.map((r) => `| ${columns.map((c) => c.value(r).replace(/\|/g, "\\|")).join(" | ")} |`);
  return [head, rule, ...body].join("\n");
}

/** Text wrapped at `width` columns on word boundaries; continuation lines indented by `indent`. */
export function wrap(text: string, width = 100, indent = "  "): string {
  const out: string[] = [];
  let line = "";
  for (const word of text.split(/\s+/).filter(Boolean)) {
    const next = line ? `${line} ${word}` : word;
    if (next.length > width && line) {
      out.push(line);
      line = indent + word;
    } else line = next;
  }
  if (line) out.push(line);
  return out.join("\n");
}

/** A cell no wider than `max` (the table's 100 columns): the end kept, the start elided. */
export function fitCell(s: string, max: number): string {
  return s.length <= max ? s : `…${s.slice(s.length - max + 1)}`;
}
