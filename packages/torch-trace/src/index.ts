export { readSnapshot, readSnapshotBytes, readSnapshotFileSync, type SnapshotInput } from "./read-snapshot.js";
export { SnapshotError, type SnapshotErrorCode } from "./snapshot-error.js";
export type { Snapshot, SegmentState, BlockState, Annotation, Frame, Reconstruction, ReconstructedBlock, ReadOptions } from "./snapshot.js";
export { PickleVM, type PickleBuilder, type PyValue } from "./pickle-vm.js";
export { parseAllocConf } from "./snapshot-shape.js";
export { reconstruct } from "./reconstruct.js";
