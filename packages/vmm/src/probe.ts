/**
 * probeCuda(): a doctor-style report of what the cuda driver would find: the addon, the
 * CUDA driver library, each device's VMM support, granularity and memory. By default it
 * runs in a child process (node-llama-cpp's pattern), so a broken driver that crashes
 * cuInit takes down the child, not the caller; the report then says how the child died.
 */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { basename } from "node:path";
import { fileURLToPath } from "node:url";

import type { DeviceInfo, MemInfo } from "./driver.js";
import { addonPath, loadNative, locateAddon, type AddonLocation } from "./native.js";

export interface ProbeDevice extends DeviceInfo {
  /** cuMemGetInfo on the device's primary context, if it could be opened. */
  readonly memInfo?: MemInfo;
  readonly error?: string;
}

export interface CudaProbe {
  /** A driver and at least one device with VMM support: createDriver("auto") picks cuda. */
  readonly ok: boolean;
  /** from: where the loaded addon came from ($GMLAKE_VMM_ADDON, a source build, the prebuilt platform package). */
  readonly addon: { readonly loaded: boolean; readonly path: string; readonly from?: AddonLocation["from"]; readonly error?: string };
  readonly driver: {
    readonly found: boolean;
    readonly library?: string;
    /** e.g. "13.0" */
    readonly version?: string;
    readonly error?: { readonly code: string; readonly message: string };
  };
  readonly devices: readonly ProbeDevice[];
  /** Whether the probe ran in a child process. */
  readonly isolated: boolean;
  /** Set when the child process died instead of answering. */
  readonly crashed?: string;
}

export interface ProbeOptions {
  /** Probe in this process (default false: in a child process). */
  readonly inProcess?: boolean;
  /** Also open each device to read cuMemGetInfo (default true; creates a context). */
  readonly memInfo?: boolean;
  /** Child process time limit, ms (default 60 s). */
  readonly timeoutMs?: number;
}

function errorOf(e: unknown): { code: string; message: string } {
  const err = e as { code?: unknown; message?: unknown };
  return { code: typeof err.code === "string" ? err.code : "UNKNOWN", message: String(err.message ?? e) };
}

/** The probe itself, in this process. */
export function probeCudaInProcess(memInfo = true): CudaProbe {
  const path = addonPath();
  let native;
  try {
    native = loadNative();
  } catch (e) {
    return { ok: false, addon: { loaded: false, path, error: errorOf(e).message }, driver: { found: false }, devices: [], isolated: false };
  }
  const addon = { loaded: true, path, from: locateAddon().from };
  let loaded;
  try {
    loaded = native.cudaLoad();
  } catch (e) {
    const err = errorOf(e);
    return { ok: false, addon, driver: { found: err.code !== "CUDA_DRIVER_NOT_FOUND", error: err }, devices: [], isolated: false };
  }
  const v = loaded.driverVersion;
  const driver = { found: true, library: loaded.library, version: `${Math.floor(v / 1000)}.${(v % 1000) / 10}` };
  let count = 0;
  try {
    count = native.cudaDeviceCount();
  } catch (e) {
    return { ok: false, addon, driver: { ...driver, error: errorOf(e) }, devices: [], isolated: false };
  }
  const devices: ProbeDevice[] = [];
  for (let ordinal = 0; ordinal < count; ordinal++) {
    try {
      const [minimum, recommended] = native.cudaGranularity(ordinal);
      const base = {
        ordinal,
        name: native.cudaDeviceName(ordinal),
        totalBytes: native.cudaDeviceTotalMem(ordinal),
        vmmSupported: native.cudaDeviceVmmSupported(ordinal),
        granularity: { minimum, recommended },
      };
      if (!memInfo) {
        devices.push(base);
        continue;
      }
      const dev = native.cudaDeviceOpen(ordinal);
      try {
        const [freeBytes, totalBytes] = native.cudaMemGetInfo(dev);
        devices.push({ ...base, memInfo: { freeBytes, totalBytes } });
      } finally {
        native.cudaDeviceClose(dev);
      }
    } catch (e) {
      devices.push({
        ordinal,
        name: "?",
        totalBytes: 0,
        vmmSupported: false,
        granularity: { minimum: 0, recommended: 0 },
        error: errorOf(e).message,
      });
    }
  }
  return { ok: devices.some((d) => d.vmmSupported && !d.error), addon, driver, devices, isolated: false };
}

