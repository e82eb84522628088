import { describeProbe, locateAddon, probeCuda } from "@gmlake/vmm";
import type { Command } from "../command.js";
import { printJson, printText } from "../outputs.js";
import { fitLines, wrap } from "../table.js";

export const doctor: Command = {
  name: "doctor",
  summary: "what the cuda driver finds here: driver, devices, VMM support, granularity, memory",
  positionals: "none",
  options: { json: { type: "boolean" } },
  help: `Usage: gmlake doctor [--json]

Probes the CUDA driver in a child process (a broken driver cannot take gmlake down):
whether libcuda.so.1 loads and why not, the devices, their VMM support, allocation
granularity and free/total memory. Without a GPU it says so and the host and sim
drivers remain available.

Example:
  gmlake doctor --json`,
  async run(values) {
    const p = probeCuda();
    // host and cuda need the native addon; sim needs nothing
    const addon = locateAddon();
    if (values.json) {
      printJson({ ...p, addon: addon.path ? { path: addon.path, from: addon.from } : { missing: addon.missing } });
      return;
    }
    printText(fitLines(describeProbe(p).trimEnd()));
    if (!addon.path) printText(wrap(`drivers available: sim (H200 cost model); host and cuda need the vmm addon: ${addon.missing}`));
    else if (!p.ok) printText(wrap("drivers available: host (real stitching of host memory), sim (H200 cost model)"));
  },
};
