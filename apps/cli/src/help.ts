import { MIN_WIDTH, fillWords, words } from "./table.js";

/** Words of a usage line: a bracketed group ("[--json | --markdown]") is one word. */
function usageWords(text: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let word = "";
  for (const ch of text) {
    if (ch === "[" || ch === "{" || ch === "(") depth++;
    if (ch === "]" || ch === "}" || ch === ")") depth = Math.max(0, depth - 1);
    if (/\s/.test(ch) && depth === 0) {
      if (word) out.push(word);
      word = "";
    } else word += ch;
  }
  if (word) out.push(word);
  return out;
}

/** Lines of `ws` after `first`, continuing at `indent` columns. */
const fill = (first: string, ws: readonly string[], indent: number, width: number): string[] => fillWords(first, ws, width, indent).split("\n");

/** A section's heading: "Options:", "Examples:", "Exit status:" (a short line ending in a colon). */
const HEADER = /^\S[^:]{0,30}:$/;

/**
 * A command's help laid out in `width` columns (80: help is read in any terminal): prose
 * paragraphs refilled, each option's description refilled at its own column, usage lines
 * broken between bracketed groups; example lines are left as written. Numbers stay beside
 * their units.
 */
export function formatHelp(text: string, width = MIN_WIDTH): string {
  const src = text.split("\n");
  const out: string[] = [];
  const indentOf = (l: string) => l.length - l.trimStart().length;
  let i = 0;
  while (i < src.length) {
    const line = src[i]!;
    if (line.trim() === "" || HEADER.test(line)) {
      out.push(line);
      i++;
      continue;
    }
    const i0 = indentOf(line);
    const cont: string[] = [];
    let j = i + 1;
    if (i0 === 0) {
      // a prose paragraph (lines at column 0, a sentence per line start) or a usage line and its continuation
      while (j < src.length && src[j]!.trim() !== "" && (indentOf(src[j]!) > 0 || !(/[.:)]$/.test(src[j - 1]!) && /^[A-Z]/.test(src[j]!)) ) && !HEADER.test(src[j]!)) {
        if (indentOf(src[j]!) > 0 && cont.length === 0 && !/^Usage:/.test(line)) break;
        cont.push(src[j]!);
        j++;
      }
    } else {
      while (j < src.length && src[j]!.trim() !== "" && indentOf(src[j]!) > i0) cont.push(src[j++]!);
    }
    const all = [line, ...cont];
    if (all.every((l) => l.length <= width) && i0 > 0 && cont.length === 0) {
      out.push(line); // fits: as written (examples, short entries)
    } else if (/^Usage:/.test(line)) {
      const hang = cont.length ? indentOf(cont[0]!) : 6;
      const head = /^Usage: gmlake \S+/.exec(line)?.[0] ?? "Usage:";
      out.push(...fill(head + " ", usageWords(all.join(" ").slice(head.length)), hang, width));
    } else if (i0 === 0) {
      out.push(...fill("", words(all.join(" ")), 0, width));
    } else {
      // an entry: "  --name, -n  description" (or a command), its description at its column
      const m = /^(\s+\S.*?\s{2,})(\S.*)$/.exec(line);
      if (m === null) out.push(...all);
      else {
        const col = cont.length ? indentOf(cont[0]!) : m[1]!.length;
        out.push(...fill(m[1]!, words([m[2]!, ...cont].join(" ")), Math.min(col, m[1]!.length), width));
      }
    }
    i = j;
  }
  return out.join("\n");
}
