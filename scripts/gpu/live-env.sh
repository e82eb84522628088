# Sourced by the GPU scripts (with $root the repository): live_env NAME puts gmlake_torch and
# scripts/gpu on PYTHONPATH and unpacks the bundled engine (.gpu/live.tar.xz) where this tree
# has no build; a missing or broken bundle is one line naming NAME, exit 2.
live_env() {
  export GMLAKE_TORCH_PY="$root/packages/torch-alloc/python"
  export PYTHONPATH="$GMLAKE_TORCH_PY:$root/scripts/gpu${PYTHONPATH:+:$PYTHONPATH}"
  export PYTHONUNBUFFERED=1
  [ -f "$root/packages/torch-alloc/build/lib/libgmlake_torch_alloc.so" ] && return 0
  [ -f "$root/.gpu/live.tar.xz" ] || { echo "$1: .gpu/live.tar.xz missing: run scripts/gpu/bundle.sh --live here and carry .gpu" >&2; exit 2; }
  tar -xJf "$root/.gpu/live.tar.xz" -C "$root" || { echo "$1: unpacking .gpu/live.tar.xz failed" >&2; exit 2; }
}

# live_baseline NAME: with .gpu/baseline.tar.xz (bundle.sh --live --baseline REV), the engine at REV
# unpacked beside this one (on this tree's libnode): GMLAKE_BASELINE_LIB (its library, which
# finds its JS beside itself) and GMLAKE_BASELINE_REV exported; without it, or with
# GMLAKE_BASELINE_LIB set already (another build to measure against), nothing.
live_baseline() {
  [ -z "${GMLAKE_BASELINE_LIB:-}" ] && [ -f "$root/.gpu/baseline.tar.xz" ] || return 0
  local dir=${GMLAKE_RUN_DIR:-/tmp/gmlake-live}
  mkdir -p "$dir"
  tar -xJf "$root/.gpu/baseline.tar.xz" -C "$dir" || { echo "$1: unpacking .gpu/baseline.tar.xz failed" >&2; exit 2; }
  ln -sfn "$root/packages/torch-alloc/build/libnode" "$dir/baseline/packages/torch-alloc/build/libnode"
  export GMLAKE_BASELINE_LIB="$dir/baseline/packages/torch-alloc/build/lib/libgmlake_torch_alloc.so"
  GMLAKE_BASELINE_REV=$(cat "$root/.gpu/baseline.rev" 2>/dev/null || echo unknown)
  export GMLAKE_BASELINE_REV
}

# gpu_call NAME DEFAULT_TOTAL: the call's common start: OUT made, $python and $total set ($TOTAL,
# the whole call's seconds, a positive whole number, else one line naming NAME, exit 2).
gpu_call() {
  OUT=${OUT:-$root/gpu-out}
  mkdir -p "$OUT"
  python=${PYTHON:-python3}
  total=${TOTAL:-$2}
  if ! [[ $total =~ ^[1-9][0-9]*$ ]]; then
    echo "$1: TOTAL must be a positive whole number of seconds, not '$total'" >&2
    exit 2
  fi
}
