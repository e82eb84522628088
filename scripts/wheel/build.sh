#!/usr/bin/env bash
# Builds the gmlake_torch wheel: the engine's packages (pnpm turbo build, which fetches
# libnode once), then scripts/wheel/build.py, which writes build/wheel/gmlake_torch-*.whl
# and prints its size and tags.
#   usage: bash scripts/wheel/build.sh [--no-build] [build.py's options: --out DIR, --json]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
if [ "${1:-}" = "--no-build" ]; then
  shift
else
  pnpm turbo run build --filter=@gmlake/torch-alloc... --output-logs=errors-only >/dev/null
fi
exec python3 scripts/wheel/build.py "$@"
