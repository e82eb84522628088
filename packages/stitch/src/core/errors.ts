import { GmlakeError } from "@gmlake/errors";

export type StitchErrorCode =
  | "OUT_OF_MEMORY"
  | "UNKNOWN_POLICY"
  | "DUPLICATE_POLICY"
  | "BAD_OPTION"
  | "BAD_ARGUMENT"
  | "INVARIANT"
  | "BAD_TRACE"
  /** A call on an Allocator after its close(). */
  | "CLOSED"
  /** A policy broke the contract of @gmlake/stitch/testing. */
  | "CONTRACT"
  /** A --policy-module that cannot be loaded or exports no policy. */
  | "BAD_MODULE"
  /** An outside policy broke one of the engine's rules or threw (PolicyFault: names the policy, its module, the rule). */
  | "BAD_POLICY";

/** Every error this package throws on bad input or a broken invariant: one line, with a `code`. */
export class StitchError extends GmlakeError<StitchErrorCode> {
  readonly code: StitchErrorCode;
  constructor(code: StitchErrorCode, message: string) {
    super(message);
    this.name = "StitchError";
    this.code = code;
  }
}

/** A malloc the allocator could not serve, after its own release-and-retry. */
export class OutOfMemoryError extends StitchError {
  readonly requestBytes: number;
  readonly stream: number;
  constructor(requestBytes: number, stream: number, detail: string) {
    super("OUT_OF_MEMORY", `out of memory: tried to allocate ${requestBytes} bytes on stream ${stream}; ${detail}`);
    this.name = "OutOfMemoryError";
    this.requestBytes = requestBytes;
    this.stream = stream;
  }
}

/** True for a driver error meaning "no memory" (VmmError code, or a capacity adaptor's). */
export function isDriverOom(e: unknown): boolean {
  return typeof e === "object" && e !== null && (e as { code?: unknown }).code === "CUDA_ERROR_OUT_OF_MEMORY";
}
