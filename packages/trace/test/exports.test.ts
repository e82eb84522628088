import { spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  deriveSegments, EventKind, exportMemoryViz, parseJsonLines, parseRmmCsv, RMM_CSV_HEADER, toChromeTrace, toJsonLines, toRmmCsv,
  TraceFormatError, type EventLog,
} from "../src/index.js";
import { K, logOf, MiB } from "./helpers.js";

const T0 = 1795960977164139; // an epoch-µs time as PyTorch records it
const sample = (): EventLog =>
  logOf([
    [K.segmentAlloc, 0x7f00_0000_0000, 20 * MiB, T0],
    [K.alloc, 0x7f00_0000_0000, 3000, T0 + 3, 0x7f12_3456_7890],
    [K.alloc, 0x7f00_0000_0c00, 2 * MiB, T0 + 4],
    [K.freeRequested, 0x7f00_0000_0000, 3000, T0 + 5, 0x7f12_3456_7890],
    [K.freeCompleted, 0x7f00_0000_0000, 3000, T0 + 6, 0x7f12_3456_7890],
    [K.oom, 0, 2 ** 41, T0 + 7, 0, 0, 149200961536],
    [K.physicalCreate, 0, 2 * MiB, T0 + 8, 0, 1],
    [K.alloc, 0x10, 512, T0 + 9, 0, 1],
  ]);

function expectSame(a: EventLog, b: EventLog, columns = ["kind", "addr", "size", "device", "timeUs", "aux"] as const): void {
  expect(b.length).toBe(a.length);
  for (const c of columns) expect(Array.from(b[c].subarray(0, b.length))).toEqual(Array.from(a[c].subarray(0, a.length)));
  for (let i = 0; i < a.length; i++) expect(b.streams[b.stream[i]]).toBe(a.streams[a.stream[i]]);
}

describe("JSON lines", () => {
  it("round trip", () => {
    const log = sample();
    const text = toJsonLines(log);
    expect(text.split("\n").filter(Boolean).length).toBe(log.length);
    expect(JSON.parse(text.split("\n")[1])).toEqual({ kind: "alloc", addr: 0x7f00_0000_0000, size: 3000, stream: 0x7f12_3456_7890, device: 0, timeUs: T0 + 3, aux: 0 });
    expectSame(log, parseJsonLines(text));
  });

  it("bad lines: a TraceFormatError naming the line", () => {
    expect(() => parseJsonLines('{"kind":"alloc","addr":1,"size":2}\nnot json', "x.jsonl")).toThrow(/x\.jsonl:2: not JSON/);
    expect(() => parseJsonLines('{"kind":"nope","addr":1,"size":2}')).toThrow(TraceFormatError);
    expect(() => parseJsonLines('{"kind":"alloc","addr":"1","size":2}')).toThrow(/"addr" is "1"/);
  });
});

describe("RMM replay CSV", () => {
  it("writes allocate / free / allocate failure rows with HH:MM:SS:us times", () => {
    const csv = toRmmCsv(sample());
    const lines = csv.trim().split("\n");
    expect(lines[0]).toBe(RMM_CSV_HEADER);
    expect(lines.length).toBe(1 + 5);
    const day = T0 % 86_400_000_000;
    const hh = String(Math.floor(day / 3.6e9)).padStart(2, "0");
    expect(lines[1]).toMatch(new RegExp(`^0,${hh}:\\d\\d:\\d\\d:\\d{6},allocate,0x7f0000000000,3000,${0x7f12_3456_7890}$`));
    expect(lines[3]).toMatch(/,free,0x7f0000000000,3000,/);
    expect(lines[4]).toMatch(/,allocate failure,0x0,2199023255552,0$/);
  });

  it("round trip of alloc / free_completed / oom (times modulo a day)", () => {
    const log = sample();
    const back = parseRmmCsv(toRmmCsv(log));
    const kept = Array.from({ length: log.length }, (_, i) => i).filter((i) => [K.alloc, K.freeCompleted, K.oom].includes(log.kind[i] as 0));
    expect(back.length).toBe(kept.length);
    kept.forEach((i, j) => {
      expect(back.kind[j]).toBe(log.kind[i]);
      expect(back.size[j]).toBe(log.size[i]);
      expect(back.device[j]).toBe(log.device[i]);
      expect(back.timeUs[j]).toBe(log.timeUs[i] % 86_400_000_000);
      if (log.kind[i] !== K.oom) expect(back.addr[j]).toBe(log.addr[i]);
    });
  });

  it("reads RMM's own logs, day wrap included, and names bad lines", () => {
    const text = `${RMM_CSV_HEADER}\n7,23:59:59:999000,allocate,0x7f0000000000,256,0\n7,00:00:00:001000,free,0x7f0000000000,256,0\n`;
    const log = parseRmmCsv(text);
    expect(log.timeUs[1] - log.timeUs[0]).toBe(2000);
    expect(log.device[0]).toBe(7);
    expect(() => parseRmmCsv("a,b\n")).toThrow(/missing column Thread/);
    expect(() => parseRmmCsv(`${RMM_CSV_HEADER}\n0,12:00:00:000000,grow,0x1,1,0\n`, "r.csv")).toThrow(/r\.csv:2: unknown Action "grow"/);
    expect(() => parseRmmCsv(`${RMM_CSV_HEADER}\n0,noon,allocate,0x1,1,0\n`)).toThrow(/bad Time/);
  });
});

