#!/usr/bin/env bash
# Builds the workspace and packs what the GPU host needs (it has no Node.js and no network)
# into .gpu/ (git-ignored; carry it with `run`):
#   node.xz            this machine's node binary
#   workspace.tar.xz   every built package and app (dist, the .node addon, cli assets), the
#                      sources, tests and benches, the workspace links in */node_modules and
#                      the pnpm store entries that vitest and fast-check need (pnpm's own
#                      layout, closure by scripts/gpu/closure.mjs)
#   shared/traces/     a copy of ../shared/traces (GMLAKE_SHARED=.gpu/shared there)
# Then on the GPU host: bash scripts/gpu/full-run.sh, or bash scripts/gpu/run.sh CMD...
#   usage: bash scripts/gpu/bundle.sh [--no-build]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out="$root/.gpu"
cd "$root"

if [ "${1:-}" != "--no-build" ]; then
  pnpm turbo run build --output-logs=errors-only >/dev/null
fi
# The binding bench's in-process loop: its own addon (not in the shipped gmlake_vmm.node).
pnpm --filter @gmlake/vmm build:bench >/dev/null
# The C++ loop of the binding bench, prebuilt as a fallback (the bench rebuilds it with g++ there).
mkdir -p packages/vmm/build/bench
g++ -O2 -std=c++17 -o packages/vmm/build/bench/binding_overhead packages/vmm/bench/binding_overhead.cc -ldl

shared=${GMLAKE_SHARED:-$root/../shared}
[ -f "$shared/traces/README.md" ] || { echo "bundle.sh: no traces at $shared/traces (set GMLAKE_SHARED)" >&2; exit 2; }

mkdir -p "$out"
rm -rf "$out"/vmm.tar.xz "$out"/workspace.tar.xz "$out"/shared
# node.xz is kept while the node binary is the same (compressing it is most of the time).
node_bin=$(readlink -f "$(command -v node)")
node_sum=$(sha256sum "$node_bin" | cut -d' ' -f1)
if [ ! -f "$out/node.xz" ] || [ "$(cat "$out/node.sha256" 2>/dev/null)" != "$node_sum" ]; then
  xz -T0 -6 -c "$node_bin" >"$out/node.xz"
  echo "$node_sum" >"$out/node.sha256"
fi

# Only the trace files themselves (the folder may hold other things later).
mkdir -p "$out/shared/traces/small"
cp "$shared"/traces/README.md "$shared"/traces/*.pickle.gz "$out/shared/traces/"
cp "$shared"/traces/small/* "$out/shared/traces/small/"

# What runs there: built output plus what vitest needs to run the .ts tests (src, test).
files=(package.json tsconfig.base.json scripts/gpu)
for p in packages/*; do
  for f in package.json tsconfig.json tsconfig.test.json vitest.config.ts README.md dist src test bench node_modules; do
    [ -e "$p/$f" ] && files+=("$p/$f")
  done
done
for a in apps/*; do
  for f in package.json tsconfig.json vitest.config.ts dist assets node_modules; do
    [ -e "$a/$f" ] && files+=("$a/$f")
  done
done
files+=(packages/vmm/native packages/vmm/examples packages/vmm/build/Release/gmlake_vmm.node packages/vmm-linux-x64-gnu/gmlake_vmm.node packages/vmm/build/Release/gmlake_vmm_bench.node packages/vmm/build/bench/binding_overhead)
# The store entries behind every external link the packages' tests and benches use.
links=()
for l in packages/*/node_modules/vitest packages/*/node_modules/fast-check; do
  [ -L "$l" ] && links+=("$l")
done
mapfile -t store < <(node scripts/gpu/closure.mjs "$root" "${links[@]}")
files+=("${store[@]}")

tar -cf - --exclude='*.tsbuildinfo' --exclude='node_modules/.vite' --exclude='node_modules/.vite-temp' \
  --exclude='node_modules/.bin' --exclude='node_modules/.cache' "${files[@]}" | xz -T0 -6 >"$out/workspace.tar.xz"

{
  du -b "$out"/node.xz "$out"/workspace.tar.xz
  du -sb "$out"/shared
} | awk '{ printf "%-50s %6.1f MiB\n", $2, $1 / 1048576; total += $1 } END { printf "%-50s %6.1f MiB\n", "total (.gpu)", total / 1048576 }'
total=$(du -sb "$out" | cut -f1)
if [ "$total" -gt $((60 * 1048576)) ]; then
  echo "bundle.sh: .gpu is over 60 MiB ($total bytes): with the working tree it may not fit the 64 MiB carry" >&2
  exit 1
fi
