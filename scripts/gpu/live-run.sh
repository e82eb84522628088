#!/usr/bin/env bash
# The live run on the GPU host, in one `run` call: PyTorch jobs allocating through the
# stitching engine (packages/torch-alloc) beside PyTorch's own allocator.
#   here:   bash scripts/gpu/bundle.sh --live        (.gpu/live.tar.xz, ~20 MiB)
#   there:  `run` with carry [".gpu"] and: bash scripts/gpu/live-run.sh
# Steps (STEPS=a,b,... picks them, default setup,checks,micro,threading,workloads,memcheck;
# setup runs first, the others in STEPS's order; each command under `timeout`):
#   setup      unpack, build memsampler.so, the OOM shim (torch.cuda.OutOfMemoryError) and,
#              when micro runs, the C++ pair bench against this PyTorch
#   checks     live_checks.py smoke (every built-in policy), oom, capture, and integrity for
#              each of INTEGRITY_POLICIES (a pattern-checked stress: two threads, two streams,
#              every tensor verified on the GPU before its free; PyTorch's own as the control)
#   micro      per-call cost inside the PyTorch process: alloc+free pairs through
#              torch.cuda.caching_allocator_alloc/delete, PyTorch default and expandable
#              beside ours:caching and ours:vms (median, p99), from Python and from C++; with
#              a bundled baseline (bundle.sh --live --baseline REV) or BASELINE_LIB, vms's
#              default and no-speculate rows again on that library, each right after ours
#   threading  threading_bench (CPU): a Locker per call vs one JS thread, on this host
#              (THREADING_REPS rounds, default 1; the bundled baseline's library too)
#   workloads  live_workloads.py: each of WORKLOADS under each of ALLOCATORS, LIVE_STEPS steps,
#              device memory sampled every 100 us inside the steps (memsampler.so)
#   timing     step times without the sampler: for each of TIMING_WORKLOADS, TIMING_REPS rounds,
#              each round one run of every TIMING_ALLOCATORS in order (ABCD ABCD; round 1 of
#              every workload before round 2, so a short call still has a full round), each
#              TIMING_STEPS steps; the summary pairs step i with the reference's step i of the
#              same round (same seeds: same shapes) over the steps >= WARMUP
#   profile    where a step's time goes on the GPU: each of PROFILE_WORKLOADS under each of
#              PROFILE_ALLOCATORS, PROFILE_RUN_STEPS steps, the steps PROFILE_STEPS under
#              torch.profiler (time in kernels, the GPU's busy and idle time, the costliest
#              kernels; kernel_profile.py) and ours timing its own calls (GMLAKE_TIME_CALLS=1)
#   layout     live_checks.py layout for each of LAYOUT_ALLOCATORS (default pytorch
#              pytorch-expandable caching expandable vms vms,maxHandleBytes=2097152): copy, add
#              and matmul speed on the memory as each lays it out (~10 s each)
#   memcheck   compute-sanitizer --tool memcheck over live_checks.py smoke with each of
#              MEMCHECK_POLICIES (default vms; POLICY[,k=v...])
# Knobs: WORKLOADS (default gpt2_ft), ALLOCATORS (default: pytorch pytorch-expandable
#   ours:caching ours:expandable ours:gmlake ours:vms ours:vms,crossStream=false; also
#   plug:pytorch and plug:pytorch-expandable, PyTorch's own behind the pluggable interface
#   with each call timed, which setup then builds: scripts/gpu/pytorch_plug.py),
#   ALLOCATORS_<workload> (that workload's own list instead of ALLOCATORS; empty = skip it),
#   LIVE_STEPS (default 12), SMOKE_POLICIES (the checks step's smoke runs, default caching expandable
#   gmlake vms; empty = none), CHECK_KNOBS (the oom and capture checks' knobs, k=v,...), INTEGRITY_POLICIES (default: pytorch caching expandable gmlake
#   vms,crossStream=true vms,crossStream=false; POLICY[,k=v...]), INTEGRITY_SECONDS (default
#   20), TIMING_WORKLOADS (default llama1b_fsdp gpt2_ft llama1b_lora), TIMING_ALLOCATORS
#   (default pytorch-expandable pytorch ours:vms ours:caching), TIMING_REPS (default 2),
#   TIMING_STEPS (default 16), TIMING_TIME_CALLS (default 1: ours sums the host time inside
#   its alloc and free per step, and its parts; total: the whole calls only, two clock reads
#   a call as the plug's; 0 = off), TIMING_ENVS (sets of environment
#   settings, separated by ';', each shell words VAR=value: each ours: allocator runs once per
#   set, labelled with it, an empty set meaning none, e.g.
#   ';GMLAKE_THREADING=thread;GMLAKE_NODE_FLAGS="--max-semi-space-size=1"'; the word baseline
#   in a set runs ours at the revision that bundle.sh --live --baseline REV packed, e.g.
#   TIMING_ENVS=';baseline' for this tree against REV, round by round; default: one run), PROFILE_WORKLOADS (default gpt2_ft),
#   PROFILE_ALLOCATORS (default pytorch-expandable pytorch ours:vms ours:expandable),
#   PROFILE_RUN_STEPS (default 10), PROFILE_STEPS (default 3,7,9), WARMUP (steps left out of step times and steady-state engine
#   counts, default 3), TOTAL seconds for the whole call (default 560), T_<step> a step's
#   limit, PYTHON (default python3). Before workloads and timing it prints its estimate of
#   their time (run 6's costs) beside the time left; what does not fit is skipped, tagged.
# Out ($OUT): live-run.log, live-summary.md (the tables), live-results.jsonl (every RESULT
# line, tagged), results.tar.gz (per-step logs, snapshots), re-packed after every step.
set -uo pipefail
t_start=$(date +%s.%N)
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
# shellcheck source=live-env.sh
. "$root/scripts/gpu/live-env.sh"
OUT=${OUT:-$root/gpu-out}
mkdir -p "$OUT"
work=${GMLAKE_RUN_DIR:-/tmp/gmlake-live}
rm -rf "$work"
mkdir -p "$work"
python=${PYTHON:-python3}
steps=${STEPS:-setup,checks,micro,threading,workloads,memcheck}
workloads=${WORKLOADS:-gpt2_ft}
allocators=${ALLOCATORS:-pytorch pytorch-expandable ours:caching ours:expandable ours:gmlake ours:vms ours:vms,crossStream=false}
live_steps=${LIVE_STEPS:-12}
integrity_policies=${INTEGRITY_POLICIES:-pytorch caching expandable gmlake vms,crossStream=true vms,crossStream=false}
integrity_seconds=${INTEGRITY_SECONDS:-20}
smoke_policies=${SMOKE_POLICIES-caching expandable gmlake vms}
check_knobs=${CHECK_KNOBS:-}
memcheck_policies=${MEMCHECK_POLICIES:-vms}
layout_allocators=${LAYOUT_ALLOCATORS:-pytorch pytorch-expandable caching expandable vms vms,maxHandleBytes=2097152}
timing_workloads=${TIMING_WORKLOADS:-llama1b_fsdp gpt2_ft llama1b_lora}
timing_allocators=${TIMING_ALLOCATORS:-pytorch-expandable pytorch ours:vms ours:caching}
timing_reps=${TIMING_REPS:-2}
timing_steps=${TIMING_STEPS:-16}
timing_time_calls=${TIMING_TIME_CALLS:-1}
# BASELINE_LIB (or GMLAKE_BASELINE_LIB): a build of libgmlake_torch_alloc.so to measure against
# (default: the bundled baseline, where live_baseline unpacks it)
baseline_lib=${BASELINE_LIB:-${GMLAKE_BASELINE_LIB:-$work/baseline/packages/torch-alloc/build/lib/libgmlake_torch_alloc.so}}
baseline_rev=$(cat .gpu/baseline.rev 2>/dev/null || echo unknown)
profile_workloads=${PROFILE_WORKLOADS:-gpt2_ft}
profile_allocators=${PROFILE_ALLOCATORS:-pytorch-expandable pytorch ours:vms ours:expandable}
profile_run_steps=${PROFILE_RUN_STEPS:-10}
profile_steps=${PROFILE_STEPS:-3,7,9}
warmup=${WARMUP:-3}
total_limit=${TOTAL:-560}
declare -A limit=([setup]=90 [checks]=150 [micro]=150 [threading]=60 [workloads]=400 [timing]=400 [profile]=120 [memcheck]=240)
export GMLAKE_TORCH_PY="$root/packages/torch-alloc/python"
export PYTHONPATH="$GMLAKE_TORCH_PY${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export GMLAKE_PLUG_LIB="$work/libpytorch_plug.so"
exec > >(tee -a "$OUT/live-run.log") 2>&1

elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
left() { awk -v a="$t_start" -v b="$(date +%s.%N)" -v t="$total_limit" 'BEGIN { printf "%d", t - (b - a) - 5 }'; }
pack() {
  cp "$work/results.jsonl" "$OUT/live-results.jsonl" 2>/dev/null
  tar -czf "$OUT/results.tar.gz.tmp" -C "$(dirname "$work")" --exclude="$(basename "$work")/baseline" "$(basename "$work")" && mv "$OUT/results.tar.gz.tmp" "$OUT/results.tar.gz"
}
want() { [[ ",$steps," == *",$1,"* ]]; }
for s in ${steps//,/ }; do
  case $s in
    setup | checks | micro | threading | workloads | timing | profile | layout | memcheck) ;;
    *) echo "live-run: unknown step '$s' in STEPS (setup, checks, micro, threading, workloads, timing, profile, layout, memcheck)" >&2; exit 2 ;;
  esac
done
# counts and limits: positive whole numbers, or a one-line error before anything runs
for v in LIVE_STEPS TIMING_REPS TIMING_STEPS THREADING_REPS PROFILE_RUN_STEPS INTEGRITY_SECONDS TOTAL; do
  if [ -n "${!v+x}" ] && ! [[ ${!v} =~ ^[1-9][0-9]*$ ]]; then
    echo "live-run: $v must be a positive whole number, not '${!v}'" >&2
    exit 2
  fi
