import { GmlakeError } from "@gmlake/errors";

/**
 * The error every driver throws (a GmlakeError): `code` is the CUDA error name (`CUDA_ERROR_OUT_OF_MEMORY`,
 * `CUDA_ERROR_INVALID_VALUE`, ...) whichever driver raised it, so callers handle host, sim
 * and cuda the same way. `call` names the function that failed (`cuMemMap`, `hostMemMap`).
 *
 * The native addon is handed this class once at load (see native.ts) and throws instances
 * of it, so `instanceof VmmError` holds for native and TypeScript errors alike.
 */
export class VmmError extends GmlakeError<string> {
  override readonly name = "VmmError";
  constructor(
    readonly code: string,
    readonly call: string,
    message: string,
  ) {
    super(message);
  }
}

/** Codes this package raises besides the CUDA ones. */
export const DRIVER_NOT_FOUND = "CUDA_DRIVER_NOT_FOUND";
export const DRIVER_TOO_OLD = "CUDA_DRIVER_TOO_OLD";
export const ADDON_NOT_LOADED = "VMM_ADDON_NOT_LOADED";
/** libcuda crashed or hung in the child-process probe that precedes its first use here. */
export const CUDA_PROBE_FAILED = "CUDA_PROBE_FAILED";
export const INVALID_VALUE = "CUDA_ERROR_INVALID_VALUE";
export const OUT_OF_MEMORY = "CUDA_ERROR_OUT_OF_MEMORY";
export const INVALID_DEVICE = "CUDA_ERROR_INVALID_DEVICE";
export const NO_DEVICE = "CUDA_ERROR_NO_DEVICE";
export const NOT_SUPPORTED = "CUDA_ERROR_NOT_SUPPORTED";
export const INVALID_HANDLE = "CUDA_ERROR_INVALID_HANDLE";
/** A call on a driver after its close(): CUDA's answer once the context is gone. */
export const DEINITIALIZED = "CUDA_ERROR_DEINITIALIZED";
/**
 * Host resources of the process, not of the device: the host driver reports them as
 * their own codes, never CUDA_ERROR_OUT_OF_MEMORY (which an allocator answers by
 * emptying its cache and retrying, and a replay reports as the device's OOM).
 * EMFILE/ENFILE: the fd limit (ulimit -n). ENOMEM from mapping or protecting a range
 * inside a reservation: too many mappings (vm.max_map_count) or RLIMIT_AS; ENOMEM from
 * reserving one only when it does not fit RLIMIT_AS (`ulimit -v`); otherwise a reservation
 * larger than the address space is CUDA's OOM too.
 */
export const HOST_TOO_MANY_OPEN_FILES = "HOST_ERROR_TOO_MANY_OPEN_FILES";
export const HOST_ADDRESS_SPACE = "HOST_ERROR_ADDRESS_SPACE";
/** Codes that mean the machine running the driver hit a limit (not the modelled device). */
export const HOST_RESOURCE_CODES: readonly string[] = [HOST_TOO_MANY_OPEN_FILES, HOST_ADDRESS_SPACE];
export const LAUNCH_FAILED = "CUDA_ERROR_LAUNCH_FAILED";

/**
 * A VmmError in the native layer's message format: `call(args) failed: CODE (why)`.
 * `args` may be a function, so hot paths format their arguments only when they fail.
 */
export function vmmError(code: string, call: string, args: string | (() => string), why: string): VmmError {
  const a = typeof args === "function" ? args() : args;
  return new VmmError(code, call, `${call}(${a}) failed: ${code} (${why})`);
}

export function hex(n: number): string {
  return `0x${n.toString(16)}`;
}

/** A stream is a raw CUstream value: a non-negative integer (0 = the legacy default stream). */
export function checkStream(call: string, stream: number): void {
  if (!Number.isSafeInteger(stream) || stream < 0) {
    throw vmmError(INVALID_HANDLE, call, `stream=${String(stream)}`, "a stream is a raw CUstream value, a non-negative integer");
  }
}

/** Sizes and addresses must be non-negative safe integers; anything else is CUDA_ERROR_INVALID_VALUE. */
export function checkBytes(call: string, what: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw vmmError(INVALID_VALUE, call, `${what}=${String(value)}`, `${what} must be a non-negative integer`);
  }
}
