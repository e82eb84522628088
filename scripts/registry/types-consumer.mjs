// Writes a TypeScript consumer into <dir> (where every library package is installed): an
// import of every package and every typed subpath export, a few typed uses that fail to
// compile if the types were missing or `any`, and one tsconfig per moduleResolution
// (node16, nodenext, bundler, node10), and a package.json that depends on every library package.
// The caller runs npm install, then tsc -p on each tsconfig.
//   node scripts/registry/types-consumer.mjs <dir> <@types folder>
import { writeFileSync } from "node:fs";
import { join } from "node:path";

import { typedSubpaths, workspacePackages } from "../release/workspace.mjs";

const [dir, typeRoot] = process.argv.slice(2);
const specifiers = [];
const dependencies = {};
for (const { manifest } of workspacePackages()) {
  if (manifest.private || !manifest.exports?.["."]) continue;
  dependencies[manifest.name] = manifest.version;
  specifiers.push(manifest.name, ...Object.keys(typedSubpaths(manifest)).map((s) => `${manifest.name}/${s}`));
}
const lines = specifiers.map((s, i) => `import * as m${i} from "${s}";`);
lines.push(
  `export const modules = [${specifiers.map((_, i) => `m${i}`).join(", ")}];`,
  `import { createDriver, type VmmDriver } from "@gmlake/vmm";`,
  `import { Allocator } from "@gmlake/stitch";`,
  `import { EventLog } from "@gmlake/trace";`,
  `const driver: VmmDriver = createDriver("sim");`,
  `export const peak: number = new Allocator("vms", driver).stats.peakReservedBytes;`,
  `export const log = new EventLog();`,
  `// @ts-expect-error: not a driver name (the types are real, not any)`,
  `createDriver("nope");`,
);
writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "types-consumer", private: true, type: "module", dependencies }, null, 2));
writeFileSync(join(dir, "index.ts"), `${lines.join("\n")}\n`);

const base = { strict: true, noEmit: true, skipLibCheck: false, types: ["node"], typeRoots: [typeRoot], lib: ["ES2023"], target: "ES2022" };
const configs = {
  node16: { module: "node16", moduleResolution: "node16" },
  bundler: { module: "esnext", moduleResolution: "bundler" },
  nodenext: { module: "nodenext", moduleResolution: "nodenext" },
  node10: { module: "commonjs", moduleResolution: "node10" },
};
for (const [name, o] of Object.entries(configs))
  writeFileSync(join(dir, `tsconfig.${name}.json`), JSON.stringify({ compilerOptions: { ...base, ...o }, files: ["index.ts"] }, null, 2));
console.log(`types-consumer: ${specifiers.length} imports (${specifiers.join(" ")})`);
