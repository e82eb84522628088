import { EventLog, type EventKind } from "@gmlake/trace";
import { pickleBytes } from "./input-bytes.js";
import { readInputStream } from "./read-input.js";
import { openPickleWindow, type PickleWindow } from "./input-window.js";
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
  return readSnapshotFileSync(input, options);
}

/** Synchronous variant of readSnapshot for a path (a large file is read through a window, never whole). */
export function readSnapshotFileSync(path: string, options: ReadOptions = {}): Snapshot {
  const { window, close } = openPickleWindow(path, options.limits, options.windowBytes);
  try {
    return readPickle(window, { ...options, name: options.name ?? path });
  } finally {
    close();
  }
}

/**
 * Reads a snapshot from a stream such as process.stdin, at most `limits.maxInputBytes`
 * (default 256 MiB) of it; refused at the first byte when it does not start like one.
 */
export async function readSnapshotStream(stream: AsyncIterable<Uint8Array | string>, options: ReadOptions = {}): Promise<Snapshot> {
  const name = options.name ?? "<stdin>";
  const bytes = await readInputStream(stream, name, options.limits);
  return readSnapshotBytes(bytes, { ...options, name });
}

/** Reads a snapshot from its bytes, synchronously. */
export function readSnapshotBytes(input: Uint8Array | ArrayBuffer, options: ReadOptions = {}): Snapshot {
  const source = options.name ?? "<bytes>";
  const raw = input instanceof Uint8Array ? input : new Uint8Array(input);
  const { bytes, gzip } = pickleBytes(raw, source, options.limits);
  return readPickle({ first: bytes, gzip, pickleBytes: bytes.length }, options);
}

function readPickle(w: PickleWindow, options: ReadOptions): Snapshot {
  const source = options.name ?? "<bytes>";
  const gzip = w.gzip;
  const stream = new SnapshotStream(source, options.frames === true, w.pickleBytes);
  const vm = new PickleVM(w.first, source, stream, options.limits, w.more, w.pickleBytes);
  stream.attach(vm);
  let value: unknown;
  try {
    value = vm.run();
  } catch (e) {
    if (e instanceof SnapshotError) throw e;
    // A RangeError (e.g. out of memory for an absurd container) is still bad input to us.
    throw new SnapshotError("BAD_PICKLE", source, `cannot unpickle (${(e as Error).message})`, vm.base + vm.opPos);
  }
  const root = stream.rootOf(value);
  stream.finishDeviceTraces(root);
  const shape = new ShapeReader(source);
  const segments = shape.segments(root.get("segments"));
  if (!root.has("device_traces") && !root.has("segments")) {
    throw new SnapshotError("BAD_SHAPE", source, `dict without device_traces or segments (keys: ${[...root.keys()].slice(0, 8).join(", ") || "none"})`);
  }
  let log = stream.log;
  let frames = stream.frames;
  const kept = stream.keepLastDeviceTraces(root);
  if (kept !== null) ({ log, frames } = keepRows(log, frames, kept));
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
  if (frames !== undefined) {
    if (newIndex !== null) {
      // Synthetic head events shifted the rows.
      const ni = newIndex;
      const old = frames;
      frames = new Array<Frame[] | undefined>(log.length);
      old.forEach((f, i) => ((frames as (Frame[] | undefined)[])[ni[i]] = f));
    }
    frames.length = log.length;
    snapshot.frames = frames;
  }
  return snapshot;
}

/** The rows `kept` of a log (a repeated device_traces key: the last one wins). */
function keepRows(log: EventLog, frames: (Frame[] | undefined)[] | undefined, kept: Int32Array): { log: EventLog; frames: (Frame[] | undefined)[] | undefined } {
  const out = new EventLog(kept.length);
  for (const raw of log.streams) out.streamId(raw);
  for (const i of kept) out.push(log.kind[i] as EventKind, log.addr[i], log.size[i], log.stream[i], log.device[i], log.timeUs[i], log.aux[i]);
  return { log: out, frames: frames === undefined ? undefined : Array.from(kept, (i) => frames[i]) };
}