done
case ${TIMING_TIME_CALLS:-1} in
  0 | 1 | total) ;;
  *) echo "live-run: TIMING_TIME_CALLS is 0, 1 or total, not '$TIMING_TIME_CALLS'" >&2; exit 2 ;;
esac
if [ -n "${WARMUP+x}" ] && ! [[ $WARMUP =~ ^[0-9]+$ ]]; then
  echo "live-run: WARMUP must be a whole number of steps, not '$WARMUP'" >&2
  exit 2
fi
if want timing && [[ " ${TIMING_ENVS:-} " =~ [^A-Za-z0-9_]baseline[^A-Za-z0-9_=] ]] && ! { want setup && [ -f .gpu/baseline.tar.xz ]; }; then
  echo "live-run: TIMING_ENVS names baseline: it needs the setup step and .gpu/baseline.tar.xz (bash scripts/gpu/bundle.sh --live --baseline REV)" >&2
  exit 2
fi
# ALLOCATORS_<workload> when set (even empty), else ALLOCATORS
allocators_of() { local v="ALLOCATORS_$1"; if [ -n "${!v+x}" ]; then echo "${!v}"; else echo "$allocators"; fi; }
# A run's rough cost in seconds on the H200 (run 6: ~18 s of process start, model build and
# first step, then the steps; run 7: opt1b_generate ~3.2 s a round, gpt2_ft_ckpt ~0.39 s a step).
run_cost() {
  local s
  case $1 in
    llama1b_fsdp) s=0.37 ;; gpt2_ft) s=0.28 ;; gpt2_ft_ckpt) s=0.39 ;; llama1b_lora) s=0.55 ;;
    opt1b_generate) s=3.2 ;; *) s=0.6 ;;
  esac
  awk -v s="$s" -v n="$2" 'BEGIN { printf "%d", 18 + s * (n - 1) + 0.5 }'
}

# run TAG LIMIT CMD...: one command under min(LIMIT, time left); its RESULT lines, tagged, go
# to results.jsonl; its output to $work/TAG.log (and here).
run() {
  local tag=$1 lim=$2
  shift 2
  local l
  l=$(left)
  [ "$l" -lt "$lim" ] && lim=$l
  if [ "$lim" -le 5 ]; then
    echo "== $tag: skipped (no time left)"
    echo "{\"tag\":\"$tag\",\"skipped\":\"no time left\"}" >>"$work/results.jsonl"
    return 0
  fi
  echo "== $tag (limit ${lim}s): $*"
  local t0 rc
  t0=$(date +%s.%N)
  timeout -k 5 "$lim" "$@" >"$work/$tag.log" 2>&1
  rc=$?
  cat "$work/$tag.log" | tail -40
  grep '^RESULT ' "$work/$tag.log" | sed 's/^RESULT //' | TAG="$tag" RC="$rc" SEC="$(elapsed "$t0")" "$python" -c '
import json, os, sys
for line in sys.stdin:
    try:
        r = json.loads(line)
    except ValueError:
        continue
    r.update(tag=os.environ["TAG"], rc=int(os.environ["RC"]), seconds=float(os.environ["SEC"]))
    print(json.dumps(r))' >>"$work/results.jsonl"
  if ! grep -q '^RESULT ' "$work/$tag.log"; then
    echo "{\"tag\":\"$tag\",\"rc\":$rc,\"seconds\":$(elapsed "$t0"),\"result\":null}" >>"$work/results.jsonl"
  fi
  echo "== $tag: exit $rc in $(elapsed "$t0") s"
  pack
}

