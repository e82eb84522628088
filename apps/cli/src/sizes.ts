import { BYTE_UNITS } from "@gmlake/stitch";
import { UsageError } from "./cli-error.js";

/**
 * Size units on input. Binary units (KiB, MiB, GiB, TiB: powers of 2^10, what nvidia-smi,
 * PyTorch's memory_summary and every gmlake output print) and decimal ones (kB/KB, MB, GB,
 * TB: powers of 10^3, what GPU vendors print on the box) are both accepted and mean what
 * they say. A bare K, M, G or T is refused: "80G" is 80 GiB to some tools and 80 GB to
 * others, and the two differ by 7%. The table is @gmlake/stitch's, which knob values use too.
 */
const UNITS = BYTE_UNITS;

/** "80GiB", "512MiB", "1.5GB", "1048576" -> bytes (an integer). */
export function parseSize(text: string, what = "size", options: { allowZero?: boolean } = {}): number {
  if (/^\s*-/.test(text)) throw new UsageError(`invalid ${what} '${text}': must be a ${options.allowZero ? "non-negative" : "positive"} size`);
  const m = /^\s*(\d+(?:\.\d+)?(?:e\d+)?|\.\d+)\s*([a-zA-Z]*)\s*$/i.exec(text); // the grammar of knob sizes too (1e9, 512MiB)
  const suffix = m ? (m[2] || "b").toLowerCase() : "";
  if (m && ["k", "m", "g", "t"].includes(suffix)) {
    const u = suffix.toUpperCase();
    throw new UsageError(`ambiguous ${what} '${text}': write ${m[1]}${u}iB (binary, 2^${{ K: 10, M: 20, G: 30, T: 40 }[u]} bytes) or ${m[1]}${u === "K" ? "k" : u}B (decimal, 10^${{ K: 3, M: 6, G: 9, T: 12 }[u]} bytes)`);
  }
  const unit = m ? UNITS[suffix] : undefined;
  if (!m || unit === undefined) {
    throw new UsageError(`invalid ${what} '${text}': expected bytes or a number with a unit (e.g. 80GiB, 512MiB, 80GB)`);
  }
  const bytes = Math.round(Number(m[1]) * unit);
  if (!Number.isSafeInteger(bytes) || bytes < 0 || (bytes === 0 && !options.allowZero)) {
    throw new UsageError(`invalid ${what} '${text}': must be a ${options.allowZero ? "non-negative" : "positive"} size below 8 PiB`);
  }
  return bytes;
}

/** Bytes -> "25.67 GiB" (binary units, as PyTorch and nvidia-smi print them). */
export function formatBytes(bytes: number, digits = 2): string {
  const abs = Math.abs(bytes);
  if (abs >= 2 ** 30) return `${(bytes / 2 ** 30).toFixed(digits)} GiB`;
  if (abs >= 2 ** 20) return `${(bytes / 2 ** 20).toFixed(digits)} MiB`;
  if (abs >= 2 ** 10) return `${(bytes / 2 ** 10).toFixed(digits)} KiB`;
  return `${bytes} B`;
}

/** How a size given on the command line was read: "80GB = 74.51 GiB" (the input as typed, then its value in GiB). */
export function echoSize(text: string, bytes: number): string {
  const typed = text.trim();
  const shown = formatBytes(bytes);
  return /\d\s*[kmgt]ib$/i.test(typed) ? shown : `${typed} = ${shown}`;
}
