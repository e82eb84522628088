/**
 * Policy knobs as a user gives them: from Python keywords (numbers, booleans, strings)
 * or from text (`GMLAKE_KNOBS="maxHandleBytes=67108864,crossStream=false"`, or JSON), which
 * the Python module passes on unparsed and stitch's parseKnobText reads (the one reader).
 * Text values take the type of the knob's default (Python's None, 1/0 for booleans); the
 * engine then checks every knob against its schema, which also reads sizes with units
 * ("512MiB"): unknown names and bad values are StitchError BAD_OPTION.
 */
import type { Policy } from "@gmlake/stitch";

export { parseKnobText } from "@gmlake/stitch";

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
