/**
 * Policy knobs as a user gives them: from Python keywords (numbers, booleans, strings)
 * or from text (`GMLAKE_KNOBS="maxHandleBytes=67108864,crossStream=false"`, or JSON).
 * Text values take the type of the knob's default (Python's None, 1/0 for booleans); the
 * engine then checks every knob against its schema, which also reads sizes with units
 * ("512MiB"): unknown names and bad values are StitchError BAD_OPTION.
 */
import type { Policy } from "@gmlake/stitch";

/** Parses "k=v,k=v" or a JSON object. */
export function parseKnobText(text: string): Record<string, unknown> {
  const t = text.trim();
  if (t === "") return {};
  if (t.startsWith("{")) {
    const v: unknown = JSON.parse(t);
    if (v === null || typeof v !== "object" || Array.isArray(v)) throw new Error(`knobs: expected a JSON object, got ${t}`);
    return v as Record<string, unknown>;
  }
  const out: Record<string, unknown> = {};
  for (const part of t.split(",")) {
    if (part.trim() === "") continue;
    const eq = part.indexOf("=");
    if (eq <= 0) throw new Error(`knobs: expected name=value, got "${part}"`);
    out[part.slice(0, eq).trim()] = part.slice(eq + 1).trim();
  }
  return out;
}

/** Each string value converted to the type of the policy's default for that knob. */
export function coerceKnobs(policy: Policy, knobs: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(knobs)) {
    const d = (policy.knobs as Record<string, { default: unknown } | undefined>)[k]?.default;
    if (typeof v !== "string" || typeof d === "string") {
      out[k] = v;
    } else if (v === "null" || v === "none" || v === "None") {
      out[k] = null;
    } else if (typeof d === "boolean") {
      const l = v.toLowerCase();
      out[k] = l === "true" || l === "1" ? true : l === "false" || l === "0" ? false : v;
    } else if (typeof d === "number" || d === null) {
      const n = Number(v);
      out[k] = v !== "" && Number.isFinite(n) ? n : v;
    } else {
      out[k] = v;
    }
  }
  return out;
}
