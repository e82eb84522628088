/**
 * A large file is read through a window (ReadOptions.windowBytes), never whole: the same
 * snapshot as reading its bytes at once, whatever the window's size and wherever its
 * edges fall (inside an entry, a string, a FRAME, a gzip block), and the same errors.
 */
import { existsSync, mkdtempSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gunzipSync, gzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import { SnapshotError, readSnapshotBytes, readSnapshotFileSync, type Snapshot } from "../src/index.js";
import { fixture, tracesDir } from "./shared-dir.js";

const traces = tracesDir();
const files = [
  ...readdirSync(join(fixture(""))).filter((f) => /\.pickle(\.gz)?$/.test(f)).map((f) => fixture(f)),
  ...(traces ? [join(traces, "small", "train_default.pickle"), join(traces, "gpt2_ft_stacks.pickle.gz")] : []),
].filter((f) => existsSync(f));

/** What a reader gives, as comparable plain data. */
function plain(s: Snapshot) {
  const e = s.events;
  const col = (a: ArrayLike<number>) => Array.from(a).slice(0, e.length);
  return {
    ...s,
    source: "",
    events: { kind: col(e.kind), addr: col(e.addr), size: col(e.size), stream: col(e.stream), device: col(e.device), timeUs: col(e.timeUs), aux: col(e.aux), streams: e.streams },
  };
}

describe("windowed reading", () => {
  it.each(files.map((f) => [f.slice(f.lastIndexOf("/") + 1), f]))("%s: the same snapshot (or error) through windows of 1 B to 64 KiB", (_n, file) => {
    const outcome = (read: () => Snapshot) => {
      try {
        return plain(read());
      } catch (e) {
        expect(e).toBeInstanceOf(SnapshotError);
        return { code: (e as SnapshotError).code, message: (e as SnapshotError).message };
      }
    };
    const whole = outcome(() => readSnapshotBytes(readFileSync(file), { frames: true, name: "<x>" }));
    // 1 B windows over a big inflated stream take minutes: the smallest windows for small files
    const inflated = file.endsWith(".gz") ? gunzipSync(readFileSync(file)).length : readFileSync(file).length;
    for (const windowBytes of inflated > 1 << 20 ? [333, 4096, 65536] : [1, 7, 333, 4096, 65536]) {
      expect(outcome(() => readSnapshotFileSync(file, { frames: true, windowBytes, name: "<x>" })), `windowBytes ${windowBytes}`).toEqual(whole);
    }
  });
  it("a truncated file is TRUNCATED at the same byte, plain or gzip", () => {
    const src = files.find((f) => f.endsWith("train_default.pickle")) ?? files.find((f) => !f.endsWith(".gz"))!;
    const bytes = readFileSync(src);
    const dir = mkdtempSync(join(tmpdir(), "gmlake-window-"));
    const cut = bytes.subarray(0, Math.floor(bytes.length * 0.6));
    writeFileSync(join(dir, "cut.pickle"), cut);
    writeFileSync(join(dir, "cut.pickle.gz"), gzipSync(cut));
    const codeOf = (f: () => unknown) => {
      try {
        f();
      } catch (e) {
        expect(e).toBeInstanceOf(SnapshotError);
        return [(e as SnapshotError).code, (e as SnapshotError).message];
      }
      return ["ok", ""];
    };
    const expected = codeOf(() => readSnapshotBytes(cut));
    expect(expected[0]).toBe("TRUNCATED");
    expect(codeOf(() => readSnapshotFileSync(join(dir, "cut.pickle"), { windowBytes: 100, name: "<bytes>" }))).toEqual(expected);
    expect(codeOf(() => readSnapshotFileSync(join(dir, "cut.pickle.gz"), { windowBytes: 100, name: "<bytes>" }))[0]).toBe("TRUNCATED");
  });
});
