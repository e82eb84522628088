#!/usr/bin/env bash
# Everything the vmm package checks on a GPU, in one go (device time is scarce): the
# machine, the cuda probe, the contract suite (cuda included), the misuse table and the
# binding-overhead bench. Run through run.sh; full output lands under $OUT (or ./gpu-out).
set -uo pipefail
out=${OUT:-$PWD/gpu-out}
mkdir -p "$out"
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  uname -a
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv || true
  node --version
  command -v g++ && g++ --version | head -1
} 2>&1 | tee "$out/machine.txt"
node -e 'import("./dist/index.js").then((m) => { const p = m.probeCuda(); console.log(m.describeProbe(p)); console.log(JSON.stringify(p, null, 2)); })' 2>&1 | tee "$out/probe.txt"
node node_modules/vitest/vitest.mjs run --reporter=verbose 2>&1 | tee "$out/vitest.txt"
echo "vitest exit: ${PIPESTATUS[0]}" | tee -a "$out/vitest.txt"
node bench/misuse-probe.mjs cuda --json "$out/misuse-cuda.json" 2>&1 | tee "$out/misuse-cuda.txt"
node bench/binding-overhead.mjs host cuda --json "$out/binding-overhead.json" 2>&1 | tee "$out/binding-overhead.txt"
