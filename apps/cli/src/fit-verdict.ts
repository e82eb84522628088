import { FIT_RESOLUTION, privatePoolTags, smallestCapacity } from "@gmlake/stitch";
import { SimDriver } from "@gmlake/vmm";
import type { DeviceBudget } from "./device-budget.js";
import type { LoadedTrace } from "./load-trace.js";
import { asUsage } from "./options.js";
import { formatBytes } from "./sizes.js";

/** Will the trace fit, per policy: the smallest device it runs on and what is left on the user's. */
export interface FitVerdict {
  trace: string;
  policy: string;
  /** Smallest capacity for the allocator on which the whole trace replays (bisection, sim driver); null: not found. */
  smallestCapacityBytes: number | null;
  /** smallestCapacityBytes + reserveBytes: the smallest GPU the job runs on. */
  smallestDeviceBytes: number | null;
  /** The capacity one step below, which runs out of memory. */
  failsAtBytes: number | null;
  resolutionBytes: number;
  searchReplays: number;
  reserveBytes: number;
  /** --capacity (the device), or null. */
  capacityBytes: number | null;
  /**
   * Whether the replay under capacity - reserve ran to the end (null without --capacity).
   * With several devices, from the search (each GPU's own events against the capacity):
   * the replay caps the devices' sum.
   */
  fits: boolean | null;
  /** capacity - reserve - smallest capacity (negative: short by that much); null without --capacity. */
  headroomBytes: number | null;
  /**
   * The limit no allocator goes below: the trace's peak of requested bytes, and its peak of
   * allocated bytes after PyTorch's rounding (the same for every policy).
   */
  peakRequestedBytes: number | null;
  peakAllocatedBytes: number | null;
  /** smallestCapacityBytes - peakRequestedBytes, and that as a percentage of peakRequestedBytes; null where either is unknown. */
  gapBytes: number | null;
  gapPercent: number | null;
  /** The same against peakAllocatedBytes. */
  gapToAllocatedBytes: number | null;
  gapToAllocatedPercent: number | null;
  /** How to run the allocator this policy models. */
  howToRun: string;
  /** Whether PyTorch offers it today (caching, expandable) or it needs our live allocator. */
  inPyTorch: boolean;
}

/** The setting that gives a policy's result in a PyTorch job today, or what it needs instead. */
export function howToRun(policy: string, recordedConf: string): { howToRun: string; inPyTorch: boolean } {
  switch (policy) {
    case "caching": {
      const conf = recordedConf && !/expandable_segments:\s*true/i.test(recordedConf) ? ` (PYTORCH_CUDA_ALLOC_CONF=${recordedConf})` : "";
      return { howToRun: `PyTorch's default allocator${conf}`, inPyTorch: true };
    }
    case "expandable":
      return { howToRun: "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", inPyTorch: true };
    case "gmlake":
      return { howToRun: "GMLake's patched PyTorch, or our live allocator", inPyTorch: false };
    case "vms":
      // the search ran under a budget: vms sizes its handles to one (budgetHandleDivisor), so the live run needs one too
      return { howToRun: `our live allocator (the gmlake_torch wheel, GMLAKE_POLICY=vms) under a budget at the capacity shown (GMLAKE_CAPACITY_BYTES or torch.cuda.set_per_process_memory_fraction)`, inPyTorch: false };
    default:
      return { howToRun: `our live allocator (the gmlake_torch wheel, GMLAKE_POLICY=${policy})`, inPyTorch: false };
  }
}

/**
 * The fit search for one trace x policy, always on the sim driver (dozens of replays; a
 * real driver would need the memory), with the policy's knobs and the trace's settings.
 */
export function fitVerdict(t: LoadedTrace, policy: string, options: Record<string, unknown>, budget: DeviceBudget, measured: { fits?: boolean | null; peakReservedBytes?: number; peakRequestedBytes?: number; peakAllocatedBytes?: number }): FitVerdict {
  const s = t.snapshot;
  const f = asUsage(() =>
    smallestCapacity(s.events, {
      policy,
      driver: new SimDriver(),
      options,
      settings: s.allocatorSettings,
      pools: privatePoolTags(s.events, s.segments),
      peakReservedBytes: measured.peakReservedBytes,
      peakRequestedBytes: measured.peakRequestedBytes,
    }),
  );
  const smallest = f.smallestCapacityBytes;
  const cap = budget.allocatorBytes;
  const requested = measured.peakRequestedBytes ?? null;
  const allocated = measured.peakAllocatedBytes ?? null;
  const gap = (limit: number | null) => (smallest === null || limit === null ? null : smallest - limit);
  const percent = (limit: number | null) => (smallest === null || limit === null || limit <= 0 ? null : (100 * (smallest - limit)) / limit);
  return {
    trace: t.name,
    policy,
    smallestCapacityBytes: smallest,
    smallestDeviceBytes: smallest === null ? null : smallest + budget.reserveBytes,
    failsAtBytes: f.failsAtBytes,
    resolutionBytes: f.resolutionBytes,
    searchReplays: f.replays,
    reserveBytes: budget.reserveBytes,
    capacityBytes: budget.capacityBytes,
    fits: measured.fits === undefined ? (cap === null || smallest === null ? null : smallest <= cap) : measured.fits,
    headroomBytes: cap === null || smallest === null ? null : cap - smallest,
    peakRequestedBytes: requested,
    peakAllocatedBytes: allocated,
    gapBytes: gap(requested),
    gapPercent: percent(requested),
    gapToAllocatedBytes: gap(allocated),
    gapToAllocatedPercent: percent(allocated),
    ...howToRun(policy, s.allocatorSettings.allocConf),
  };
}

