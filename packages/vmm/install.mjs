// @gmlake/vmm's install step. Where the prebuilt addon (the optional platform package) or a
// source build loads, nothing to do. Otherwise, build from source with cmake-js when it,
// node-addon-api, cmake and a C++ compiler are all there, else print one line saying what
// to install. It never fails the install: the sim driver needs no addon.
// In a workspace checkout it does nothing: `pnpm build` compiles the addon there.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
if (existsSync(here("./tsconfig.json")) || !existsSync(here("./dist/native.js"))) process.exit(0);

const { loadNative, missingAddonHint } = await import("./dist/native.js");
try {
  loadNative();
  process.exit(0);
} catch {
  // no addon that loads: build one, or say how
}

const onPath = (cmd) => spawnSync("sh", ["-c", `command -v ${cmd}`], { stdio: "ignore" }).status === 0;
let cmakeJs;
try {
  cmakeJs = createRequire(import.meta.url).resolve("cmake-js/bin/cmake-js");
  createRequire(import.meta.url).resolve("node-addon-api");
} catch {
  cmakeJs = undefined;
}
if (process.env.GMLAKE_VMM_SKIP_BUILD || !cmakeJs || !onPath("cmake") || !(onPath("c++") || onPath("g++") || onPath("clang++"))) {
  console.warn(`@gmlake/vmm: no addon: ${missingAddonHint()}`);
  process.exit(0);
}
console.warn("@gmlake/vmm: no prebuilt addon for this platform: building it from source with cmake-js");
const r = spawnSync(process.execPath, [cmakeJs, "compile", "--out", "build"], { cwd: here("."), stdio: ["ignore", "inherit", "inherit"] });
// A fresh process: this one cached the failed load.
const check = spawnSync(process.execPath, ["-e", `import(${JSON.stringify(here("./dist/native.js"))}).then((m) => m.loadNative())`], { stdio: ["ignore", "ignore", "pipe"], encoding: "utf8" });
if (r.status === 0 && check.status === 0) console.warn("@gmlake/vmm: source build loaded");
else console.warn(`@gmlake/vmm: the source build failed (${r.status !== 0 ? `cmake-js exit ${r.status}` : check.stderr.trim().split("\n").at(-1)}); the sim driver works, host/cuda will not`);