describe("Chrome / Perfetto trace JSON", () => {
  it("parses and holds live and reserved counter tracks per device, and instants", () => {
    const trace = JSON.parse(JSON.stringify(toChromeTrace(sample(), { blocks: true, label: "run" }))) as ReturnType<typeof toChromeTrace>;
    const ev = trace.traceEvents;
    const counters = (name: string, pid: number) => ev.filter((e) => e.ph === "C" && e.name === name && e.pid === pid).map((e) => [e.ts, e.args?.bytes]);
    expect(counters("allocated bytes", 0)).toEqual([[3, 3072], [4, 3072 + 2 * MiB], [6, 2 * MiB], [7, 2 * MiB]]); // held to the last event
    expect(counters("reserved bytes", 0)).toEqual([[0, 20 * MiB], [7, 20 * MiB]]);
    expect(counters("reserved bytes", 1)).toEqual([[8, 2 * MiB], [9, 2 * MiB]]);
    expect(counters("allocated bytes", 1)).toEqual([[9, 512]]);
    expect(ev.filter((e) => e.ph === "M").map((e) => e.args?.name)).toEqual(["run GPU 0", "run GPU 1"]);
    expect(ev.filter((e) => e.ph === "i").map((e) => e.name)).toEqual(["segmentAlloc", "oom"]);
    const slice = ev.find((e) => e.ph === "X");
    expect(slice).toMatchObject({ ts: 3, dur: 3, pid: 0, cat: "block" });
    expect(trace.otherData.startUs).toBe(T0);
  });
});

describe("memory-viz snapshot export", () => {
  it("derives the end state: live blocks inside their segments, gaps inactive", () => {
    const segs = deriveSegments(sample());
    const s0 = segs.find((s) => s.device === 0);
    expect(s0).toMatchObject({ address: 0x7f00_0000_0000, totalSize: 20 * MiB, isExpandable: false });
    expect(s0?.blocks.map((b) => [b.address - 0x7f00_0000_0000, b.size, b.state])).toEqual([
      [0, 0xc00, "inactive"],
      [0xc00, 2 * MiB, "active_allocated"],
      [0xc00 + 2 * MiB, 20 * MiB - 0xc00 - 2 * MiB, "inactive"],
    ]);
    // A block outside any segment gets one of its own.
    expect(segs.find((s) => s.device === 1)?.blocks).toEqual([{ address: 0x10, size: 512, requestedSize: 512, state: "active_allocated" }]);
  });

  it("an unmap of the start of a range mapped whole leaves the rest mapped, with its blocks", () => {
    const A = 0x7f00_0000_0000;
    const segs = deriveSegments(logOf([
      [K.segmentMap, A, 8 * MiB, T0],
      [K.alloc, A + 4 * MiB, 3 * MiB, T0 + 1],
      [K.segmentUnmap, A, 4 * MiB, T0 + 2], // the same start as the map, half its size
      [K.segmentMap, A + 8 * MiB, 2 * MiB, T0 + 3],
      [K.segmentUnmap, A + 9 * MiB, MiB, T0 + 4],
    ]));
    expect(segs.map((s) => [s.address - A, s.totalSize])).toEqual([[4 * MiB, 5 * MiB]]); // adjacent mapped ranges: one
    expect(segs[0]!.blocks.map((b) => [b.address - A, b.size, b.state])).toEqual([
      [4 * MiB, 3 * MiB, "active_allocated"],
      [7 * MiB, 2 * MiB, "inactive"],
    ]);
  });

  const py = spawnSync("python3", ["-c", "import pickle"], { encoding: "utf8" });
  it.skipIf(py.status !== 0)("CPython unpickles it into PyTorch's snapshot layout", () => {
    const { bytes, skipped } = exportMemoryViz(sample());
    expect(skipped).toEqual({ physicalCreate: 1 });
    const dir = mkdtempSync(join(tmpdir(), "viz-"));
    const file = join(dir, "s.pickle");
    writeFileSync(file, bytes);
    const script = `
import pickle, json, sys
d = pickle.load(open(sys.argv[1], 'rb'))
t = d['device_traces']
print(json.dumps({'keys': sorted(d), 'lens': [len(x) for x in t], 'e1': t[0][1], 'oom': t[0][5], 'seg0': {k: v for k, v in d['segments'][0].items() if k != 'blocks'}, 'gc': repr(d['allocator_settings']['garbage_collection_threshold'])}))`;
    const r = spawnSync("python3", ["-c", script, file], { encoding: "utf8" });
    expect(r.stderr).toBe("");
    const out = JSON.parse(r.stdout);
    expect(out.keys).toEqual(["allocator_settings", "device_traces", "external_annotations", "segments"]);
    expect(out.lens).toEqual([6, 1]);
    expect(out.e1).toEqual({ action: "alloc", addr: 0x7f00_0000_0000, size: 3000, stream: 0x7f12_3456_7890, time_us: T0 + 3, compile_context: "N/A", user_metadata: "", frames: [] });
    expect(out.oom).toMatchObject({ action: "oom", device_free: 149200961536, size: 2 ** 41 });
    expect(out.seg0.segment_pool_id).toEqual([0, 0]);
    expect(out.seg0.segment_type).toBe("large");
    expect(out.gc).toBe("0.0");
    expect(EventKind.oom).toBe(8);
  });
});
