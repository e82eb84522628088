import { GmlakeError } from "@gmlake/errors";

export type TraceFormatErrorCode = "BAD_HEADER" | "BAD_LINE" | "BAD_VALUE";

/** Bad input to a text trace reader (JSON lines, RMM CSV): one line naming where. */
export class TraceFormatError extends GmlakeError<TraceFormatErrorCode> {
  override readonly name = "TraceFormatError";
  constructor(
    readonly code: TraceFormatErrorCode,
    readonly source: string,
    readonly line: number,
    detail: string,
  ) {
    super(`${source}:${line}: ${detail}`);
  }
}
