import { UsageError } from "./cli-error.js";

const UNITS: Record<string, number> = {
  b: 1,
  kb: 1e3,
  mb: 1e6,
  gb: 1e9,
  tb: 1e12,
  kib: 2 ** 10,
  mib: 2 ** 20,
  gib: 2 ** 30,
  tib: 2 ** 40,
  k: 2 ** 10,
  m: 2 ** 20,
  g: 2 ** 30,
  t: 2 ** 40,
};

/** "80GiB", "512MiB", "1.5GB", "1048576" -> bytes (an integer). */
export function parseSize(text: string, what = "size"): number {
  const m = /^\s*(\d+(?:\.\d+)?|\.\d+)\s*([a-zA-Z]*)\s*$/.exec(text);
  const unit = m ? UNITS[(m[2] || "b").toLowerCase()] : undefined;
  if (!m || unit === undefined) {
    throw new UsageError(`invalid ${what} '${text}': expected bytes or a number with a unit (e.g. 80GiB, 512MiB, 1.5GB)`);
  }
  const bytes = Math.round(Number(m[1]) * unit);
  if (!Number.isSafeInteger(bytes) || bytes <= 0) {
    throw new UsageError(`invalid ${what} '${text}': must be a positive size below 8 PiB`);
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
