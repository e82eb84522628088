import { GmlakeError } from "@gmlake/errors";

/** Codes a {@link ChunkPoolError} carries. */
export type ChunkPoolErrorCode =
  | "BAD_SIZE"
  | "BAD_ADDRESS"
  | "RELEASED"
  | "STILL_MAPPED"
  | "NOT_MAPPED"
  | "ALREADY_MAPPED"
  | "FOREIGN_CHUNK";

/** Misuse of the chunk pool: a clear one-line message with a `code`. Driver failures pass through as VmmError. */
export class ChunkPoolError extends GmlakeError<ChunkPoolErrorCode> {
  readonly code: ChunkPoolErrorCode;
  constructor(code: ChunkPoolErrorCode, message: string) {
    super(message);
    this.name = "ChunkPoolError";
    this.code = code;
  }
}
