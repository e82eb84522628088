#!/usr/bin/env bash
# Step time inside one process (issue 27), in one `run` call on the GPU host: each step twice on
# the same inputs, once through ours and once through PyTorch's own allocator in the same process
# (scripts/gpu/alternate_steps.py says how and what is measured).
#   here:   bash scripts/gpu/bundle.sh --live            (.gpu/live.tar.xz: the engine, built)
#   there:  `run` with carry [".gpu"] and: WORKLOADS=gpt2_ft bash scripts/gpu/alternate-steps.sh
# Knobs: WORKLOADS (comma list, default gpt2_ft), COMPARE (default "ours:vms/pytorch-expandable
#   ours:vms/pytorch ours:caching/pytorch"; ours:vms@baseline/pytorch runs ours at the revision that
#   bundle.sh --live --baseline REV packed, beside this tree's), PROCS (2), PAIRS (20), WARMUP (3), TOTAL (seconds for
#   the whole call, default 570), PIN (a CPU list), PYTHON (python3).
# Out ($OUT): alternate-steps.md and .json; merge calls with
#   python3 scripts/gpu/alternate_steps.py report A/alternate-steps.json B/alternate-steps.json --out DIR
set -uo pipefail
t0=$(date +%s)
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
# shellcheck source=live-env.sh
. "$root/scripts/gpu/live-env.sh"
gpu_call alternate-steps 570
live_env alternate-steps
live_baseline alternate-steps  # COMPARE's ours:POLICY@baseline (bundle.sh --live --baseline REV)
# ours runs as its own CUDAAllocator here: built once per PyTorch
"$python" -m gmlake_torch build-cuda-allocator >"$OUT/build-cuda-allocator.log" 2>&1 || {
  echo "alternate-steps: $(tail -1 "$OUT/build-cuda-allocator.log")" >&2
  exit 2
}
# and beside the baseline's library, which looks for it there (this tree's class on that engine)
if [ -n "${GMLAKE_BASELINE_LIB:-}" ]; then
  GMLAKE_TORCH_ALLOC_LIB=$GMLAKE_BASELINE_LIB "$python" -m gmlake_torch build-cuda-allocator >"$OUT/build-cuda-allocator-baseline.log" 2>&1 || {
    echo "alternate-steps: baseline: $(tail -1 "$OUT/build-cuda-allocator-baseline.log")" >&2
    exit 2
  }
fi
left=$((total - ($(date +%s) - t0) - 10))
exec "$python" scripts/gpu/alternate_steps.py --workloads "${WORKLOADS:-gpt2_ft}" \
  --compare "${COMPARE:-ours:vms/pytorch-expandable ours:vms/pytorch ours:caching/pytorch}" \
  --procs "${PROCS:-2}" --pairs "${PAIRS:-20}" --warmup "${WARMUP:-3}" --time-limit "$left" --out "$OUT" \
  --python "$python" ${PIN:+--pin "$PIN"}
