import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

/**
 * The front door's docs (issue 32): every relative link in the READMEs, BENCHMARKS.md, the
 * stitch docs and the lab notebook resolves (to a file, and to a heading when it names one),
 * and the reference docs stay short: the run-by-run record belongs in docs/notebook/.
 */
const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");

const mdIn = (dir: string): string[] =>
  existsSync(join(REPO, dir)) ? readdirSync(join(REPO, dir)).filter((f) => f.endsWith(".md")).map((f) => join(dir, f)) : [];
const readmes = (dir: string): string[] =>
  readdirSync(join(REPO, dir))
    .map((p) => join(dir, p, "README.md"))
    .filter((f) => existsSync(join(REPO, f)));

const PACKAGE_READMES = [...readmes("packages"), ...readmes("apps")];
const DOCS = ["README.md", "BENCHMARKS.md", ...PACKAGE_READMES, ...mdIn("packages/stitch/docs"), ...mdIn("docs/notebook")];

/** Line bounds: a reference doc says what holds now; measurements and history go to the notebook. */
const MAX_LINES: Record<string, number> = { "README.md": 200, "BENCHMARKS.md": 420 };
for (const f of PACKAGE_READMES) MAX_LINES[f] = 200;

/** The text outside fenced code blocks and inline code, where a link is a link. */
function prose(md: string): string {
  return md
    .split(/^```.*$/m)
    .filter((_, i) => i % 2 === 0)
    .join("\n")
    .replace(/`[^`\n]*`/g, "");
}

/** GitHub's heading anchors: lower case, punctuation dropped, each space a dash, repeats numbered. */
function anchors(md: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const m of prose(md.replace(/`/g, "")).matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const base = (m[1] as string)
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, "")
      .replace(/\s/g, "-");
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** Relative link targets of a markdown file: [text](target) and ![alt](target). */
function links(md: string): string[] {
  const out: string[] = [];
  for (const m of prose(md).matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
    const target = m[1] as string;
    if (!/^[a-z][a-z0-9+.-]*:/i.test(target)) out.push(target);
  }
  return out;
}

describe("the docs", () => {
  it("are where they are expected", () => {
    expect(PACKAGE_READMES).toContain("packages/stitch/README.md");
    expect(PACKAGE_READMES).toContain("apps/cli/README.md");
    expect(DOCS).toContain("docs/notebook/README.md");
  });

  it.each(DOCS)("%s: every relative link resolves", (file) => {
    const md = readFileSync(join(REPO, file), "utf8");
    const broken: string[] = [];
    for (const target of links(md)) {
      const [path, anchor] = target.split("#", 2) as [string, string | undefined];
      const to = path === "" ? join(REPO, file) : resolve(dirname(join(REPO, file)), decodeURIComponent(path));
      if (!existsSync(to)) {
        broken.push(`${target} (no ${relative(REPO, to)})`);
        continue;
      }
      if (anchor && statSync(to).isFile() && to.endsWith(".md") && !anchors(readFileSync(to, "utf8")).has(anchor.toLowerCase()))
        broken.push(`${target} (no heading #${anchor} in ${relative(REPO, to)})`);
    }
    expect(broken).toEqual([]);
  });

  it.each(Object.entries(MAX_LINES))("%s: at most %i lines", (file, max) => {
    const lines = readFileSync(join(REPO, file), "utf8").trimEnd().split("\n").length;
    expect(lines, `${file} has ${lines} lines: move measurements and history to docs/notebook/`).toBeLessThanOrEqual(max);
  });

  it("the link checker finds a broken link and a missing heading (it can fail)", () => {
    const md = "# Top\n\nsee [a](nowhere.md) and [b](#top) and [c](#nope) and `[d](code.md)`\n```\n[e](fenced.md)\n```\n";
    expect(links(md)).toEqual(["nowhere.md", "#top", "#nope"]);
    expect([...anchors(md)]).toEqual(["top"]);
    expect(anchors("## Will it fit: `x`, the (H200, 2026-12-01)\n").has("will-it-fit-x-the-h200-2026-12-01")).toBe(true);
  });
});
