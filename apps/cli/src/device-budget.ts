import { UsageError } from "./cli-error.js";
import { echoSize, formatBytes, parseSize } from "./sizes.js";

/**
 * Memory a PyTorch process holds on the GPU outside its caching allocator: the CUDA
 * context and the kernel modules of the libraries it loads. 1 GiB by default: a bare
 * context took 527 MiB on the H200 (`gmlake doctor` there: 150,109,880,320 B total,
 * 149,557,477,376 B free after creating it; benchmarks/h200-2026-11-29/doctor.log), and
 * cuBLAS, cuDNN and Triton load their kernels lazily on first use, a few hundred MiB more
 * (their workspaces come from the caching allocator, so they are in the trace already).
 * NCCL's buffers are outside too: with collectives across GPUs, raise --reserve
 * (scripts/gpu/measure-reserve.sh measures it for a workload on the GPU host).
 */
export const DEFAULT_RESERVE_BYTES = 2 ** 30;

/** A device as the user gave it: its capacity, what the process holds outside the allocator, and what is left for the allocator. */
export interface DeviceBudget {
  /** --capacity in bytes, or null. */
  capacityBytes: number | null;
  /** --reserve in bytes (the default when not given). */
  reserveBytes: number;
  /** capacity - reserve: the bytes the allocator may reserve; null without --capacity. */
  allocatorBytes: number | null;
  /** "--capacity 80GB = 74.51 GiB, --reserve 1.00 GiB: 73.51 GiB for the allocator" (the values as read). */
  echo: string;
}

export function parseBudget(values: { capacity?: unknown; reserve?: unknown }): DeviceBudget {
  const reserveText = values.reserve === undefined ? undefined : String(values.reserve);
  const reserveBytes = reserveText === undefined ? DEFAULT_RESERVE_BYTES : parseSize(reserveText, "--reserve", { allowZero: true });
  const reserveEcho = reserveText === undefined ? `${formatBytes(reserveBytes)} (default)` : echoSize(reserveText, reserveBytes);
  if (values.capacity === undefined) {
    return { capacityBytes: null, reserveBytes, allocatorBytes: null, echo: `--reserve ${reserveEcho}` };
  }
  const capText = String(values.capacity);
  const capacityBytes = parseSize(capText, "--capacity");
  if (reserveBytes >= capacityBytes) {
    throw new UsageError(`--reserve ${formatBytes(reserveBytes)} leaves nothing of --capacity ${echoSize(capText, capacityBytes)} for the allocator`);
  }
  const allocatorBytes = capacityBytes - reserveBytes;
  return {
    capacityBytes,
    reserveBytes,
    allocatorBytes,
    echo: `--capacity ${echoSize(capText, capacityBytes)}, --reserve ${reserveEcho}: ${formatBytes(allocatorBytes)} for the allocator`,
  };
}
