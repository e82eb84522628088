#!/usr/bin/env bash
# The threading decision's numbers: bench/threading_bench.cc for both designs (a Locker per
# call; one JS thread with a spin-then-futex hand-off), 1 and 2 calling threads, the bare
# round trip and alloc+free pairs through caching and vms on the sim driver. One process
# per run (Node starts once per process); REPS runs of each.
#   usage: bash bench/threading.sh [REPS] [CALLS]      (after `pnpm build`)
set -euo pipefail
pkg=$(cd "$(dirname "$0")/.." && pwd)
reps=${1:-3}
calls=${2:-20000}
bin="$pkg/build/bin/threading_bench"
lib="$pkg/build/lib/libgmlake_torch_alloc.so"
[ -x "$bin" ] && [ -f "$lib" ] || { echo "threading.sh: build first (pnpm --filter @gmlake/torch-alloc build)" >&2; exit 2; }
for policy in caching vms; do
  for design in locker thread; do
    for r in $(seq "$reps"); do
      "$bin" "$lib" "$design" --threads 2 --calls "$calls" --policy "$policy" --driver sim
    done
  done
done | python3 "$pkg/bench/threading_table.py"
