// Builds the prebuilt addon this package ships: @gmlake/vmm's native sources compiled with
// cmake-js (vmm's devDependency) with glibc-compat.h force-included (prebuilt.cmake), so
// that the binary asks for no glibc newer than engines.glibc; then stripped and checked
// (objdump -T). Its own build folder: vmm's build/Release (the source build) is untouched.
// On any other platform than linux-x64-gnu there is nothing to build: it says so and exits 0.
import { spawnSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { checkBinary } from "./glibc-check.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const vmm = join(here, "../vmm");
const out = join(here, "gmlake_vmm.node");

const glibc = process.platform === "linux" && Boolean(process.report?.getReport().header.glibcVersionRuntime);
if (process.platform !== "linux" || process.arch !== "x64" || !glibc) {
  console.log(`vmm-linux-x64-gnu: not built on ${process.platform}-${process.arch}${process.platform === "linux" && !glibc ? "-musl" : ""} (the prebuilt is for linux-x64-gnu)`);
  process.exit(0);
}

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { stdio: ["ignore", "pipe", "pipe"], encoding: "utf8", ...opts });
  if (r.status !== 0) {
    process.stderr.write(`${r.stdout ?? ""}${r.stderr ?? ""}`);
    console.error(`vmm-linux-x64-gnu: ${cmd} ${args.join(" ")} failed (${r.error?.message ?? `exit ${r.status}`})`);
    process.exit(1);
  }
  return r;
}

const cmakeJs = createRequire(join(vmm, "package.json")).resolve("cmake-js/bin/cmake-js");
const buildDir = join(here, "build");
mkdirSync(buildDir, { recursive: true });
run(process.execPath, [cmakeJs, "compile", "--out", buildDir, `--CDCMAKE_PROJECT_INCLUDE=${join(here, "prebuilt.cmake")}`], { cwd: vmm });
const built = join(buildDir, "Release", "gmlake_vmm.node");
if (!existsSync(built)) {
  console.error(`vmm-linux-x64-gnu: cmake-js left no ${built}`);
  process.exit(1);
}
copyFileSync(built, out);
run("strip", ["--strip-unneeded", out]);
const c = checkBinary(out);
if (c.problems.length > 0) {
  console.error(`vmm-linux-x64-gnu: ${c.problems.join("; ")}`);
  process.exit(1);
}
console.log(`vmm-linux-x64-gnu: gmlake_vmm.node stripped, needs GLIBC_${c.glibc} (floor ${c.floor}), GLIBCXX_${c.glibcxx}`);
