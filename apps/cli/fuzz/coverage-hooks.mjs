// Node module hooks (module.register) that add edge-coverage counters to the project's
// compiled packages as they load: Jazzer.js's own Babel instrumentation (its ESM coverage
// plugin), with the counters written into one shared map that engine.mjs reads. Jazzer's
// libFuzzer half is not used: its prebuilt addon needs glibc 2.38 and GLIBCXX_3.4.32,
// newer than Debian 12's (see RELIABILITY.md).
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const require = createRequire(import.meta.url);
const instrumentor = createRequire(require.resolve("@jazzer.js/instrumentor"));
const babel = instrumentor("@babel/core");
const { esmCodeCoverage } = instrumentor("./plugins/esmCodeCoverage.js");

// The reader and the replay path: the compiled packages of the workspace.
const INSTRUMENT = /\/packages\/(torch-trace|trace|stitch|chunk-pool|vmm)\/dist\/.+\.js$/;

export async function load(url, context, nextLoad) {
  const r = await nextLoad(url, context);
  if (!url.startsWith("file:") || !INSTRUMENT.test(fileURLToPath(url)) || r.format !== "module") return r;
  const cov = esmCodeCoverage();
  const out = babel.transformSync(String(r.source), { filename: fileURLToPath(url), plugins: [cov.plugin], sourceMaps: false, configFile: false, babelrc: false, sourceType: "module" });
  // Each module gets its slice of the shared map when it first runs (main thread).
  const preamble = `const __jazzer_cov = globalThis.__gmlakeCoverage.slice(${cov.edgeCount()}, ${JSON.stringify(url)});\n`;
  return { ...r, source: preamble + out.code, shortCircuit: true };
}
