import { H200_BYTES, createDriver, defaultHostCapacity, type VmmDriver } from "@gmlake/vmm";
import { getPolicy, listPolicies, loadPolicyModules, splitKnobAssignment, StitchError } from "@gmlake/stitch";
import { STITCH_INPUT_CODES, UsageError } from "./cli-error.js";
import { formatBytes, parseSize } from "./sizes.js";
import { closest } from "./suggest.js";

export type DriverChoice = "sim" | "host" | "cuda" | "auto";
const DRIVERS: readonly DriverChoice[] = ["sim", "host", "cuda", "auto"];

export function parseDriver(value: unknown, fallback: DriverChoice = "sim"): DriverChoice {
  if (value === undefined) return fallback;
  if (typeof value === "string" && (DRIVERS as readonly string[]).includes(value)) return value as DriverChoice;
  throw new UsageError(`invalid --driver '${String(value)}': expected one of ${DRIVERS.join(", ")}`);
}

/**
 * A fresh driver for one run; the caller closes it. Errors (no GPU for cuda) are input
 * errors. On host, `--capacity` is the driver's own capacity too, by default an H200's
 * as on sim (its pages are used only where integrity stamps touch them), except with
 * `--integrity full`, which touches every byte: there the default is the host driver's
 * safe one (half the free memory), and `--capacity` may not exceed it.
 */
export function openDriver(choice: DriverChoice, capacity?: number, integrity?: boolean | "full"): VmmDriver {
  let driver: VmmDriver;
  const hostCapacity = capacity ?? (integrity === "full" ? undefined : H200_BYTES);
  try {
    driver = createDriver(choice, hostCapacity !== undefined && choice !== "sim" ? { capacityBytes: hostCapacity } : {});
  } catch (e) {
    const code = (e as { code?: string }).code ?? "";
    throw new UsageError(`cannot open the ${choice} driver: ${(e as Error).message.split("\n")[0]}${code && !(e as Error).message.includes(code) ? ` (${code})` : ""}`);
  }
  if (driver.name === "host" && integrity === "full" && capacity !== undefined) {
    const safe = defaultHostCapacity(driver.device.granularity.minimum);
    if (capacity > safe) {
      driver.close();
      throw new UsageError(
        `--integrity full writes every byte the host driver hands out: --capacity ${formatBytes(capacity)} is more than half the memory free now (${formatBytes(safe)})`,
      );
    }
  }
  return driver;
}

export function parsePolicies(value: unknown, fallback: string[]): string[] {
  const names = value === undefined ? fallback : String(value).split(",").map((s) => s.trim()).filter(Boolean);
  if (names.length === 0) throw new UsageError("--policies needs at least one policy name");
  for (const n of names) checkPolicy(n);
  return names;
}

export function checkPolicy(name: string): string {
  try {
    getPolicy(name);
  } catch {
    const names = listPolicies().map((p) => p.name);
    const near = closest(name, names);
    throw new UsageError(`unknown policy '${name}'${near ? `: did you mean ${near}?` : ""} (policies: ${names.join(", ")})`);
  }
  return name;
}

/**
 * `--set key=value` knobs as text: each policy's knob schema converts and checks them
 * (sizes with units, true/false, null, [..] lists), once, before any trace is read.
 */
export function parseSets(values: unknown): Record<string, string> {
  const list = values === undefined ? [] : Array.isArray(values) ? values : [values];
  const out: Record<string, string> = Object.create(null); // "__proto__=x" is a knob name like any other
  for (const item of list) {
    const text = String(item);
    const kv = splitKnobAssignment(text); // stitch's, as for GMLAKE_KNOBS text
    if (kv === null) throw new UsageError(`invalid --set '${text}': expected key=value`);
    const [key, value] = kv;
    // a knob set twice to different values: which one was meant?
    if (Object.hasOwn(out, key) && out[key] !== value) throw new UsageError(`--set ${key} given twice ('${out[key]}', then '${value}'): give it once`);
    out[key] = value;
  }
  return out;
}

/**
 * `--policy-module PATH|PACKAGE` (repeatable): load each module and register the policies
 * it exports by default; returns their names. A module that cannot be loaded, exports no
 * policy, or clashes with a registered name is bad input (exit 2).
 */
export async function usePolicyModules(values: unknown): Promise<string[]> {
  const specs = values === undefined ? [] : (Array.isArray(values) ? values : [values]).map(String);
  if (specs.length === 0) return [];
  try {
    return await loadPolicyModules(specs);
  } catch (e) {
    throw new UsageError(`--policy-module: ${(e as Error).message.split("\n")[0]}`);
  }
}

/** The option every command that takes a policy has. */
export const POLICY_MODULE_OPTION = { "policy-module": { type: "string", multiple: true } } as const;

/** Stitch's own errors about options (unknown knob, wrong type) are usage errors. */
export function asUsage<T>(f: () => T): T {
  try {
    return f();
  } catch (e) {
    // BAD_TRACE: a malformed event stream (stitch's replay refuses it naming the event) is bad input too
    if (e instanceof StitchError && STITCH_INPUT_CODES.has(e.code)) throw new UsageError(e.message);
    throw e;
  }
}
