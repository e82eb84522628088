/**
 * terminalSafe(text): user data (file names, strings from a trace, error messages that
 * quote them) made harmless for a terminal. Control characters (C0 except tab, DEL,
 * C1), and the Unicode bidirectional overrides that reorder what is shown, become
 * visible escapes (`\x1b`, `\u202e`), so a file cannot set the window title, move the
 * cursor, erase lines or disguise text; so do the Unicode line and paragraph
 * separators (U+2028/9), which break a message onto two lines. Newlines are escaped too unless `multiline`
 * (a whole report whose lines are ours); "\r" always is, since it overwrites a line.
 */
// eslint-disable-next-line no-control-regex
const UNSAFE = /[\u0000-\u0008\u000a-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
// eslint-disable-next-line no-control-regex
const UNSAFE_KEEP_NL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

function escape(c: string): string {
  const n = c.charCodeAt(0);
  if (c === "\n") return "\\n";
  if (c === "\r") return "\\r";
  return n <= 0xff ? `\\x${n.toString(16).padStart(2, "0")}` : `\\u${n.toString(16).padStart(4, "0")}`;
}

export function terminalSafe(text: string, options: { multiline?: boolean } = {}): string {
  const re = options.multiline ? UNSAFE_KEEP_NL : UNSAFE;
  re.lastIndex = 0;
  return re.test(text) ? text.replace(re, escape) : text;
}

// What JSON.stringify leaves raw but a terminal may act on: DEL, C1 controls, bidi overrides.
const UNSAFE_IN_JSON = /[\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

/**
 * JSON.stringify(value), with the characters it leaves raw that a terminal may act on
 * (DEL, C1 controls, bidi overrides) written as \u escapes: the same JSON value, safe
 * to print. (JSON.stringify escapes C0 controls itself.)
 */
export function terminalSafeJson(value: unknown): string {
  const text = JSON.stringify(value);
  return text.replace(UNSAFE_IN_JSON, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}