export function probeCuda(options: ProbeOptions = {}): CudaProbe {
  const memInfo = options.memInfo ?? true;
  if (options.inProcess) return probeCudaInProcess(memInfo);
  // Beside this file in dist; from src (under vitest) the built one.
  let child = fileURLToPath(new URL("./probe-child.js", import.meta.url));
  if (!existsSync(child)) child = fileURLToPath(new URL("../dist/probe-child.js", import.meta.url));
  const r = spawnSync(process.execPath, [child, memInfo ? "--mem-info" : "--no-mem-info"], {
    encoding: "utf8",
    timeout: options.timeoutMs ?? 60_000,
    env: process.env,
  });
  const base = { ok: false, addon: { loaded: false, path: addonPath() }, driver: { found: false }, devices: [], isolated: true };
  if (r.error) {
    const timedOut = (r.error as NodeJS.ErrnoException).code === "ETIMEDOUT";
    const limit = (options.timeoutMs ?? 60_000) / 1000;
    return { ...base, crashed: timedOut ? `the probe child hung: no answer within ${limit} s (killed)` : `could not run the probe child: ${r.error.message}` };
  }
  if (r.status === 0) {
    try {
      return { ...(JSON.parse(r.stdout) as CudaProbe), isolated: true };
    } catch {
      return { ...base, crashed: `the probe child printed no report: ${r.stdout.slice(0, 200)}` };
    }
  }
  const how = r.signal ? `killed by ${r.signal}` : `exited with ${r.status}`;
  return { ...base, crashed: `the probe child ${how}: ${r.stderr.trim().split("\n").slice(-3).join(" | ")}` };
}

let firstUse: CudaProbe | undefined;

/**
 * The child-process probe that precedes this process's first use of libcuda (CudaDriver,
 * cudaAvailable, createDriver("auto")), run once and remembered: a libcuda whose cuInit
 * crashes or hangs then takes down the child, not the caller. Skipped when libcuda is
 * already in this process (loaded by the program embedding Node) or when Node is
 * embedded (process.execPath is not a node binary that could run the child). Time limit:
 * $GMLAKE_CUDA_PROBE_TIMEOUT_MS (default 30 s). GMLAKE_CUDA_PROBE=0 skips it (loads
 * libcuda in this process directly, as before).
 */
export function cudaFirstUseProbe(): CudaProbe | null {
  if (process.env.GMLAKE_CUDA_PROBE === "0") return null;
  // Not a first use: libcuda is in this process already (PyTorch embedding Node loaded and
  // initialized it; process.execPath is then python, which could not run the child).
  if (firstUse === undefined && libcudaLoadedHere()) return null;
  // Embedded Node (process.execPath is the host program): no node binary to run the child.
  if (!/^node(js)?[\d.]*(\.exe)?$/i.test(basename(process.execPath))) return null;
  if (firstUse === undefined) {
    const ms = Number(process.env.GMLAKE_CUDA_PROBE_TIMEOUT_MS ?? 30_000);
    firstUse = probeCuda({ memInfo: false, timeoutMs: Number.isFinite(ms) && ms > 0 ? ms : 30_000 });
  }
  return firstUse;
}

function libcudaLoadedHere(): boolean {
  try {
    return loadNative().cudaLoadedHere();
  } catch {
    return false; // no addon: the probe reports that
  }
}

/** One line a human can act on. */
export function describeProbe(p: CudaProbe): string {
  if (p.crashed) return `cuda: probe crashed (${p.crashed})`;
  if (!p.addon.loaded) return `cuda: addon not loaded (${p.addon.error})`;
  if (!p.driver.found) return `cuda: no driver (${p.driver.error?.message ?? "not found"})`;
  if (p.driver.error) return `cuda: driver ${p.driver.version ?? ""} unusable (${p.driver.error.message})`;
  if (p.devices.length === 0) return `cuda: driver ${p.driver.version}, no devices`;
  const d = p.devices
    .map((x) =>
      x.error
        ? `#${x.ordinal} error: ${x.error}`
        : `#${x.ordinal} ${x.name} vmm=${x.vmmSupported} granularity=${x.granularity.minimum}/${x.granularity.recommended}` +
          ` total=${x.totalBytes}${x.memInfo ? ` free=${x.memInfo.freeBytes}` : ""}`,
    )
    .join("; ");
  return `cuda: driver ${p.driver.version} (${p.driver.library}): ${d}`;
}
