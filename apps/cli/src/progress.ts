import { terminalSafe } from "@gmlake/output";

/**
 * A progress bar on stderr, drawn only on a TTY and only once work has run for a second,
 * so that piped output and quick commands stay clean.
 */
export class Progress {
  private readonly start = Date.now();
  private lastDraw = 0;
  private drawn = false;
  private readonly enabled: boolean;

  constructor(
    private readonly label: string,
    stream: NodeJS.WriteStream = process.stderr,
    private readonly out: NodeJS.WriteStream = stream,
  ) {
    this.enabled = Boolean(stream.isTTY) && !process.env.CI;
  }

  update(done: number, total: number, note = ""): void {
    if (!this.enabled) return;
    const now = Date.now();
    if (now - this.start < 1000 || now - this.lastDraw < 100) return;
    this.lastDraw = now;
    const width = 30;
    const frac = total > 0 ? Math.min(1, done / total) : 0;
    const filled = Math.round(frac * width);
    const bar = "#".repeat(filled) + "-".repeat(width - filled);
    this.out.write(`\r${this.label} [${bar}] ${(frac * 100).toFixed(0).padStart(3)}% ${terminalSafe(note)}`.slice(0, 120) + "\x1b[K");
    this.drawn = true;
  }

  done(): void {
    if (this.drawn) this.out.write("\r\x1b[K");
    this.drawn = false;
  }
}
