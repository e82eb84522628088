export { readSnapshot, readSnapshotBytes, readSnapshotFileSync, readSnapshotStream, type SnapshotInput } from "./read-snapshot.js";
export { READ_LIMIT_NAMES, readLimits, parseReadLimits, envReadLimits, type ReadLimits, type ReadLimitName } from "./read-limits.js";
export { STREAM_INPUT_LIMIT } from "./read-input.js";
export { SnapshotError, type SnapshotErrorCode } from "./snapshot-error.js";
export type { Snapshot, SegmentState, BlockState, Annotation, Frame, Reconstruction, ReconstructedBlock, ReadOptions } from "./snapshot.js";
export { PickleVM, type PickleBuilder, type PyValue } from "./pickle-vm.js";
export { parseAllocConf } from "./snapshot-shape.js";
export { reconstruct } from "./reconstruct.js";
export { recordedBy, type RecordedBy } from "./recorded-by.js";
