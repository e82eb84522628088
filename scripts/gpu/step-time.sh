#!/usr/bin/env bash
# Step time as a user sees it (issue 27), in one `run` call on the GPU host: fresh process per
# run, the allocators interleaved round by round, the same seeds; scripts/gpu/step_time.py
# says what is measured and how the intervals are made.
#   here:   bash scripts/gpu/bundle.sh --live            (.gpu/live.tar.xz: the engine, built)
#   there:  `run` with carry [".gpu"] and: WORKLOADS=gpt2_ft bash scripts/gpu/step-time.sh
# Knobs: WORKLOADS (comma list, default gpt2_ft; one or two per 10-minute call: 4 allocators x 5
#   rounds of ~25 s runs is ~8 minutes), ALLOCATORS (default
#   pytorch,pytorch-expandable,ours:vms,ours:caching; ours:POLICY@native runs ours as its own
#   CUDAAllocator, built here first), ROUNDS (5), STEPS (24), WARMUP (3), ORDER (rotate|fixed),
#   PRIME (1: one run per workload before round 1, not counted: the file cache and torch.compile's
#   cache warm for every allocator alike; 0: none), TOTAL (seconds for the whole call, default
#   570: step_time.py gets what setup left), PIN (a CPU list every run is pinned to, e.g. 0-7),
#   PYTHON (python3).
# Out ($OUT): step-time.md, step-time.json (every run's step times); merge calls with
#   python3 scripts/gpu/step_time.py report A/step-time.json B/step-time.json --out DIR
set -uo pipefail
t0=$(date +%s)
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/gpu-out}
python=${PYTHON:-python3}
allocators=${ALLOCATORS:-pytorch,pytorch-expandable,ours:vms,ours:caching}
total=${TOTAL:-570}
if ! [[ $total =~ ^[1-9][0-9]*$ ]]; then
  echo "step-time: TOTAL must be a positive whole number of seconds, not '$total'" >&2
  exit 2
fi
case ${PRIME:-1} in
  0) prime=--no-prime ;;
  1) prime= ;;
  *) echo "step-time: PRIME is 0 or 1, not '$PRIME'" >&2; exit 2 ;;
esac
mkdir -p "$OUT"
export GMLAKE_TORCH_PY="$root/packages/torch-alloc/python"
export PYTHONPATH="$GMLAKE_TORCH_PY${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
if [[ ",$allocators," == *",ours:"* ]] && [ ! -f packages/torch-alloc/build/lib/libgmlake_torch_alloc.so ]; then
  if [ -f .gpu/live.tar.xz ]; then
    tar -xJf .gpu/live.tar.xz -C "$root" || { echo "step-time: unpacking .gpu/live.tar.xz failed" >&2; exit 2; }
  else
    echo "step-time: ours needs the built engine: run scripts/gpu/bundle.sh --live here and carry .gpu" >&2
    exit 2
  fi
fi
if [[ $allocators == *@native* ]]; then
  "$python" -m gmlake_torch build-cuda-allocator >"$OUT/build-cuda-allocator.log" 2>&1 || {
    echo "step-time: $(tail -1 "$OUT/build-cuda-allocator.log")" >&2
    exit 2
  }
fi
left=$((total - ($(date +%s) - t0) - 10))
exec "$python" scripts/gpu/step_time.py --workloads "${WORKLOADS:-gpt2_ft}" --allocators "$allocators" \
  --rounds "${ROUNDS:-5}" --steps "${STEPS:-24}" --warmup "${WARMUP:-3}" --order "${ORDER:-rotate}" \
  --time-limit "$left" --out "$OUT" --python "$python" $prime ${PIN:+--pin "$PIN"}
