import { StitchError } from "./errors.js";

/** A knob's value: what a policy's create() receives. */
export type KnobValue = number | boolean | string | number[] | null;

/**
 * One knob of a policy, declared once: checked for the library (Allocator, replay), the
 * CLI (--set, compare) and the benchmarks, and listed by `gmlake policies`.
 */
export interface Knob {
  /**
   * bytes: an integer byte count (a string with a unit is accepted: "512MiB", "1.5GB");
   * integer / number: with `unit` saying what it counts; boolean (true/false; 1/0 too, the
   * original GMLake's on/off variables' form); choice: one of `choices`;
   * divisions: PyTorch's roundup_power2_divisions (16 non-negative integers).
   */
  readonly type: "bytes" | "integer" | "number" | "boolean" | "choice" | "divisions";
  readonly default: KnobValue;
  /** One line: what it does. */
  readonly description: string;
  /** What an integer or number counts ("GiB", "x request"). */
  readonly unit?: string;
  /** Inclusive bounds (numbers, byte counts); bytes default to [0, 2^50]. */
  readonly min?: number;
  readonly max?: number;
  /** An exclusive lower bound (a ratio that must be positive), instead of min. */
  readonly greaterThan?: number;
  /** The value must be a multiple of this (bytes). */
  readonly multipleOf?: number;
  readonly choices?: readonly string[];
  /** null is accepted and means this (e.g. "the trace's recorded setting"). */
  readonly nullMeans?: string;
}

/** The knob types there are. */
export const KNOB_TYPES: readonly Knob["type"][] = ["bytes", "integer", "number", "boolean", "choice", "divisions"];

/**
 * A knob's declaration checked when its policy registers: a type there is, bounds that are
 * numbers, choices for a choice. Otherwise a knob of an unknown type would register and then
 * refuse every value. Throws StitchError BAD_ARGUMENT naming the policy and the knob.
 */
export function checkKnobDeclaration(policy: string, name: string, k: Knob): void {
  const bad = (why: string): never => {
    throw new StitchError("BAD_ARGUMENT", `policy ${policy}: knob ${name} ${why}`);
  };
  if (!KNOB_TYPES.includes(k.type)) bad(`has type ${JSON.stringify(k.type)}, not one of ${KNOB_TYPES.join(", ")}`);
  for (const f of ["min", "max", "greaterThan", "multipleOf"] as const) {
    if (k[f] !== undefined && (typeof k[f] !== "number" || !Number.isFinite(k[f]))) bad(`has ${f} ${String(k[f])}, not a finite number`);
  }
  if (k.min !== undefined && k.max !== undefined && k.min > k.max) bad(`has min ${k.min} above max ${k.max}`);
  if (k.multipleOf !== undefined && !(k.multipleOf > 0)) bad(`has multipleOf ${k.multipleOf}: it must be positive`);
  if (k.type === "choice" && (!Array.isArray(k.choices) || k.choices.length === 0 || !k.choices.every((c) => typeof c === "string"))) {
    bad("is a choice with no choices (choices: a list of strings)");
  }
  for (const f of ["unit", "nullMeans"] as const) if (k[f] !== undefined && typeof k[f] !== "string") bad(`has a ${f} that is not a string`);
}

/** Every knob of a policy by name. */
export type KnobSchema<O> = { readonly [K in keyof O]: Knob };

/** 1 PiB: no device comes near it, and sizes past it would lose integer precision in products. */
const MAX_BYTES = 2 ** 50;

/**
 * Size units: binary (KiB, MiB, GiB, TiB) and decimal (kB, MB, GB, TB) mean what they say; a
 * bare K, M, G or T is refused ("80G" is 80 GiB to some tools and 80 GB to others).
 */
export const BYTE_UNITS: Readonly<Record<string, number>> = {
  b: 1,
  kb: 1e3,
  mb: 1e6,
  gb: 1e9,
  tb: 1e12,
  kib: 2 ** 10,
  mib: 2 ** 20,
  gib: 2 ** 30,
  tib: 2 ** 40,
};

