import { readFile, stat } from "node:fs/promises";
import { statSync, readFileSync } from "node:fs";
import { pickleBytes } from "./input-bytes.js";
import { PickleVM } from "./pickle-vm.js";
import { emptyReconstruction, reconstruct } from "./reconstruct.js";
import { SnapshotError } from "./snapshot-error.js";
import { ShapeReader } from "./snapshot-shape.js";
import { SnapshotStream } from "./snapshot-stream.js";
import type { Frame, ReadOptions, Snapshot } from "./snapshot.js";

const KNOWN_KEYS = new Set(["segments", "device_traces", "allocator_settings", "external_annotations"]);

export type SnapshotInput = string | Uint8Array | ArrayBuffer;

/** Reads a PyTorch memory snapshot (a path, or the file's bytes; gzip or plain pickle). */
export async function readSnapshot(input: SnapshotInput, options: ReadOptions = {}): Promise<Snapshot> {
  if (typeof input !== "string") return readSnapshotBytes(input, options);
  let bytes: Uint8Array;
  try {
    const st = await stat(input);
    if (st.isDirectory()) throw new SnapshotError("IS_DIRECTORY", input, "is a directory, not a snapshot file");
    bytes = await readFile(input);
  } catch (e) {
    throw fileError(e, input);
  }
  return readSnapshotBytes(bytes, { ...options, name: options.name ?? input });
}

/** Synchronous variant of readSnapshot for a path. */
export function readSnapshotFileSync(path: string, options: ReadOptions = {}): Snapshot {
  let bytes: Uint8Array;
  try {
    if (statSync(path).isDirectory()) throw new SnapshotError("IS_DIRECTORY", path, "is a directory, not a snapshot file");
    bytes = readFileSync(path);
  } catch (e) {
    throw fileError(e, path);
  }
  return readSnapshotBytes(bytes, { ...options, name: options.name ?? path });
}

function fileError(e: unknown, path: string): SnapshotError {
  if (e instanceof SnapshotError) return e;
  const err = e as NodeJS.ErrnoException;
  if (err.code === "ENOENT") return new SnapshotError("NOT_FOUND", path, "no such file");
  if (err.code === "EISDIR") return new SnapshotError("IS_DIRECTORY", path, "is a directory, not a snapshot file");
  return new SnapshotError("IO_ERROR", path, `cannot read (${err.code ?? err.message})`);
}

/** Reads a snapshot from its bytes, synchronously. */
export function readSnapshotBytes(input: Uint8Array | ArrayBuffer, options: ReadOptions = {}): Snapshot {
  const source = options.name ?? "<bytes>";
  const raw = input instanceof Uint8Array ? input : new Uint8Array(input);
  const { bytes, gzip } = pickleBytes(raw, source);
  const stream = new SnapshotStream(source, options.frames === true, bytes.length);
  const vm = new PickleVM(bytes, source, stream);
  stream.attach(vm);
  let value: unknown;
  try {
    value = vm.run();
  } catch (e) {
    if (e instanceof SnapshotError) throw e;
    // A RangeError (e.g. out of memory for an absurd container) is still bad input to us.
    throw new SnapshotError("BAD_PICKLE", source, `cannot unpickle (${(e as Error).message})`, vm.opPos);
  }
  const root = stream.rootOf(value);
  stream.finishDeviceTraces(root);
  const shape = new ShapeReader(source);
  const segments = shape.segments(root.get("segments"));
  if (!root.has("device_traces") && !root.has("segments")) {
    throw new SnapshotError("BAD_SHAPE", source, `dict without device_traces or segments (keys: ${[...root.keys()].slice(0, 8).join(", ") || "none"})`);
  }
  let log = stream.log;
  let report = emptyReconstruction();
  let newIndex: Int32Array | null = null;
  if (options.reconstruct !== false) ({ log, report, newIndex } = reconstruct(log, segments));
  const seen = new Uint8Array(256);
  for (let i = 0; i < log.length; i++) seen[log.device[i]] = 1;
  const devices: number[] = [];
  for (let d = 0; d < 256; d++) if (seen[d] === 1) devices.push(d);
  const snapshot: Snapshot = {
    source,
    protocol: vm.protocol,
    gzip,
    events: log,
    allocatorSettings: shape.allocatorSettings(root.get("allocator_settings")),
    segments,
    annotations: shape.annotations(root.get("external_annotations")),
    devices,
    reconstructed: report,
    unknownActions: Object.fromEntries(stream.unknownActions),
    extraEntryKeys: Object.fromEntries(stream.extraEntryKeys),
    inexactIntegers: stream.inexactIntegers + shape.inexactIntegers,
    extraKeys: [...root.keys()].filter((k) => !KNOWN_KEYS.has(k)),
  };
  if (stream.frames !== undefined) {
    let frames = stream.frames;
    if (newIndex !== null) {
      // Synthetic head events shifted the rows.
      const ni = newIndex;
      frames = new Array<Frame[] | undefined>(log.length);
      stream.frames.forEach((f, i) => (frames[ni[i]] = f));
    }
    frames.length = log.length;
    snapshot.frames = frames;
  }
  return snapshot;
}
