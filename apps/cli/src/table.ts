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
