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
