#!/usr/bin/env bash
# Training across the GPUs of one host with ours on every rank (issue 30), in one `run` call:
# torchrun --nproc-per-node N, ours switched on by the wheel's autoenable hook (GMLAKE_POLICY=vms;
# each rank on LOCAL_RANK), beside PyTorch default and expandable_segments; the integrity stress on
# every GPU at once; NCCL's collectives on our tensors, its own buffers, MemPool with NCCL's
# allocator, TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK. scripts/gpu/multi_gpu.py says what is
# measured and how.
#   here:   bash scripts/wheel/build.sh                    (build/wheel/gmlake_torch-*.whl)
#   there:  `run` (kind nvidia-h200-x2/x4/x8) with carry ["build/wheel"]: NPROC=2 bash scripts/gpu/multi-gpu.sh
# Knobs: NPROC (default: every GPU nvidia-smi -L lists), PHASES (integrity,nccl,train: a call can take
#   some, e.g. PHASES=integrity,nccl then PHASES=train WORKLOADS=gpt2_ddp, each with its own OUT), WORKLOADS (llama1b_fsdp,gpt2_ddp; also
#   llama7b_fsdp), ALLOCATORS (pytorch,pytorch-expandable,ours:vms), ROUNDS (2), STEPS (12), WARMUP (3),
#   INTEGRITY_POLICIES (vms), INTEGRITY_SECONDS (20), TOTAL (seconds for the whole call, 570),
#   PYTHON (python3), WHEEL (default the one build/wheel/gmlake_torch-*.whl).
# Out ($OUT, default gpu-out/): multi-gpu.md (the tables), multi-gpu.json (every rank of every run), logs/.
set -uo pipefail
t0=$(date +%s)
# NVLink multicast off in every process started from here
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
root=$(cd "$(dirname "$0")/../.." && pwd) && cd "$root" || exit 2
OUT=${OUT:-$root/gpu-out}
python=${PYTHON:-python3}
die() {
  echo "multi-gpu: $*" >&2
  exit 2
}
nproc=${NPROC:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')}
[[ $nproc =~ ^[1-9][0-9]*$ ]] || die "NPROC must be a positive number of GPUs, not '$nproc' (no GPU listed by nvidia-smi -L?)"
total=${TOTAL:-570}
[[ $total =~ ^[1-9][0-9]*$ ]] || die "TOTAL must be a positive whole number of seconds, not '$total'"
shopt -s nullglob
whls=("$root"/build/wheel/gmlake_torch-*.whl)
[ -n "${WHEEL:-}" ] && whls=("$WHEEL")
[ "${#whls[@]}" = 1 ] || die "expected one build/wheel/gmlake_torch-*.whl (bash scripts/wheel/build.sh here, carry build/wheel), found ${#whls[@]}"
mkdir -p "$OUT"
exec "$python" scripts/gpu/multi_gpu.py run --nproc "$nproc" --wheel "${whls[0]}" --out "$OUT" --python "$python" \
  --workloads "${WORKLOADS:-llama1b_fsdp,gpt2_ddp}" --allocators "${ALLOCATORS:-pytorch,pytorch-expandable,ours:vms}" \
  --phases "${PHASES:-integrity,nccl,train}" --rounds "${ROUNDS:-2}" --steps "${STEPS:-12}" --warmup "${WARMUP:-3}" --integrity-policies "${INTEGRITY_POLICIES:-vms}" \
  --integrity-seconds "${INTEGRITY_SECONDS:-20}" --time-limit "$((total - ($(date +%s) - t0) - 10))"
