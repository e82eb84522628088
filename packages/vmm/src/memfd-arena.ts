/**
 * The host driver's physical memory: its chunks are ranges of one memfd, not one memfd
 * each, so a replay holding 100k chunks holds one file descriptor (a memfd per chunk
 * made the fd limit, 1024 by default, the real capacity of the host driver). The file
 * only grows in size (ftruncate: free, pages come on first touch); a released range
 * gives its pages back at once (fallocate PUNCH_HOLE: it reads as zeroes after, as a
 * fresh cuMemCreate's memory may) and its offset is reused by the next chunk of the
 * same size. Offsets are 63-bit, so the file's size never runs out and holes cost
 * nothing: one memfd is enough. When the last range goes back (no chunk, hence no
 * mapping of it, is left) the memfd is closed: an idle driver holds no fd at all.
 */
import type { NativeAddon, NativeHandle } from "./native.js";

export class MemfdArena {
  private file: NativeHandle | null = null;
  /** The memfd's size (ftruncate'd), and the end of the ranges handed out so far. */
  private fileSize = 0;
  private end = 0;
  /** Released offsets, by chunk size (chunks come in few sizes: granularity multiples). */
  private readonly freeOffsets = new Map<number, number[]>();
  /** Bytes of the ranges handed out and not given back. */
  liveBytes = 0;

  constructor(private readonly native: NativeAddon) {}

  /** The memfd, made on first use. */
  get handle(): NativeHandle {
    return (this.file ??= this.native.hostMemCreate(0, 0));
  }

  /** File descriptors held: 0 or 1. */
  get fds(): number {
    return this.file === null ? 0 : 1;
  }

  /** A range of `size` bytes (zeroes); returns its offset. Throws the native error unchanged. */
  take(size: number): number {
    const file = this.handle;
    const reuse = this.freeOffsets.get(size);
    if (reuse !== undefined && reuse.length > 0) {
      this.liveBytes += size;
      return reuse.pop()!;
    }
    const offset = this.end;
    const end = offset + size;
    if (end > this.fileSize) {
      // Grow ahead (doubling, at most 64 GiB a step) so most takes make no syscall.
      const next = Math.max(end, Math.min(2 * this.fileSize, this.fileSize + 64 * 2 ** 30));
      this.native.hostMemResize(file, next);
      this.fileSize = next;
    }
    this.end = end;
    this.liveBytes += size;
    return offset;
  }

  /** Gives a range's pages back and keeps its offset for reuse. */
  give(offset: number, size: number): void {
    this.liveBytes -= size;
    if (this.liveBytes === 0) {
      this.close(); // every page goes with the file
      return;
    }
    this.native.hostMemPunch(this.handle, offset, size);
    let list = this.freeOffsets.get(size);
    if (list === undefined) this.freeOffsets.set(size, (list = []));
    list.push(offset);
  }

  /** Closes the memfd (its pages go once no mapping holds them). */
  close(): void {
    const file = this.file;
    this.file = null;
    this.fileSize = 0;
    this.end = 0;
    this.liveBytes = 0;
    this.freeOffsets.clear();
    if (file !== null) this.native.hostMemRelease(file);
  }
}