{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv || true
  "$python" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
  command -v compute-sanitizer || true
} 2>&1 | tee "$work/machine.txt"
touch "$work/results.jsonl"

step_setup() {
  if [ ! -f .gpu/live.tar.xz ]; then
    echo "live-run: .gpu/live.tar.xz missing: run scripts/gpu/bundle.sh --live here and carry .gpu" >&2
    exit 2
  fi
  t0=$(date +%s.%N)
  tar -xJf .gpu/live.tar.xz -C "$root" || { echo "live-run: unpacking .gpu/live.tar.xz failed" >&2; exit 2; }
  GMLAKE_RUN_DIR=$work live_baseline live-run  # the engine at another revision beside this one (bundle.sh --baseline)
  echo "== unpacked in $(elapsed "$t0") s"
  gcc -O2 -shared -fPIC -o "$work/memsampler.so" scripts/gpu/memsampler.c -ldl -lpthread || echo "memsampler build failed"
  run oom-shim "${T_setup:-${limit[setup]}}" "$python" -m gmlake_torch build-oom-shim
  # PyTorch's own behind the pluggable interface, timed (allocators plug:pytorch, plug:pytorch-expandable)
  if want micro || [[ "$allocators $timing_allocators $profile_allocators $integrity_policies $(env | grep '^ALLOCATORS_')" == *plug:* ]]; then
    run pytorch-plug "${T_setup:-${limit[setup]}}" "$python" scripts/gpu/pytorch_plug.py build "$GMLAKE_PLUG_LIB"
  fi
  if want micro; then
    run pair-bench "${T_setup:-${limit[setup]}}" "$python" -m gmlake_torch build-pair-bench
  fi
}

