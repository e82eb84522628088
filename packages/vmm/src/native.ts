/**
 * Finds and loads the native addon once, lazily, and hands it the VmmError class so native
 * failures are VmmErrors. Loading never touches the CUDA driver: libcuda is dlopen'ed by
 * cudaLoad(), so this works on machines without a GPU. Where the addon comes from, first
 * found first: $GMLAKE_VMM_ADDON; a source build (build/Release, made by `pnpm build` in
 * the workspace or by install.mjs where no prebuilt matches); the prebuilt platform package
 * (@gmlake/vmm-<platform>-<arch>-<libc>, an optional dependency installed only where its
 * os/cpu/libc match). The sim driver needs none of them.
 */
import { existsSync, readdirSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

import { ADDON_NOT_LOADED, VmmError } from "./vmm-error.js";

/** A native handle: an object type-tagged by the addon; other objects are rejected with TypeError. */
export interface NativeHandle {
  readonly id: number;
  readonly size: number;
}
/** A CUDA event (type-tagged by the addon). */
export interface NativeEvent {
  readonly id: number;
}
/** A CUDA device with its retained primary context (type-tagged). */
export type NativeDevice = object & { readonly __device: unique symbol };

export interface NativeAddon {
  setErrorClass(ctor: typeof VmmError): void;
  cudaLoad(): { library: string; driverVersion: number };
  /** Whether libcuda is mapped into this process already (dlopen RTLD_NOLOAD: runs nothing). */
  cudaLoadedHere(): boolean;
  cudaDeviceCount(): number;
  cudaDeviceName(ordinal: number): string;
  cudaDeviceTotalMem(ordinal: number): number;
  cudaDeviceVmmSupported(ordinal: number): boolean;
  cudaGranularity(ordinal: number): [minimum: number, recommended: number];
  cudaDeviceOpen(ordinal: number): NativeDevice;
  cudaDeviceClose(dev: NativeDevice): void;
  cudaMemCreate(dev: NativeDevice, size: number, id: number): NativeHandle;
  cudaMemRelease(dev: NativeDevice, handle: NativeHandle): void;
  cudaMemAddressReserve(dev: NativeDevice, size: number, alignment: number): number;
  cudaMemAddressFree(dev: NativeDevice, address: number, size: number): void;
  cudaMemMap(dev: NativeDevice, address: number, size: number, offset: number, handle: NativeHandle): void;
  cudaMemUnmap(dev: NativeDevice, address: number, size: number): void;
  cudaMemSetAccess(dev: NativeDevice, address: number, size: number): void;
  cudaMemGetInfo(dev: NativeDevice): [free: number, total: number];
  cudaMemAlloc(dev: NativeDevice, size: number): number;
  cudaMemFree(dev: NativeDevice, address: number): void;
  cudaMemset(dev: NativeDevice, address: number, value: number, size: number): void;
  cudaWrite(dev: NativeDevice, address: number, data: Uint8Array): void;
  cudaRead(dev: NativeDevice, address: number, out: Uint8Array): void;
  cudaSynchronize(dev: NativeDevice): void;
  cudaEventCreate(dev: NativeDevice, id: number): NativeEvent;
  cudaEventRecord(dev: NativeDevice, event: NativeEvent, stream: number): void;
  cudaEventQuery(dev: NativeDevice, event: NativeEvent): boolean;
  cudaEventSynchronize(dev: NativeDevice, event: NativeEvent): void;
  cudaEventDestroy(dev: NativeDevice, event: NativeEvent): void;
  cudaStreamWaitEvent(dev: NativeDevice, stream: number, event: NativeEvent): void;
  cudaStreamSynchronize(dev: NativeDevice, stream: number): void;

  hostPageSize(): number;
  hostMemCreate(size: number, id: number): NativeHandle;
  hostMemResize(handle: NativeHandle, size: number): void;
  hostMemPunch(handle: NativeHandle, offset: number, size: number): void;
  hostMemRelease(handle: NativeHandle): void;
  hostMemAddressReserve(size: number, alignment: number): number;
  hostMemAddressFree(address: number, size: number): void;
  hostMemMap(address: number, size: number, offset: number, handle: NativeHandle): void;
  hostMemUnmap(address: number, size: number): void;
  hostMemSetAccess(address: number, size: number): void;
  hostMemAlloc(size: number): number;
  hostMemFree(address: number, size: number): void;
  hostMemset(address: number, value: number, size: number): void;
  hostWrite(address: number, data: Uint8Array): void;
  hostRead(address: number, out: Uint8Array): void;
}

const require = createRequire(import.meta.url);

interface VmmManifest {
  readonly version: string;
  readonly optionalDependencies?: Record<string, string>;
  readonly devDependencies?: Record<string, string>;
}
const manifest = (): VmmManifest => require("../package.json") as VmmManifest;

let triple: string | undefined;
/** This machine as the platform packages name it: linux-x64-gnu, linux-arm64-musl, darwin-arm64 ... */
export function platformTriple(): string {
  if (triple) return triple;
  if (process.platform !== "linux") return (triple = `${process.platform}-${process.arch}`);
  // musl's loader is /lib/ld-musl-<arch>.so.1 (process.report would say too, but takes ~85 ms).
  let musl = false;
  try {
    musl = readdirSync("/lib").some((f) => f.startsWith("ld-musl-"));
  } catch {
    // no /lib: not a musl system laid out as musl's are
  }
  return (triple = `linux-${process.arch}-${musl ? "musl" : "gnu"}`);
}

/** The platform package that would hold the prebuilt addon for `triple`. */
export const prebuiltPackage = (triple = platformTriple()): string => `@gmlake/vmm-${triple}`;

/** The source build's output (cmake-js compile --out build). */
export const sourceBuildPath = (): string => fileURLToPath(new URL("../build/Release/gmlake_vmm.node", import.meta.url));

export interface AddonLocation {
  /** The .node to load, when one was found. */
  readonly path?: string;
  readonly from?: "GMLAKE_VMM_ADDON" | "source build" | "prebuilt";
  /** When none was found: one line saying what to do. */
  readonly missing?: string;
}

/** Where the addon would be loaded from, or why there is none (see the file comment for the order). */
export function locateAddon(triple = platformTriple()): AddonLocation {
  const fromEnv = process.env.GMLAKE_VMM_ADDON;
  if (fromEnv) return existsSync(fromEnv) ? { path: fromEnv, from: "GMLAKE_VMM_ADDON" } : { missing: `GMLAKE_VMM_ADDON=${fromEnv} does not exist` };
  const local = sourceBuildPath();
  if (existsSync(local)) return { path: local, from: "source build" };
  const pkg = prebuiltPackage(triple);
  try {
    return { path: require.resolve(`${pkg}/gmlake_vmm.node`), from: "prebuilt" };
  } catch {
    return { missing: missingAddonHint(triple) };
  }
}

/** One line for a machine with no addon: which prebuilt is missing, and the source build's recipe. */
export function missingAddonHint(triple = platformTriple()): string {
  const m = manifest();
  const pkg = prebuiltPackage(triple);
  const published = Object.keys(m.optionalDependencies ?? {}).filter((n) => n.startsWith("@gmlake/vmm-"));
  const prebuilt = published.includes(pkg)
    ? `${pkg} is not installed (optional dependencies omitted? \`npm i ${pkg}@${m.version}\`)`
    : `no prebuilt for ${triple} (there are: ${published.map((n) => n.slice("@gmlake/vmm-".length)).join(", ") || "none"})`;
  const dev = m.devDependencies ?? {};
  const tools = ["cmake-js", "node-addon-api"].map((n) => (dev[n] && !dev[n].includes(":") ? `${n}@${dev[n]}` : n)).join(" ");
  return (
    `${prebuilt} and no source build; the sim driver needs none; for host/cuda install cmake and a ` +
    `C++17 compiler, then \`npm i -D ${tools} && npm rebuild @gmlake/vmm\``
  );
}

/** The path of the addon that is (or would be) loaded; the source build's path when there is none. */
export function addonPath(): string {
  return locateAddon().path ?? sourceBuildPath();
}

let cached: NativeAddon | undefined;
let loadError: Error | undefined;

export function loadNative(): NativeAddon {
  if (cached) return cached;
  if (loadError) throw loadError;
  const where = locateAddon();
  try {
    if (!where.path) throw new Error(where.missing);
    const addon = require(where.path) as NativeAddon;
    addon.setErrorClass(VmmError);
    cached = addon;
    return addon;
  } catch (e) {
    const why = (e as Error).message.split("\n")[0];
    const what = where.path ? ` (${where.from} ${where.path})` : "";
    loadError = new VmmError(ADDON_NOT_LOADED, "loadNative", `cannot load the vmm addon${what}: ${why}`);
    throw loadError;
  }
}
