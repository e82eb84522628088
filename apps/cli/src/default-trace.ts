import { fileURLToPath } from "node:url";

/**
 * The embedded default trace: four training steps of an MLP whose batch grows from 64 to
 * 112, recorded with PyTorch 2.11's default allocator on an H200 (../shared/traces/small/
 * train_default.pickle). PyTorch reserved 9.69 GiB there for 3.98 GiB allocated.
 */
export const DEFAULT_TRACE = fileURLToPath(new URL("../assets/default-trace.pickle.gz", import.meta.url));
