#!/usr/bin/env bash
# CUDA graphs and private pools under our allocator beside PyTorch's two (issue 29), in one
# `run` call: every case under every allocator in a fresh process, results (losses, generated
# tokens) compared with PyTorch default's, peak reserved memory beside default and expandable.
#   here:   bash scripts/gpu/bundle.sh --live            (.gpu/live.tar.xz: the engine, built)
#   there:  `run` with carry [".gpu"] and: bash scripts/gpu/graphs-check.sh
# Knobs: CASES (default "manual compile generate lora"; also compile-notrees, which crashed
#   (SIGSEGV) under PyTorch's own allocators too on torch 2.11 (2026-12-02); graphs_check.py
#   says what each is), ALLOCATORS (default "pytorch pytorch-expandable ours:vms@native"; also
#   ours:vms@pluggable, ours:caching@native, ...), STEPS (default 8), TIMEOUT_S (per run, default
#   300), BUDGET_S (no run starts after this many seconds, default 540: one `run` call; the rest
#   are rows "skipped"), PYTHON (python3). More in a second call, e.g. CASES=lora, or
#   ALLOCATORS="pytorch ours:caching@native ours:expandable@native ours:gmlake@native ours:vms@pluggable".
# Out ($OUT): graphs-check.md (the table), graphs-check.jsonl (every RESULT), a log per run.
# Exit: 0 when every run of ours is ok with PyTorch default's results, 1 otherwise, 2 bad input.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/gpu-out}
python=${PYTHON:-python3}
cases=${CASES:-manual compile generate lora}
allocators=${ALLOCATORS:-pytorch pytorch-expandable ours:vms@native}
steps=${STEPS:-8}
limit=${TIMEOUT_S:-300}
budget=${BUDGET_S:-540}
for v in STEPS TIMEOUT_S BUDGET_S; do
  if [ -n "${!v+x}" ] && ! [[ ${!v} =~ ^[1-9][0-9]*$ ]]; then
    echo "graphs-check: $v must be a positive whole number, not '${!v}'" >&2
    exit 2
  fi
done
for c in $cases; do
  case " manual compile compile-notrees lora generate " in
    *" $c "*) ;;
    *) echo "graphs-check: unknown case '$c' (manual, compile, compile-notrees, lora, generate)" >&2; exit 2 ;;
  esac
done
for a in $allocators; do
  [[ $a =~ ^(pytorch|pytorch-expandable|ours:[A-Za-z0-9_-]+(,[A-Za-z0-9_]+=[^,@ ]+)*(@native|@pluggable)?)$ ]] || {
    echo "graphs-check: unknown allocator '$a' (pytorch, pytorch-expandable, ours:POLICY[,k=v...][@native|@pluggable])" >&2
    exit 2
  }
done
mkdir -p "$OUT"
log=$OUT/graphs-check.log
res=$OUT/graphs-check.jsonl
: >"$res"
. "$root/scripts/gpu/live-env.sh"
live_env graphs-check
# the class (ours@native) and the OOM shim (the plug's OOM type); a failed build is one line
for b in build-cuda-allocator build-oom-shim; do
  if ! "$python" -m gmlake_torch "$b" >>"$log" 2>&1; then
    echo "graphs-check: $b: $(tail -1 "$log")" >&2
    exit 2
  fi
done
start=$SECONDS
for c in $cases; do
  for a in $allocators; do
    tag="$c-${a//[:@,=]/_}"
    if [ $((SECONDS - start)) -ge "$budget" ]; then
      printf '{"case": "%s", "allocator": "%s", "ok": false, "error": "skipped: BUDGET_S=%s spent"}\n' "$c" "$a" "$budget" >>"$res"
      continue
    fi
    echo "== $tag"
    timeout -k 5 "$limit" "$python" scripts/gpu/graphs_check.py "$c" "$a" --steps "$steps" >"$OUT/$tag.log" 2>&1
    rc=$?
    if grep -q '^RESULT ' "$OUT/$tag.log"; then
      grep '^RESULT ' "$OUT/$tag.log" | sed 's/^RESULT //' >>"$res"
    else  # killed or crashed before its answer: a failed row saying how it ended
      printf '{"case": "%s", "allocator": "%s", "ok": false, "error": "no result (exit %s): %s"}\n' "$c" "$a" "$rc" \
        "$(tail -1 "$OUT/$tag.log" | tr -d '"\\' | cut -c1-200)" >>"$res"
    fi
    tail -1 "$OUT/$tag.log" | cut -c1-300
  done
done
"$python" scripts/gpu/graphs_check.py summary "$res" "$OUT/graphs-check.md"
