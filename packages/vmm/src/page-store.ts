/**
 * The sim's memory contents: a sparse store per physical handle. Pages never written
 * read as zeros; a memset over a whole page keeps one fill byte, not 64 KiB, so filling a
 * large range stays cheap; only partly written pages hold bytes.
 */
const PAGE = 64 * 1024;

export class PageStore {
  private readonly pages = new Map<number, Uint8Array | number>();

  /** Bytes held in materialized pages (fill-only pages cost nothing). */
  get storedBytes(): number {
    let n = 0;
    for (const p of this.pages.values()) if (typeof p !== "number") n += PAGE;
    return n;
  }

  private materialize(index: number): Uint8Array {
    const p = this.pages.get(index);
    if (p instanceof Uint8Array) return p;
    const bytes = new Uint8Array(PAGE);
    if (typeof p === "number" && p !== 0) bytes.fill(p);
    this.pages.set(index, bytes);
    return bytes;
  }

  fill(offset: number, value: number, length: number): void {
    let pos = offset;
    const end = offset + length;
    while (pos < end) {
      const index = Math.floor(pos / PAGE);
      const inPage = pos - index * PAGE;
      const n = Math.min(PAGE - inPage, end - pos);
      if (n === PAGE) {
        if (value === 0) this.pages.delete(index);
        else this.pages.set(index, value);
      } else {
        this.materialize(index).fill(value, inPage, inPage + n);
      }
      pos += n;
    }
  }

  write(offset: number, data: Uint8Array, from: number, length: number): void {
    let pos = offset;
    let src = from;
    const end = offset + length;
    while (pos < end) {
      const index = Math.floor(pos / PAGE);
      const inPage = pos - index * PAGE;
      const n = Math.min(PAGE - inPage, end - pos);
      this.materialize(index).set(data.subarray(src, src + n), inPage);
      pos += n;
      src += n;
    }
  }

  read(offset: number, out: Uint8Array, to: number, length: number): void {
    let pos = offset;
    let dst = to;
    const end = offset + length;
    while (pos < end) {
      const index = Math.floor(pos / PAGE);
      const inPage = pos - index * PAGE;
      const n = Math.min(PAGE - inPage, end - pos);
      const p = this.pages.get(index);
      if (p instanceof Uint8Array) out.set(p.subarray(inPage, inPage + n), dst);
      else out.fill(p ?? 0, dst, dst + n);
      pos += n;
      dst += n;
    }
  }
}
