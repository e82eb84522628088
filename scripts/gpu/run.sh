#!/usr/bin/env bash
# On the GPU host (no Node.js there): unpacks .gpu/ (made by bundle.sh, see unpack.sh)
# and runs the command given as arguments inside packages/vmm of the unpacked workspace:
#   bash scripts/gpu/run.sh node node_modules/vitest/vitest.mjs run
#   bash scripts/gpu/run.sh node bench/binding-overhead.mjs host cuda
#   bash scripts/gpu/run.sh bash ../../scripts/gpu/vmm-suite.sh     (vmm only, output under $OUT)
# The whole GPU run (doctor, vmm + stitch suites, benches) is scripts/gpu/full-run.sh.
set -euo pipefail
if [ $# -eq 0 ]; then
  echo "usage: bash scripts/gpu/run.sh COMMAND [ARGS...]" >&2
  exit 2
fi
source "$(dirname "$0")/unpack.sh"
cd "$dest/packages/vmm"
exec "$@"