/** "512MiB", "1.5GB", "80 GiB", "1048576" -> bytes (rounded to an integer); null when it is not a size. */
export function parseByteSize(text: string): number | null {
  const m = /^\s*(\d+(?:\.\d+)?(?:e\d+)?|\.\d+)\s*([a-zA-Z]*)\s*$/i.exec(text);
  const unit = m ? BYTE_UNITS[(m[2] || "b").toLowerCase()] : undefined;
  if (!m || unit === undefined) return null;
  const bytes = Math.round(Number(m[1]) * unit);
  return Number.isFinite(bytes) ? bytes : null;
}

function fmtBytes(n: number): string {
  for (const [u, v] of [["PiB", 2 ** 50], ["TiB", 2 ** 40], ["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]] as const) {
    if (n >= v && n % v === 0) return `${n / v}${u}`;
  }
  return `${n}`;
}

/** A knob value as a command line writes it: byte counts with a unit where exact ("512MiB"). */
export function formatKnobValue(k: Knob, v: KnobValue): string {
  if (k.type === "bytes" && typeof v === "number" && v > 0) return fmtBytes(v);
  return typeof v === "string" ? v : JSON.stringify(v);
}

/** What a knob accepts, in words (errors and `gmlake policies`). */
export function describeKnobRange(k: Knob): string {
  const orNull = k.nullMeans !== undefined ? ` or null (${k.nullMeans})` : "";
  switch (k.type) {
    case "boolean":
      return `true or false (or 1/0)${orNull}`;
    case "choice":
      return `one of ${(k.choices ?? []).join(", ")}${orNull}`;
    case "divisions":
      return `16 non-negative integers, e.g. [1,2,4,...]${orNull}`;
    case "bytes": {
      const lo = k.min ?? 0;
      const hi = k.max ?? MAX_BYTES;
      const mult = k.multipleOf !== undefined ? `, a multiple of ${fmtBytes(k.multipleOf)}` : "";
      return `a byte count from ${fmtBytes(lo)} to ${fmtBytes(hi)}${mult} (units allowed: 512MiB, 1.5GB)${orNull}`;
    }
    default: {
      const what = k.type === "integer" ? "an integer" : "a number";
      const unit = k.unit ? ` (${k.unit})` : "";
      const lo = k.greaterThan !== undefined ? ` > ${k.greaterThan}` : k.min !== undefined ? ` >= ${k.min}` : "";
      const range = k.min !== undefined && k.max !== undefined ? ` from ${k.min} to ${k.max}` : lo + (k.max !== undefined ? `${lo ? " and" : ""} <= ${k.max}` : "");
      return `${what}${range}${unit}${orNull}`;
    }
  }
}

/**
 * A knob's value checked and converted: the right type, inside the range. Strings are
 * accepted in the form a command line writes them ("512MiB", "true", "[1,2]", "null"), so
 * the CLI passes its --set text as is. Throws StitchError BAD_OPTION naming the knob and
 * what it accepts.
 */
export function checkKnob(policy: string, name: string, k: Knob, value: unknown): KnobValue {
  const bad = (): never => {
    let shown: string;
    try {
      shown = typeof value === "string" ? `'${value}'` : (JSON.stringify(value) ?? String(value));
    } catch {
      shown = String(value);
    }
    if (shown.length > 60) shown = shown.slice(0, 57) + "...";
    throw new StitchError("BAD_OPTION", `${policy}.${name} accepts ${describeKnobRange(k)}, not ${shown}`);
  };
  let v = value;
  if (typeof v === "string") {
    const t = v.trim();
    if (t === "null") v = null;
    else if (k.type === "boolean") v = t === "true" || t === "1" ? true : t === "false" || t === "0" ? false : bad();
    // a negative count only as a plain integer, where the knob allows it ("-1 = unlimited")
    else if (k.type === "bytes") v = parseByteSize(t) ?? (/^-\d+$/.test(t) ? Number(t) : bad());
    else if (k.type === "integer" || k.type === "number") v = /^[-+]?(\d+(\.\d*)?|\.\d+)(e[-+]?\d+)?$/i.test(t) ? Number(t) : bad();
    else if (k.type === "divisions") {
      try {
        v = JSON.parse(t);
      } catch {
        bad();
      }
    }
  }
  if (v === null) return k.nullMeans !== undefined ? null : bad();
  switch (k.type) {
    case "boolean":
      // 1/0: what gmlake's on/off knobs took when they were integers (and its original's variables)
      return typeof v === "boolean" ? v : v === 1 ? true : v === 0 ? false : bad();
    case "choice":
      return typeof v === "string" && (k.choices ?? []).includes(v) ? v : bad();
    case "divisions":
      return Array.isArray(v) && v.length === 16 && v.every((x) => Number.isSafeInteger(x) && x >= 0 && x <= 2 ** 20) ? [...(v as number[])] : bad();
    default: {
      if (typeof v !== "number" || !Number.isFinite(v)) return bad();
      const integral = k.type !== "number";
      if (integral && !Number.isSafeInteger(v)) return bad();
      const lo = k.min ?? (k.type === "bytes" ? 0 : -Number.MAX_SAFE_INTEGER);
      const hi = k.max ?? (k.type === "bytes" ? MAX_BYTES : Number.MAX_SAFE_INTEGER);
      if (v < lo || v > hi || (k.greaterThan !== undefined && !(v > k.greaterThan))) return bad();
      if (k.multipleOf !== undefined && v % k.multipleOf !== 0) return bad();
      return v;
    }
  }
}

/** Every knob's default (what create() gets when nothing is set). */
export function knobDefaults<O>(knobs: KnobSchema<O>): O {
  const out: Record<string, KnobValue> = {};
  for (const [name, k] of Object.entries(knobs) as [string, Knob][]) out[name] = Array.isArray(k.default) ? [...k.default] : k.default;
  return out as O;
}

/** "name=value" -> [name, value], both trimmed; null when no name comes before an "=". */
export function splitKnobAssignment(text: string): [string, string] | null {
  const eq = text.indexOf("=");
  const name = eq < 0 ? "" : text.slice(0, eq).trim();
  return name === "" ? null : [name, text.slice(eq + 1).trim()];
}

/**
 * Knob text, as an environment variable gives it (GMLAKE_KNOBS): "name=value,name=value" (a
 * comma inside [...] belongs to the value: divisions) or a JSON object. Values stay as the
 * text says them; checkKnob converts each by its knob's type. The one reader of knob text:
 * the live library takes the variable's text unparsed and reads it here. Throws StitchError
 * BAD_OPTION, one line starting with `source`.
 */
export function parseKnobText(text: string, source = "knobs"): Record<string, unknown> {
  const t = text.trim();
  const bad = (why: string): never => {
    throw new StitchError("BAD_OPTION", `${source}: ${why}`);
  };
  const out: Record<string, unknown> = Object.create(null); // "__proto__=x" is a knob name like any other
  if (t.startsWith("{")) {
    let v: unknown;
    try {
      v = JSON.parse(t);
    } catch (e) {
      return bad(`not JSON (${(e as Error).message.split("\n")[0]})`);
    }
    if (v === null || typeof v !== "object" || Array.isArray(v)) return bad(`expected a JSON object, got ${t}`);
    return Object.assign(out, v);
  }
  // the parts between commas outside [...] (a list's commas stay in its value)
  const parts = t.match(/(?:\[[^\]]*\]?|[^,[])+/g) ?? [];
  for (const part of parts) {
    if (part.trim() === "") continue;
    const kv = splitKnobAssignment(part);
    if (kv === null) return bad(`expected name=value, got '${part.trim()}'`);
    out[kv[0]] = kv[1];
  }
  return out;
}
