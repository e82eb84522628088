// Which symbol versions a shared object needs (objdump -T): the newest GLIBC_ and GLIBCXX_
// it asks for, checked against the floor this package declares in engines.glibc.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";

const cmp = (a, b) => {
  const x = a.split(".").map(Number), y = b.split(".").map(Number);
  for (let i = 0; i < Math.max(x.length, y.length); i++) if ((x[i] ?? 0) !== (y[i] ?? 0)) return (x[i] ?? 0) - (y[i] ?? 0);
  return 0;
};
const newest = (vs) => vs.sort(cmp).at(-1);

/** { glibc: "2.27", glibcxx: "3.4.21", stripped: boolean } for the .node at `path`. */
export function symbolVersions(path) {
  const dyn = execFileSync("objdump", ["-T", path], { encoding: "utf8" });
  const glibc = [...dyn.matchAll(/\(GLIBC_([0-9.]+)\)/g)].map((m) => m[1]);
  const glibcxx = [...dyn.matchAll(/\(GLIBCXX_([0-9.]+)\)/g)].map((m) => m[1]);
  const sections = execFileSync("objdump", ["-h", path], { encoding: "utf8" });
  return { glibc: newest(glibc), glibcxx: newest(glibcxx), stripped: !/\s\.(symtab|debug_\w+)\s/.test(sections) };
}

/** The glibc floor in engines ("2.27" from ">=2.27"). */
export function declaredGlibc() {
  const m = JSON.parse(readFileSync(new URL("./package.json", import.meta.url), "utf8"));
  return m.engines.glibc.replace(/^>=\s*/, "");
}

/** Problems with the binary at `path` (empty when it is stripped and needs no newer glibc than declared). */
export function checkBinary(path) {
  const v = symbolVersions(path);
  const floor = declaredGlibc();
  const problems = [];
  if (v.glibc && cmp(v.glibc, floor) > 0) problems.push(`${path} needs GLIBC_${v.glibc}, newer than engines.glibc >=${floor}`);
  if (!v.stripped) problems.push(`${path} is not stripped`);
  return { ...v, floor, problems };
}
