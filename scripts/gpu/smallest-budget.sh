#!/usr/bin/env bash
# The smallest budget on which each workload trains at its own batch, per allocator, live, in
# one `run` call on the GPU host (scripts/gpu/smallest_budget.py: a grid of budgets around the
# sim's smallest capacity, candidates side by side as the device's memory allows).
#   here:   bash scripts/gpu/bundle.sh --live        (.gpu/live.tar.xz)
#   there:  `run` with carry [".gpu"] and: bash scripts/gpu/smallest-budget.sh
# Knobs: SB_WORKLOADS (default gpt2_ft,gpt2_ft_ckpt,llama1b_lora,qwen_lora_bigvocab,moe_ft),
#   SB_ALLOCATORS (default pytorch-expandable,ours:vms), SB_STEPS (12: the traces' steps),
#   SB_STEP_GIB (0.04), SB_POINTS (2: grid steps beyond the lowest and highest prediction), SB_CENTER (W:A=GiB,... instead of the sim's),
#   SB_JOBS (10 at once at most), SB_DEVICE_GIB (the memory candidates may fill, default the
#   device's), SB_KNOWN / SB_KNOWN_FOR (earlier smallest-budget.json files and whose answers in
#   them count: smallest_budget.py --known, --known-for), TOTAL (s for the whole call, default 560), PYTHON (python3).
#   SB_TIMING (1: each largest batch at a limit budget trained again alone for its step time and
#   tokens/s; 0: not).
# Out ($OUT): smallest-budget.md, smallest-budget.json, smallest-budget.log.
set -uo pipefail
t0=$(date +%s)
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
. scripts/gpu/live-env.sh
gpu_call smallest-budget 560
allocators=${SB_ALLOCATORS:-pytorch-expandable,ours:vms}
exec > >(tee -a "$OUT/smallest-budget.log") 2>&1
if [[ ",$allocators," == *",ours:"* ]]; then
  live_env smallest-budget
  timeout 120 "$python" -m gmlake_torch build-oom-shim || echo "smallest-budget: the OOM shim did not build: ours' out of memory is a RuntimeError (still read as out of memory)"
fi
device_gib=${SB_DEVICE_GIB:-}
[ -n "$device_gib" ] || device_gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1 | awk '$1 > 0 { printf "%d", $1 / 1024 }')
left=$((total - ($(date +%s) - t0) - 10))
args=(--allocators "$allocators" --steps "${SB_STEPS:-12}" --step-gib "${SB_STEP_GIB:-0.04}" --points "${SB_POINTS:-2}"
  --jobs "${SB_JOBS:-10}" --device-gib "${device_gib:-140}" --time-limit "$left" --out "$OUT" --python "$python")
[ -n "${SB_WORKLOADS:-}" ] && args+=(--workloads "$SB_WORKLOADS")
[ -n "${SB_CENTER:-}" ] && args+=(--center "$SB_CENTER")
[ -n "${SB_KNOWN:-}" ] && args+=(--known "$SB_KNOWN")
[ -n "${SB_KNOWN_FOR:-}" ] && args+=(--known-for "$SB_KNOWN_FOR")
[ "${SB_TIMING:-1}" = 0 ] && args+=(--no-timing)
"$python" scripts/gpu/smallest_budget.py "${args[@]}"
