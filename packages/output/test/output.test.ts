import { spawnSync } from "node:child_process";
import { existsSync, linkSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

import { OutputError, checkOutputDir, checkOutputFile, checkOutputs, terminalSafe, terminalSafeJson, writeOutputFile } from "../src/index.js";

const tmp = mkdtempSync(join(tmpdir(), "gmlake-output-"));

function caught(f: () => unknown): OutputError {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(OutputError);
    return e as OutputError;
  }
  throw new Error("expected an OutputError");
}

describe("checkOutputFile refuses before the work", () => {
  it("the input itself, also through a hard link and a symbolic link", () => {
    const input = join(tmp, "trace.pickle");
    writeFileSync(input, "input bytes");
    linkSync(input, join(tmp, "hard.pickle"));
    symlinkSync(input, join(tmp, "soft.pickle"));
    for (const p of [input, join(tmp, "hard.pickle"), join(tmp, "soft.pickle")]) {
      const e = caught(() => checkOutputFile(p, { inputs: [input], force: true, option: "--export" }));
      expect(e.kind).toBe("path");
      expect(e.code).toBe("OUTPUT_IS_INPUT");
      expect(e.message).toMatch(/^--export .*never replaces an input/);
    }
    expect(readFileSync(input, "utf8")).toBe("input bytes");
  });
  it("an existing file without force, and accepts it with force", () => {
    const f = join(tmp, "exists.svg");
    writeFileSync(f, "old");
    expect(caught(() => checkOutputFile(f)).code).toBe("OUTPUT_EXISTS");
    const t = checkOutputFile(f, { force: true });
    writeOutputFile(t, "new");
    expect(readFileSync(f, "utf8")).toBe("new");
  });
  it("a directory, a missing directory, a parent that is a file, an empty name", () => {
    expect(caught(() => checkOutputFile(tmp)).code).toBe("OUTPUT_NOT_A_FILE");
    expect(caught(() => checkOutputFile(join(tmp, "nope", "x.svg"))).code).toBe("ENOENT");
    writeFileSync(join(tmp, "afile"), "");
    expect(caught(() => checkOutputFile(join(tmp, "afile", "x.svg"))).kind).toBe("path");
    expect(caught(() => checkOutputFile("")).kind).toBe("path");
  });
  it("the same output twice", () => {
    const e = caught(() => checkOutputs([{ path: join(tmp, "twice.svg"), option: "--plot" }, { path: join(tmp, ".", "twice.svg"), option: "--export" }]));
    expect(e.code).toBe("OUTPUT_TWICE");
  });
  it("checkOutputDir creates a directory and refuses a file", () => {
    const d = join(tmp, "made", "deep");
    expect(checkOutputDir(d)).toBe(d);
    expect(existsSync(d)).toBe(true);
    writeFileSync(join(tmp, "plainfile"), "");
    expect(caught(() => checkOutputDir(join(tmp, "plainfile"))).code).toBe("OUTPUT_NOT_A_DIRECTORY");
  });
});

describe("writeOutputFile", () => {
  it("writes atomically and leaves no temporary file", () => {
    const d = join(tmp, "atomic");
    mkdirSync(d);
    const t = checkOutputFile(join(d, "out.json"));
    writeOutputFile(t, new Uint8Array([1, 2, 3]));
    expect([...readFileSync(join(d, "out.json"))]).toEqual([1, 2, 3]);
    expect(readdirSync(d)).toEqual(["out.json"]);
  });
  it("does not clobber a file that appeared after the check", () => {
    const f = join(tmp, "race.txt");
    const t = checkOutputFile(f);
    writeFileSync(f, "theirs");
    expect(caught(() => writeOutputFile(t, "ours")).code).toBe("OUTPUT_EXISTS");
    expect(readFileSync(f, "utf8")).toBe("theirs");
    expect(readdirSync(tmp).filter((n) => n.includes("race.txt.") && n.endsWith(".tmp"))).toEqual([]);
  });
  it("a full device (/dev/full) is a write error naming ENOSPC", () => {
    const t = checkOutputFile("/dev/full");
    expect(t.inPlace).toBe(true);
    const e = caught(() => writeOutputFile(t, "x".repeat(10000)));
    expect(e.kind).toBe("write");
    expect(e.code).toBe("ENOSPC");
    expect(e.message).toBe("cannot write to /dev/full: no space left on device (ENOSPC)");
  });
});

/** A private mount namespace where a small tmpfs can be mounted (root or user namespaces); null if not possible here. */
function inTmpfs(script: string): { status: number | null; stdout: string; stderr: string } | null {
  const probe = spawnSync("unshare", ["-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt 2>/dev/null || exit 99"], { encoding: "utf8" });
  if (probe.status !== 0) return null;
  return spawnSync("unshare", ["-rm", "sh", "-c", script], { encoding: "utf8" });
}

describe("a full or read-only file system (a 64 KiB tmpfs in a private mount namespace)", () => {
  const mod = join(import.meta.dirname, "../dist/index.js");
  const node = process.execPath;
  const writer = (file: string, bytes: number) =>
    `${node} --input-type=module -e "import {checkOutputFile,writeOutputFile} from '${mod}'; try { writeOutputFile(checkOutputFile('${file}'), Buffer.alloc(${bytes}, 97)); console.log('ok') } catch (e) { console.log(e.kind, e.code, e.message) }"`;
  it.skipIf(!existsSync(mod))("ENOSPC: a clear error and no file under the final name", () => {
    const r = inTmpfs(`mount -t tmpfs -o size=64k tmpfs /mnt && ${writer("/mnt/big.json", 1 << 20)} && ls -A /mnt`);
    if (r === null) return; // no mount namespaces here: /dev/full above covers ENOSPC
    expect(r.stdout).toContain("write ENOSPC cannot write to /mnt/big.json: no space left on device (ENOSPC)");
    expect(r.stdout.trim().split("\n").slice(1)).toEqual([]); // ls: nothing left behind
  });
  it.skipIf(!existsSync(mod))("EROFS: refused at the check, before the work", () => {
    const r = inTmpfs(`mount -t tmpfs -o size=64k,ro tmpfs /mnt && ${writer("/mnt/x.json", 10)}`);
    if (r === null) return;
    expect(r.stdout).toMatch(/^path EROFS .*read-only file system \(EROFS\)/);
  });
});

describe("terminalSafe", () => {
  it("escapes terminal controls and bidi overrides, keeps text", () => {
    expect(terminalSafe("title\x1b]0;pwned\x07 erase\x1b[2K")).toBe("title\\x1b]0;pwned\\x07 erase\\x1b[2K");
    expect(terminalSafe("a\rb\nc\u009b\u202ed")).toBe("a\\rb\\nc\\x9b\\u202ed");
    expect(terminalSafe("line 1\nline 2\r", { multiline: true })).toBe("line 1\nline 2\\r");
    expect(terminalSafe("tab\tok, ünïcödé, 日本")).toBe("tab\tok, ünïcödé, 日本");
  });
  it("terminalSafeJson: the same JSON value, nothing a terminal acts on", () => {
    const v = { name: "a\x1b[2Kb\u009bc\u202ed", n: 1 };
    const text = terminalSafeJson(v);
    expect(text).not.toMatch(/[\x00-\x1f\x7f-\x9f\u202e]/);
    expect(JSON.parse(text)).toEqual(v);
  });
});
