#!/usr/bin/env bash
# On the GPU host (no Node.js there): unpacks .gpu/ (made by bundle.sh) into /tmp/gmlake,
# puts node on PATH and runs the command given as arguments inside packages/vmm, e.g.
#   bash scripts/gpu/run.sh node node_modules/vitest/vitest.mjs run
#   bash scripts/gpu/run.sh node bench/binding-overhead.mjs host cuda
#   bash scripts/gpu/run.sh bash ../../scripts/gpu/vmm-suite.sh     (all of it, output under $OUT)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dest=${GMLAKE_GPU_DIR:-/tmp/gmlake}
if [ $# -eq 0 ]; then
  echo "usage: bash scripts/gpu/run.sh COMMAND [ARGS...]" >&2
  exit 2
fi
for f in node.xz vmm.tar.xz; do
  [ -f "$root/.gpu/$f" ] || { echo "run.sh: $root/.gpu/$f missing: run scripts/gpu/bundle.sh here and carry .gpu" >&2; exit 2; }
done
mkdir -p "$dest/bin"
xz -dc "$root/.gpu/node.xz" >"$dest/bin/node"
chmod +x "$dest/bin/node"
tar -xJf "$root/.gpu/vmm.tar.xz" -C "$dest"
export PATH="$dest/bin:$PATH"
cd "$dest/packages/vmm"
exec "$@"
