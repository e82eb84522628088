#!/usr/bin/env bash
# The largest batch that trains under a memory budget, live, in one `run` call on the GPU host
# (scripts/gpu/largest_batch.py: each candidate a few steps in a fresh process, the budget
# through torch.cuda.set_per_process_memory_fraction for every allocator).
#   here:   bash scripts/gpu/bundle.sh --live        (.gpu/live.tar.xz)
#   there:  `run` with carry [".gpu"] and: bash scripts/gpu/largest-batch.sh
# Knobs: LB_WORKLOADS (default gpt2_ft,gpt2_ft_ckpt,llama1b_lora,llama1b_fsdp,qwen_lora_bigvocab,moe_ft;
#   NAME:seq bisects the sequence lengths instead of the batch), LB_BUDGETS (GiB, default 24,40),
#   LB_ALLOCATORS (default pytorch-expandable,ours:vms,pytorch), LB_STEPS (default 4),
#   LB_MAX_BATCH (default 512), LB_CANDIDATE_TIMEOUT (s, default 240), LB_JOBS (workloads searched
#   side by side, default 3, no more than the device holds at the largest budget; each answer is
#   then timed with the GPU to itself), LB_RESUME (an earlier
#   largest-batch.json: its candidates are not run again), TOTAL (s for the whole call, default
#   560), PYTHON (default python3). The setup (unpack, the OOM shim) runs only when an ours:
#   allocator is asked for.
# Out ($OUT): largest-batch.md (the table), largest-batch.json (rows and every candidate),
# largest-batch.log; written after every candidate, so a cut call still leaves its results.
set -uo pipefail
t_start=$(date +%s)
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
. scripts/gpu/live-env.sh
gpu_call largest-batch 560
allocators=${LB_ALLOCATORS:-pytorch-expandable,ours:vms,pytorch}
bundle=${LB_BUNDLE:-.gpu/live.tar.xz}
if [ -n "${LB_RESUME:-}" ] && [ ! -f "$LB_RESUME" ]; then
  echo "largest-batch: LB_RESUME=$LB_RESUME does not exist" >&2
  exit 2
fi
export GMLAKE_TORCH_PY="$root/packages/torch-alloc/python"
export PYTHONPATH="$GMLAKE_TORCH_PY${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
exec > >(tee -a "$OUT/largest-batch.log") 2>&1

if [[ ",$allocators," == *",ours:"* ]]; then
  if [ ! -f "$bundle" ]; then
    echo "largest-batch: $bundle missing: run scripts/gpu/bundle.sh --live here and carry .gpu (ours: needs it)" >&2
    exit 2
  fi
  tar -xJf "$bundle" -C "$root" || { echo "largest-batch: unpacking $bundle failed" >&2; exit 2; }
  # out of memory under ours as torch.cuda.OutOfMemoryError (the candidate's verdict reads it)
  timeout 120 "$python" -m gmlake_torch build-oom-shim || echo "largest-batch: the OOM shim did not build: ours' out of memory is a RuntimeError (still read as out of memory)"
fi
{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>/dev/null || true
} | tee "$OUT/largest-batch-machine.txt"

left=$((total - ($(date +%s) - t_start) - 10))
[ "$left" -lt 30 ] && { echo "largest-batch: no time left after the setup (${left} s)" >&2; exit 2; }
# the device's memory in GiB (how many candidates fit side by side), else an H200's
device_gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1 | awk '$1 > 0 { printf "%d", $1 / 1024 }')
args=(--budgets "${LB_BUDGETS:-24,40}" --allocators "$allocators" --steps "${LB_STEPS:-4}" --max-batch "${LB_MAX_BATCH:-512}"
  --candidate-timeout "${LB_CANDIDATE_TIMEOUT:-240}" --time-limit "$left" --out "$OUT" --python "$python"
  --jobs "${LB_JOBS:-3}" --device-gib "${device_gib:-140}")
[ -n "${LB_WORKLOADS:-}" ] && args+=(--workloads "$LB_WORKLOADS")
[ -n "${LB_RESUME:-}" ] && args+=(--resume "$LB_RESUME")
"$python" scripts/gpu/largest_batch.py "${args[@]}"
rc=$?
echo "largest-batch: done in $(($(date +%s) - t_start)) s (exit $rc)"
exit $rc
