import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";

/**
 * The settings table (issue 31): scripts/settings/settings.json lists every GMLAKE_* variable
 * the sources read, nothing more, and docs/settings.md is what scripts/settings/generate.mjs
 * writes from it.
 */
const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
const GENERATE = join(REPO, "scripts/settings/generate.mjs");

interface Row {
  name: string;
  type: string;
  default: string;
  meaning: string;
}
interface Scan {
  reads: Record<string, string[]>;
  unread: string[];
}

function generate(...args: string[]): { status: number | null; stdout: string; stderr: string } {
  return spawnSync(process.execPath, [GENERATE, ...args], { encoding: "utf8", timeout: 60_000 });
}
function scan(root?: string): Scan {
  const r = generate("--reads", ...(root ? ["--root", root] : []));
  expect(r.stderr).toBe("");
  expect(r.status).toBe(0);
  return JSON.parse(r.stdout) as Scan;
}

const table = JSON.parse(readFileSync(join(REPO, "scripts/settings/settings.json"), "utf8")) as Row[];

describe("the settings table", () => {
  it("lists every GMLAKE_* variable the code reads, and none that nothing reads", () => {
    const { reads, unread } = scan();
    const listed = table.map((r) => r.name);
    const missing = Object.keys(reads).filter((n) => !listed.includes(n));
    const unused = listed.filter((n) => !(n in reads));
    expect(missing, "read in the sources but not in scripts/settings/settings.json").toEqual([]);
    expect(unused, "in scripts/settings/settings.json but read nowhere").toEqual([]);
    expect(unread, "named in the sources (a message, a comment, a child's environment) but read nowhere").toEqual([]);
  });

  it("has one row per name, each with a type, a default and a meaning", () => {
    const names = table.map((r) => r.name);
    expect(new Set(names).size).toBe(names.length);
    for (const r of table) {
      expect(r.name).toMatch(/^GMLAKE_[A-Z0-9_]+$/);
      for (const f of ["type", "default", "meaning"] as const) expect(typeof r[f] === "string" && r[f].trim() !== "", `${r.name}.${f}`).toBe(true);
    }
  });

  it("docs/settings.md is what the generator writes", () => {
    const r = generate("--check");
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
    expect(readFileSync(join(REPO, "docs/settings.md"), "utf8")).toContain("| `GMLAKE_POLICY` |");
  });
});

describe("the scan", () => {
  const dir = mkdtempSync(join(tmpdir(), "gmlake-settings-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  // G_NAME stands for the real prefix, which this file must not spell out: the repository's scan reads it too
  const real = (text: string): string => text.replace(/\bG_/g, "GMLAKE" + "_");
  const put = (path: string, text: string): void => {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), real(text));
  };

  it("finds reads in each language, and tells writes, keys and macros from them", () => {
    put("packages/p/src/a.ts", 'const a = process.env.G_TS_READ;\nprocess.env.G_TS_WRITE = "0";\nconst o = { G_TS_KEY: 1 };\n');
    put("packages/torch-alloc/python/m.py", 'os.environ.get("G_PY_READ")\nos.environ["G_PY_WRITE"] = "1"\nenv = {"G_PY_KEY": "1"}\n');
    put("packages/torch-alloc/native/n.cc", '#define G_MACRO 1\nconst char* s = std::getenv("G_CC_READ");\n// G_CC_COMMENT only named\n');
    put("scripts/s.sh", 'x=${G_SH_READ:-1}\n# $G_SH_COMMENT\nG_SH_WRITE=1 cmd\n');
    put("packages/p/node_modules/q/index.js", "process.env.G_IN_NODE_MODULES;\n");
    put("apps/a/test/t.test.ts", "process.env.G_TEST_READ;\n");
    const { reads, unread } = scan(dir);
    const want = { G_CC_READ: ["native library"], G_PY_READ: ["Python module"], G_SH_READ: ["scripts"], G_TEST_READ: ["tests"], G_TS_READ: ["engine (p)"] };
    expect(reads).toEqual(Object.fromEntries(Object.entries(want).map(([k, v]) => [real(k), v])));
    expect(unread).toEqual(["G_CC_COMMENT", "G_PY_KEY", "G_PY_WRITE", "G_SH_COMMENT", "G_SH_WRITE", "G_TS_KEY", "G_TS_WRITE"].map(real));
  });
});