/**
 * max_split_size_mb values tried for PyTorch's default allocator (it stops splitting
 * cached blocks above this size, PyTorch's own knob against fragmentation): log-spaced,
 * as the effect is not monotone in the value (on llama1b_lora 64 MiB needs 10.37 GiB,
 * 256 MiB 11.08 GiB, none 12.04 GiB).
 */
export const MAX_SPLIT_MIB = [64, 256, 1024];

/**
 * The default allocator with each MAX_SPLIT_MIB setting, searched like a policy: settings
 * a user can set today, for the advice. `fits` is the search's (smallest <= capacity -
 * reserve): these are not replayed under --capacity.
 */
export function maxSplitVerdicts(t: LoadedTrace, knobs: Record<string, unknown>, budget: DeviceBudget, limit: { peakRequestedBytes: number; peakAllocatedBytes: number }): FitVerdict[] {
  return MAX_SPLIT_MIB.map((mib) => {
    const v = fitVerdict(t, "caching", { ...knobs, maxSplitSize: mib * 2 ** 20 }, budget, { fits: null, ...limit });
    const fits = budget.allocatorBytes === null || v.smallestCapacityBytes === null ? null : v.smallestCapacityBytes <= budget.allocatorBytes;
    return { ...v, policy: `caching max_split_size_mb:${mib}`, howToRun: `PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:${mib}`, inPyTorch: true, fits };
  });
}

/** One line: which setting gives the best result in PyTorch today, and what only our allocator gives. */
export function advice(verdicts: readonly FitVerdict[], budget: DeviceBudget): string {
  const known = verdicts.filter((v) => v.smallestDeviceBytes !== null);
  const by = (a: FitVerdict, b: FitVerdict) => a.smallestDeviceBytes! - b.smallestDeviceBytes!;
  const pt = known.filter((v) => v.inPyTorch).sort(by);
  const ours = known.filter((v) => !v.inPyTorch).sort(by);
  const dflt = known.find((v) => v.policy === "caching");
  const size = (v: FitVerdict) => formatBytes(v.smallestDeviceBytes!);
  if (budget.capacityBytes === null) {
    const parts: string[] = [];
    const best = pt[0];
    if (best && best === dflt) parts.push(`${best.howToRun} needs the smallest GPU PyTorch can run it on today: ${size(best)}`);
    else if (best) parts.push(`set ${best.howToRun}: it runs on ${size(best)}${dflt ? `, where ${dflt.howToRun} needs ${size(dflt)}` : ""}`);
    const o = ours[0];
    if (o && (!best || o.smallestDeviceBytes! < best.smallestDeviceBytes!)) {
      parts.push(`${o.policy} needs ${size(o)}${best ? ` (${formatBytes(best.smallestDeviceBytes! - o.smallestDeviceBytes!)} less)` : ""}, with ${o.howToRun}`);
    }
    else if (best && ours.length) parts.push("no other policy needs less");
    return parts.length ? `advice: ${parts.join("; ")}` : "advice: no policy ran the whole trace";
  }
  const dev = formatBytes(budget.capacityBytes);
  const fits = (v: FitVerdict) => v.fits === true;
  const room = (v: FitVerdict) => (v.headroomBytes !== null ? `, ${formatBytes(v.headroomBytes)} to spare` : "");
  if (dflt && fits(dflt)) return `advice: fits the ${dev} device as it is, with ${dflt.howToRun}${room(dflt)}`;
  const ptFit = verdicts.filter((v) => v.inPyTorch && fits(v)).sort((a, b) => (b.headroomBytes ?? 0) - (a.headroomBytes ?? 0))[0];
  if (ptFit) return `advice: ${dflt ? "does not fit the default allocator; " : ""}set ${ptFit.howToRun} to fit the ${dev} device${room(ptFit)}`;
  const ourFit = verdicts.filter((v) => !v.inPyTorch && fits(v)).sort((a, b) => (b.headroomBytes ?? 0) - (a.headroomBytes ?? 0))[0];
  if (ourFit) return `advice: no PyTorch setting fits the ${dev} device; ${ourFit.policy} does${room(ourFit)}, with ${ourFit.howToRun}`;
  const best = known.sort(by)[0];
  return best ? `advice: nothing fits the ${dev} device; ${best.policy} needs ${size(best)}, ${formatBytes(best.smallestDeviceBytes! - budget.capacityBytes)} more` : `advice: nothing fits the ${dev} device`;
}

export { FIT_RESOLUTION };
