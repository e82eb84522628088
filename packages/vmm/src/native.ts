/**
 * Loads the native addon (build/Release/gmlake_vmm.node) once, lazily, and hands it the
 * VmmError class so native failures are VmmErrors. Loading never touches the CUDA driver:
 * libcuda is dlopen'ed by cudaLoad(), so this works on machines without a GPU.
 */
import { existsSync } from "node:fs";
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

/** Where the addon is looked for: $GMLAKE_VMM_ADDON, else the package's build/Release. */
export function addonPath(): string {
  const fromEnv = process.env.GMLAKE_VMM_ADDON;
  if (fromEnv) return fromEnv;
  return fileURLToPath(new URL("../build/Release/gmlake_vmm.node", import.meta.url));
}

let cached: NativeAddon | undefined;
let loadError: Error | undefined;

export function loadNative(): NativeAddon {
  if (cached) return cached;
  if (loadError) throw loadError;
  const path = addonPath();
  try {
    if (!existsSync(path)) throw new Error(`${path} does not exist (run \`pnpm --filter @gmlake/vmm build\`)`);
    const addon = createRequire(import.meta.url)(path) as NativeAddon;
    addon.setErrorClass(VmmError);
    cached = addon;
    return addon;
  } catch (e) {
    loadError = new VmmError(ADDON_NOT_LOADED, "loadNative", `cannot load the vmm addon: ${(e as Error).message}`);
    throw loadError;
  }
}
