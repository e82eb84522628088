#!/usr/bin/env bash
# Builds the workspace and packs what the GPU host needs (it has no Node.js and no network)
# into .gpu/ (git-ignored; carry it with `run`):
#   node.xz            this machine's node binary
#   workspace.tar.xz   every built package and app (dist, the .node addon, cli assets), the
#                      sources, tests and benches, the workspace links in */node_modules and
#                      the pnpm store entries that vitest and fast-check need (pnpm's own
#                      layout, closure by scripts/gpu/closure.mjs)
#   shared/traces/     a copy of ../shared/traces (GMLAKE_SHARED=.gpu/shared there); corpus/
#                      (the project's own traces) is not packed: it travels with the working tree
# Then on the GPU host: bash scripts/gpu/full-run.sh, or bash scripts/gpu/run.sh CMD...
#
# --live packs only what a live run needs (scripts/gpu/live-run.sh), into .gpu/live.tar.xz:
# the built JS of the packages the engine is made of, the vmm addon, @gmlake/torch-alloc's
# libraries and threading bench, and libnode with the libraries Ubuntu lacks (xz -9), no
# node binary and no traces (the live workloads make their own), so the carry stays small.
# --baseline REV (with --live): also the engine as it was at git revision REV, built in a
# temporary worktree, into .gpu/baseline.tar.xz (its JS, addon and libraries; libnode is
# the live bundle's): live-run.sh unpacks it, and the TIMING_ENVS set `baseline` runs ours
# on it, so a change is measured against what it changes in the same call, round by round.
#   usage: bash scripts/gpu/bundle.sh [--no-build] [--live [--baseline REV]]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out="$root/.gpu"
cd "$root"

build=1
live=0
baseline=
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) build=0 ;;
    --live) live=1 ;;
    --baseline)
      [ -n "${2:-}" ] || { echo "bundle.sh: --baseline takes a git revision" >&2; exit 2; }
      baseline=$2
      shift
      ;;
    *) echo "bundle.sh: unknown option $1 (expected --no-build, --live, --baseline REV)" >&2; exit 2 ;;
  esac
  shift
done
if [ -n "$baseline" ]; then
  [ "$live" = 1 ] || { echo "bundle.sh: --baseline goes with --live" >&2; exit 2; }
  git rev-parse --verify -q "$baseline^{commit}" >/dev/null || { echo "bundle.sh: --baseline: '$baseline' is not a git revision here" >&2; exit 2; }
fi
if [ "$build" = 1 ]; then
  pnpm turbo run build --output-logs=errors-only >/dev/null
fi

if [ "$live" = 1 ]; then
  ta=packages/torch-alloc
  nodelib=$ta/build/libnode/usr/lib/x86_64-linux-gnu
  for f in "$ta/build/lib/libgmlake_torch_alloc.so" "$ta/build/lib/libgmlake_embed.so" "$nodelib/libnode.so.108" packages/vmm/build/Release/gmlake_vmm.node; do
    [ -f "$f" ] || { echo "bundle.sh --live: $f missing (build first)" >&2; exit 2; }
  done
  files=(package.json)
  for p in errors vmm chunk-pool trace stitch torch-alloc; do  # torch-alloc and its @gmlake dependencies
    files+=("packages/$p/package.json" "packages/$p/dist")
    [ -d "packages/$p/node_modules/@gmlake" ] && files+=("packages/$p/node_modules/@gmlake")
  done
  files+=(packages/vmm/build/Release/gmlake_vmm.node "$ta/build/lib" "$ta/build/bin")
  # libnode, its libraries, and only the builtin JS files it reads at start.
  files+=("$nodelib"/lib*.so*)
  for b in acorn acorn-walk cjs-module-lexer undici; do files+=("$ta/build/libnode/usr/share/nodejs/$b"); done
  mkdir -p "$out"
  rm -f "$out/live.tar.xz"
  tar -cf - --exclude='*.tsbuildinfo' --exclude="$nodelib/libicutest*" --exclude="$nodelib/libicutu*" \
    --exclude="$nodelib/libuv.a" "${files[@]}" | xz -T0 -9 >"$out/live.tar.xz"
  du -b "$out/live.tar.xz" | awk '{ printf "%-50s %6.1f MiB\n", $2, $1 / 1048576 }'
  rm -f "$out/baseline.tar.xz"
  if [ -n "$baseline" ]; then
    # The same files at REV, built in a worktree of their own (pnpm's store: no network).
    wt=$(mktemp -d)
    trap 'git -C "$root" worktree remove --force "$wt/tree" >/dev/null 2>&1; rm -rf "$wt"' EXIT
    git -C "$root" worktree add -q --detach "$wt/tree" "$baseline"
    mkdir -p "$wt/tree/$ta/build"
    cp -a "$ta/build/libnode" "$wt/tree/$ta/build/"  # the fetched libnode, not fetched again
    (cd "$wt/tree" && pnpm install --frozen-lockfile --offline >/dev/null &&
      pnpm turbo run build --filter=@gmlake/torch-alloc... --output-logs=errors-only >/dev/null) ||
      { echo "bundle.sh: --baseline: building $baseline failed" >&2; exit 2; }
    bfiles=()
    for f in "${files[@]}"; do
      case "$f" in "$nodelib"/* | "$ta/build/libnode"/*) continue ;; esac
      [ -e "$wt/tree/$f" ] && bfiles+=("$f")
    done
    bfiles+=("$ta/native/boot.cjs")
    tar -cf - -C "$wt/tree" --exclude='*.tsbuildinfo' --transform 's,^,baseline/,S' "${bfiles[@]}" | xz -T0 -9 >"$out/baseline.tar.xz"
    echo "$(git rev-parse --short "$baseline")" >"$out/baseline.rev"
    du -b "$out/baseline.tar.xz" | awk -v r="$baseline" '{ printf "%-50s %6.1f MiB (at %s)\n", $2, $1 / 1048576, r }'
  fi
  total=$(du -sb "$out" | cut -f1)
  if [ "$total" -gt $((60 * 1048576)) ]; then
    echo "bundle.sh: .gpu is $((total / 1048576)) MiB with the full bundle beside live.tar.xz: remove the rest (rm .gpu/node.xz .gpu/workspace.tar.xz; rm -r .gpu/shared) before carrying it for the live run" >&2
    exit 1
  fi
  exit 0
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
