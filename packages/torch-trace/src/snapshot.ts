import type { AllocatorSettings, EventLog, SegmentState, StackFrame } from "@gmlake/trace";
import type { ReadLimits } from "./read-limits.js";

export type { BlockState, SegmentState } from "@gmlake/trace";

/** A record_function range boundary (external_annotations). */
export interface Annotation {
  stage: "START" | "END" | string;
  name: string;
  device: number;
  timeUs: number;
}

/** One stack frame (only kept with `frames: true`): @gmlake/trace's StackFrame. */
export type Frame = StackFrame;

/** A block or segment that had to be invented because its history fell off the ring buffer. */
export interface ReconstructedBlock {
  device: number;
  addr: number;
  size: number;
  /** How it was found: a free without its alloc, or live in `segments` at dump time. */
  from: "free" | "segments";
}

/**
 * What was reconstructed for histories that overflowed the ring buffer. Synthetic events
 * (alloc, segment_alloc or segment_map) are placed at the head of their device's events,
 * with the time of that device's first event, so that running sums never go negative.
 */
export interface Reconstruction {
  /** Blocks freed in the trace whose alloc is not in it. */
  missingAllocs: number;
  /** Blocks live at dump time (per `segments`) whose alloc is not in the trace. */
  liveFromSegments: number;
  /** Segment ranges freed/unmapped without their segment_alloc/map in the trace. */
  missingSegments: number;
  /** Segment bytes present at dump time (per `segments`) but not mapped by the trace. */
  segmentsFromState: number;
  /** Number of synthetic events placed at the heads of the device streams. */
  syntheticEvents: number;
  /** Every invented block and segment range (capped at 10,000 entries). */
  blocks: ReconstructedBlock[];
  segments: ReconstructedBlock[];
}

export interface Snapshot {
  /** File name or label used in messages. */
  source: string;
  /** Pickle protocol of the file (0 when it had no PROTO opcode). */
  protocol: number;
  /** Whether the input was gzip-compressed. */
  gzip: boolean;
  /** All devices' events, grouped by device in device order, each device oldest first. */
  events: EventLog;
  allocatorSettings: AllocatorSettings;
  segments: SegmentState[];
  annotations: Annotation[];
  /** Device indices whose device_traces list is not empty. */
  devices: number[];
  reconstructed: Reconstruction;
  /** Trace entries with an action the reader does not know, by action name (skipped). */
  unknownActions: Record<string, number>;
  /** Trace-entry keys the reader does not know, by key (e.g. a newer torch's pool_id); compile_context and user_metadata are known and not counted. */
  extraEntryKeys: Record<string, number>;
  /**
   * Integer fields (of trace entries, segments, annotations, settings) that a double cannot
   * hold exactly, kept as the nearest double. 0 for every real snapshot: addresses < 2^48,
   * epoch-µs times and stream pointers < 2^53.
   */
  inexactIntegers: number;
  /** Top-level keys other than segments/device_traces/allocator_settings/external_annotations. */
  extraKeys: string[];
  /** Per event index, the frames of that entry (only with `frames: true`; else undefined). */
  frames?: (Frame[] | undefined)[];
}

export interface ReadOptions {
  /** Name used in error messages for byte input (default "<bytes>"). */
  name?: string;
  /** Keep per-event stack frames in `Snapshot.frames` (default false). */
  frames?: boolean;
  /** Synthesize the missing history of overflowed ring buffers (default true). */
  reconstruct?: boolean;
  /** Overrides of the resource bounds (read-limits.ts; the defaults grow with the input). */
  limits?: Partial<ReadLimits>;
  /**
   * A file larger than 16 x this is read this many bytes at a time (gzip: its inflated
   * chunks), never whole: its pickle and the events it becomes are not in memory at once
   * (default 4 MiB).
   */
  windowBytes?: number;
}
