#!/usr/bin/env bash
# Builds the workspace's @gmlake/vmm and packs what the GPU host needs (it has no Node.js)
# into .gpu/ (git-ignored): node.xz (this machine's node binary) and vmm.tar.xz (the built
# dist folders, the .node addon, the C++ bench loop, tests, and the node_modules needed to
# run the contract suite with vitest). Then on the GPU host: bash scripts/gpu/run.sh CMD...
#   usage: bash scripts/gpu/bundle.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out="$root/.gpu"
cd "$root"

pnpm turbo run build --filter @gmlake/vmm... >/dev/null
# The C++ loop of the binding bench, prebuilt as a fallback (the bench rebuilds it with g++ there).
mkdir -p packages/vmm/build/bench
g++ -O2 -std=c++17 -o packages/vmm/build/bench/binding_overhead packages/vmm/bench/binding_overhead.cc -ldl

mkdir -p "$out"
rm -f "$out"/node.xz "$out"/vmm.tar.xz
xz -T0 -6 -c "$(readlink -f "$(command -v node)")" >"$out/node.xz"

mapfile -t store < <(node scripts/gpu/closure.mjs "$root" packages/vmm/node_modules/vitest)
files=(
  package.json tsconfig.base.json scripts/gpu
  packages/vmm/package.json packages/vmm/tsconfig.json packages/vmm/tsconfig.test.json packages/vmm/vitest.config.ts
  packages/vmm/dist packages/vmm/build/Release/gmlake_vmm.node packages/vmm/build/bench/binding_overhead
  packages/vmm/native packages/vmm/bench packages/vmm/test packages/vmm/src
  packages/vmm/node_modules/vitest
  "${store[@]}"
)
tar -cf - --exclude='*.tsbuildinfo' "${files[@]}" | xz -T0 -6 >"$out/vmm.tar.xz"

du -b "$out"/node.xz "$out"/vmm.tar.xz | awk '{ printf "%-40s %6.1f MiB\n", $2, $1 / 1048576; total += $1 } END { printf "%-40s %6.1f MiB\n", "total", total / 1048576 }'
