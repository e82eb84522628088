/**
 * writeStdout(text): every byte to standard output, or a "write" OutputError naming why
 * (ENOSPC on /dev/full or a full disk, EPIPE when the reader closed the pipe, EBADF).
 * Written with fs.writeSync on fd 1 rather than process.stdout, whose errors arrive
 * later as events (or not at all before exit), so truncated output used to exit 0.
 * A non-blocking pipe that is full answers EAGAIN: wait a little and go on.
 */
import { writeSync } from "node:fs";

import { OutputError, describeErrno, errnoCode } from "./output-error.js";

const pause = new Int32Array(new SharedArrayBuffer(4));

export function writeFd(fd: number, name: string, data: string | Uint8Array): void {
  const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : data;
  let off = 0;
  while (off < bytes.byteLength) {
    try {
      off += writeSync(fd, bytes, off, bytes.byteLength - off);
    } catch (e) {
      const code = errnoCode(e);
      if (code === "EAGAIN") {
        Atomics.wait(pause, 0, 0, 2);
        continue;
      }
      const why = code === "EPIPE" || code === "EBADF" ? `${name} was closed before the output was written: ${describeErrno(code)}` : `cannot write to ${name}: ${describeErrno(code)}`;
      throw new OutputError("write", code, name, why);
    }
  }
}

export function writeStdout(data: string | Uint8Array): void {
  writeFd(1, "stdout", data);
}
