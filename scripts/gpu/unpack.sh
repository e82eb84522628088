#!/usr/bin/env bash
# Sourced by run.sh and full-run.sh on the GPU host: unpacks .gpu/ (made by bundle.sh)
# into $GMLAKE_GPU_DIR (default /tmp/gmlake), puts node on PATH and points GMLAKE_SHARED
# at the carried traces. Sets $dest (the unpacked workspace root).
gpu_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dest=${GMLAKE_GPU_DIR:-/tmp/gmlake}
for f in node.xz workspace.tar.xz; do
  if [ ! -f "$gpu_root/.gpu/$f" ]; then
    echo "unpack: $gpu_root/.gpu/$f missing: run scripts/gpu/bundle.sh here and carry .gpu" >&2
    return 2 2>/dev/null || exit 2
  fi
done
mkdir -p "$dest/bin"
if ! xz -dc "$gpu_root/.gpu/node.xz" >"$dest/bin/node" || ! chmod +x "$dest/bin/node" ||
  ! tar -xJf "$gpu_root/.gpu/workspace.tar.xz" -C "$dest"; then
  echo "unpack: could not unpack .gpu/ into $dest" >&2
  return 2 2>/dev/null || exit 2
fi
export PATH="$dest/bin:$PATH"
if [ -d "$gpu_root/.gpu/shared/traces" ]; then
  export GMLAKE_SHARED="$gpu_root/.gpu/shared"
fi