step_checks() {
  local n_int
  n_int=$(wc -w <<<"$integrity_policies")
  # run 6's costs: a smoke ~11 s, oom and capture ~6 s, an integrity run ~5 s beside its seconds
  echo "== checks: $(wc -w <<<"$smoke_policies") smoke, oom, capture, $n_int integrity runs of ${integrity_seconds} s, estimated ~$((56 + n_int * (integrity_seconds + 5))) s; $(left) s left"
  for p in $smoke_policies; do
    run "smoke-$p" 60 "$python" scripts/gpu/live_checks.py smoke --policy "$p"
  done
  run oom 60 "$python" scripts/gpu/live_checks.py oom --policy vms --knobs "$check_knobs"
  run capture 60 "$python" scripts/gpu/live_checks.py capture --policy vms --knobs "$check_knobs"
  for spec in $integrity_policies; do
    p=${spec%%,*}
    k=
    [[ $spec == *,* ]] && k=${spec#*,}
    run "integrity-${spec//[:,=]/_}" $((integrity_seconds + 60)) "$python" scripts/gpu/live_checks.py integrity \
      --policy "$p" --knobs "$k" --seconds "$integrity_seconds"
  done
}

step_layout() {
  # kernels on the memory as each allocator lays it out (vms with 2 MiB handles: every large
  # tensor a range of many handles, as a stitched one is)
  for spec in $layout_allocators; do
    p=${spec%%,*}
    k=
    [[ $spec == *,* ]] && k=${spec#*,}
    run "layout-${spec//[:,=]/_}" 60 "$python" scripts/gpu/live_checks.py layout --policy "$p" --knobs "$k"
  done
}

step_micro() {
  # plug:pytorch-expandable: PyTorch's own behind the pluggable interface, i.e. what the interface costs
  for p in pytorch pytorch-expandable plug:pytorch-expandable caching vms; do
    run "micro-${p//:/_}" 45 "$python" scripts/gpu/live_checks.py micro --policy "$p" --pairs 200000
  done
  # with a bundled baseline (bundle.sh --live --baseline REV): vms's default on the library at
  # REV right after this tree's, so a hand-off change is measured against what it changes on
  # the same host (the C++ pair bench goes through whichever allocator is plugged in: copied
  # there unless the baseline has its own)
  if [ -f "$baseline_lib" ]; then
    cp -n "$("$python" -c 'import gmlake_torch; print(gmlake_torch.pair_bench_path())')" "$(dirname "$baseline_lib")/" 2>/dev/null || true
    run "micro-vms-baseline" 45 env GMLAKE_TORCH_ALLOC_LIB="$baseline_lib" "$python" scripts/gpu/live_checks.py micro --policy vms --pairs 200000
  fi
  # the capture check the old way (cuStreamIsCapturing on every alloc and free), beside the default
  run "micro-vms-capture-always" 45 env GMLAKE_CAPTURE_CHECK=always "$python" scripts/gpu/live_checks.py micro --policy vms --pairs 200000
  # both threadings (the default, auto, is one JS thread on this host's 16 CPUs)
  run "micro-vms-locker" 45 env GMLAKE_THREADING=locker "$python" scripts/gpu/live_checks.py micro --policy vms --pairs 200000
  # without the answers the idle JS thread works out ahead (on by default with it), and with
  # its drains of queued frees at once instead of after 2 us (in a hot loop the next alloc
  # comes sooner and takes them in its own call)
  run "micro-vms-no-speculate" 45 env GMLAKE_SPECULATE=0 "$python" scripts/gpu/live_checks.py micro --policy vms --pairs 200000
  if [ -f "$baseline_lib" ]; then
    run "micro-vms-no-speculate-baseline" 45 env GMLAKE_SPECULATE=0 GMLAKE_TORCH_ALLOC_LIB="$baseline_lib" "$python" scripts/gpu/live_checks.py micro --policy vms --pairs 200000
  fi
  run "micro-vms-drain0" 45 env GMLAKE_DRAIN_US=0 "$python" scripts/gpu/live_checks.py micro --policy vms --pairs 200000
}

step_threading() {
  b=packages/torch-alloc/build/bin/threading_bench
  lib=packages/torch-alloc/build/lib/libgmlake_torch_alloc.so
  local r d
  # THREADING_REPS rounds; with a bundled baseline each round also runs the library at its
  # revision, right after this tree's (rows tagged lib: baseline@REV)
  for ((r = 1; r <= ${THREADING_REPS:-1}; r++)); do
    for d in locker thread; do
      run "threading-$d-r$r" 30 bash -c "$b $lib $d --threads 2 --calls 50000 --policy vms --driver sim | sed 's/^/RESULT /'"
      if [ -f "$baseline_lib" ]; then
        run "threading-$d-baseline-r$r" 30 bash -c "$b $baseline_lib $d --threads 2 --calls 50000 --policy vms --driver sim | sed 's/^{/{\"lib\": \"baseline@$baseline_rev\", /; s/^/RESULT /'"
      fi
    done
  done
  # the per-call parts (round trip, pair and its halves, JS alone, one cuStreamIsCapturing) on
  # the cuda driver, with the capture check on every call (always) and only in PyTorch's pool
  # windows (pool, the default); tabled by packages/torch-alloc/bench/threading_table.py
  for p in caching vms; do
    for c in always pool; do
      run "threading-parts-$p-cuda-$c" 40 bash -c "$b $lib locker --threads 1 --calls 100000 --policy $p --driver cuda --capture-check $c | sed 's/^/RESULT /'"
    done
  done
  run "threading-parts-vms-sim" 30 bash -c "$b $lib locker --threads 1 --calls 100000 --policy vms --driver sim | sed 's/^/RESULT /'"
  grep -h '^RESULT ' "$work"/threading-*.log | sed 's/^RESULT //' | "$python" packages/torch-alloc/bench/threading_table.py >"$work/threading-table.md" 2>&1
  cp "$work/threading-table.md" "$OUT/threading-table.md" 2>/dev/null
}

step_workloads() {
  est=0 n=0
  for w in $workloads; do
    for a in $(allocators_of "$w"); do
      est=$((est + $(run_cost "$w" "$live_steps"))) n=$((n + 1))
    done
  done
  echo "== workloads: $n runs of $live_steps steps, estimated ~${est} s; $(left) s left"
  local -A seen=()  # a repeated allocator (pytorch twice: its own noise) gets its own tag and log
  local tag c
  for w in $workloads; do
    for a in $(allocators_of "$w"); do
      tag="$w-${a//[:,=]/_}"
      c=${seen[$tag]:-0}
      seen[$tag]=$((c + 1))
      [ "$c" -gt 0 ] && tag="$tag-$((c + 1))"
      run "$tag" "${T_workloads:-${limit[workloads]}}" "$python" scripts/gpu/live_workloads.py "$w" --allocator "$a" --steps "$live_steps" "${sampler[@]}"
    done
  done
}

step_timing() {
  read -ra tw <<<"$timing_workloads"
  read -ra ta <<<"$timing_allocators"
  est=0
  for w in "${tw[@]}"; do est=$((est + $(run_cost "$w" "$timing_steps") * ${#ta[@]} * timing_reps)); done
  echo "== timing: ${#tw[@]} workloads x ${#ta[@]} allocators x $timing_reps rounds of $timing_steps steps, no sampler, estimated ~${est} s; $(left) s left"
  for ((rep = 1; rep <= timing_reps; rep++)); do
    for w in "${tw[@]}"; do
      for a in "${ta[@]}"; do
        # ours once per set of TIMING_ENVS (e1, e2, ... in the tag past the first)
        local sets=("") k=0 e
        # a sentinel field keeps a trailing empty set ('X;': X, then none), which read drops
        if [[ $a == ours:* && -n "${TIMING_ENVS:-}" ]]; then IFS=';' read -ra sets <<<"$TIMING_ENVS;."; unset 'sets[-1]'; fi
        for e in "${sets[@]}"; do
          e=$(echo "$e" | sed 's/^ *//; s/ *$//')
          local -a assign=() words=()
          local label=$e x
          eval "words=($e)" || { echo "live-run: TIMING_ENVS: cannot read the set '$e'" >&2; exit 2; }
          for x in "${words[@]}"; do
            if [ "$x" = baseline ]; then  # the engine at the bundle's baseline revision (checked at the start)
              assign+=("GMLAKE_TORCH_ALLOC_LIB=$baseline_lib")
              label=${label/baseline/baseline@$baseline_rev}
            else
              assign+=("$x")
            fi
          done
          run "timing-$w-${a//[:,=]/_}$([ $k -gt 0 ] && echo "-e$k")-r$rep" "${T_timing:-${limit[timing]}}" env GMLAKE_TIME_CALLS="$timing_time_calls" \
            GMLAKE_RUN_LABEL="$label" "${assign[@]}" "$python" scripts/gpu/live_workloads.py "$w" --allocator "$a" --steps "$timing_steps" --rep "$rep"
          k=$((k + 1))
        done
      done
    done
  done
}

step_profile() {
  local n=0
  for w in $profile_workloads; do for a in $profile_allocators; do n=$((n + 1)); done; done
  echo "== profile: $n runs of $profile_run_steps steps, steps $profile_steps profiled; $(left) s left"
  for w in $profile_workloads; do
    for a in $profile_allocators; do
      run "profile-$w-${a//[:,=]/_}" "${T_profile:-${limit[profile]}}" env GMLAKE_TIME_CALLS=1 "$python" \
        scripts/gpu/live_workloads.py "$w" --allocator "$a" --steps "$profile_run_steps" --profile-steps "$profile_steps"
    done
  done
}

step_memcheck() {
  local spec p k tag
  for spec in $memcheck_policies; do
    p=${spec%%,*}
    k=
    [[ $spec == *,* ]] && k=${spec#*,}
    tag="memcheck-${spec//[:,=]/_}"
    if command -v compute-sanitizer >/dev/null; then
      run "$tag" "${T_memcheck:-${limit[memcheck]}}" compute-sanitizer --tool memcheck --leak-check no \
        --error-exitcode 9 "$python" scripts/gpu/live_checks.py smoke --policy "$p" --knobs "$k" --steps 4
    else
      echo "{\"tag\":\"$tag\",\"skipped\":\"no compute-sanitizer\"}" >>"$work/results.jsonl"
    fi
  done
}

# setup first; the others in the order STEPS names them (what must not be cut short goes first)
if want setup; then step_setup; fi
sampler=()
[ -f "$work/memsampler.so" ] && sampler=(--sampler "$work/memsampler.so")
export GMLAKE_SNAPSHOT_DIR="$work"
for s in ${steps//,/ }; do
  [ "$s" = setup ] || "step_$s"
done

"$python" scripts/gpu/live_summary.py "$work" --warmup "$warmup" >"$OUT/live-summary.md" 2>&1
cat "$OUT/live-summary.md"
pack
echo "live-run: done in $(elapsed "$t_start") s"
