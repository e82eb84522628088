#!/usr/bin/env bash
# Records the project's own workloads (scripts/gpu/live_workloads.py) on the GPU host under
# PyTorch's default allocator and under expandable_segments, as the public traces were
# (memory history of every event, context=None, protocol 4, gzip), with device memory
# sampled inside the steps. One `run` call, no carry needed:
#   bash scripts/gpu/record-corpus.sh [NAME...]     (default: every project workload)
# Out ($OUT): corpus.tar (the .pickle.gz files), results.jsonl (one line per run), record.log.
# STEPS (default 12) and T_RUN (seconds per run, default 150) bound the work.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
work=$(mktemp -d)
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(qwen_lora_bigvocab gpt2_offload moe_ft gpt2_microbatch)
gcc -O2 -shared -fPIC -o "$work/memsampler.so" scripts/gpu/memsampler.c -ldl -lpthread || exit 1
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
} 2>&1 | tee "$OUT/record.log"
for n in "${names[@]}"; do
  for a in pytorch pytorch-expandable; do
    tag=$n; [ "$a" = pytorch-expandable ] && tag=${n}_expandable
    echo "=== $(date -u +%H:%M:%S) $tag" | tee -a "$OUT/record.log"
    PYTHONUNBUFFERED=1 timeout -k 10 "${T_RUN:-150}" python3 scripts/gpu/live_workloads.py "$n" --allocator "$a" \
      --steps "${STEPS:-12}" --record "$work/$tag.pickle.gz" --sampler "$work/memsampler.so" >"$work/$tag.log" 2>&1
    echo "exit $?" >>"$work/$tag.log"
    grep '^RESULT ' "$work/$tag.log" | sed 's/^RESULT //' >>"$OUT/results.jsonl"
    tail -3 "$work/$tag.log" | cut -c1-400 | tee -a "$OUT/record.log"
    (cd "$work" && tar -cf "$OUT/corpus.tar" ./*.pickle.gz 2>/dev/null)
  done
done
ls -la "$work" | tee -a "$OUT/record.log"
