#!/usr/bin/env bash
# The whole GPU run in one `run` call (device time is scarce). Here: bash scripts/gpu/bundle.sh;
# then `run` with carry [".gpu"] and the command: bash scripts/gpu/full-run.sh
# Steps, each under `timeout`, each run whatever the others did:
#   doctor   gmlake doctor
#   vmm      the vmm vitest suite (contract over host, sim and cuda; host/sim misuse table)
#   prebuilt the published prebuilt addon (packages/vmm-linux-x64-gnu, glibc-pinned, stripped)
#            through the cuda probe and the contract and driver tests (GMLAKE_VMM_ADDON)
#   misuse   bench/misuse-probe.mjs cuda, compared with the table host and sim are held to
#   stitch   the stitch vitest suite (contract over sim, host and cuda; fidelity on the traces)
#   binding  bench/binding-overhead.mjs host cuda (in-process C++ loop vs addon vs driver class)
#   reader   torch-trace's bench/read-speed.mjs: the snapshot reader vs CPython's pickle on opt1b_generate
#   memviz   PyTorch's own tooling (torch.cuda._memory_viz) reads our memory-viz exports of a vms
#            and a gmlake replay: stats, trace, and the viewer's HTML pages (trace_plot, segment_plot);
#            gpt2_ft_stacks exported: the viewer's trace names GPT-2's code (the stacks kept)
#   bench    apps/bench on the carried traces, drivers cuda,sim, capacity factor 1.02
#   faults   packages/stitch/bench/fault-sweep.mjs --driver cuda (skipped if absent or no cuda)
#   reserve  (only with STEPS=...,reserve) scripts/gpu/measure-reserve.sh: the device memory a
#            PyTorch process holds outside its allocator, the basis of gmlake's --reserve default
#   drivertime  packages/stitch/bench/driver-time.mjs on cuda: every trace (and corpus/) x vms,
#            caching, gmlake, expandable, two rounds, each call timed: per call kind, handle
#            size, mappings per set-access, first touch, phase. Not in the default steps:
#            STEPS=drivertime TOTAL=400 bash scripts/gpu/full-run.sh (about 6 minutes at most);
#            DRIVERTIME_ARGS='--options {"minTailHandleBytes":134217728}' measures a vms setting
# Choose steps with STEPS=doctor,vmm,...; override a step's limit with T_<step>=seconds
# (e.g. T_bench=200); the whole stays inside TOTAL seconds (default 560: a step gets at most
# what is left, so the `run` call's 600 s are never hit). BINDING_ARGS / BENCH_ARGS /
# FAULT_ARGS / DRIVERTIME_ARGS add arguments to those steps.
# Out ($OUT, else ./gpu-out; at most 8 files come back): full-run.log (everything, live),
# summary.txt (step, exit code, seconds), bench-summary.md (apps/bench's summary),
# driver-time.md (the drivertime step's tables) and
# results.tar.gz (per-step logs, all bench results and plots, JSON), re-packed after every
# step so a run cut short still returns what it did.
set -uo pipefail
t_start=$(date +%s.%N)
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
work=${GMLAKE_RUN_DIR:-/tmp/gmlake-run}
rm -rf "$work"
mkdir -p "$work"

declare -A limit=([doctor]=30 [vmm]=90 [prebuilt]=60 [misuse]=30 [stitch]=180 [binding]=90 [reader]=60 [memviz]=60 [bench]=240 [faults]=150 [drivertime]=370)
total_limit=${TOTAL:-560}
steps=${STEPS:-doctor,vmm,prebuilt,misuse,stitch,binding,reader,memviz,bench,faults}
rows=()
failed=0

elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

pack() {
  tar -czf "$OUT/results.tar.gz.tmp" -C "$(dirname "$work")" "$(basename "$work")" && mv "$OUT/results.tar.gz.tmp" "$OUT/results.tar.gz"
}

summary() {
  {
    printf '%-8s %6s %8s  %s\n' step exit seconds note
    for r in "${rows[@]}"; do printf '%-8s %6s %8s  %s\n' $r; done
    printf '%-8s %6s %8s\n' total "" "$(elapsed "$t_start")"
  } >"$work/summary.txt"
  cp "$work/summary.txt" "$OUT/summary.txt"
}

# step NAME DIR COMMAND...: runs COMMAND in DIR under the step's limit, log in $work/NAME.log.
step() {
  local name=$1 dir=$2
  shift 2
  [[ ",$steps," == *",$name,"* ]] || return 0
  local lim_var="T_$name" lim=${limit[$name]}
  lim=${!lim_var:-$lim}
  local left
  left=$(awk -v a="$t_start" -v b="$(date +%s.%N)" -v t="$total_limit" 'BEGIN { printf "%d", t - (b - a) - 5 }')
  if [ "$left" -lt 5 ]; then
    echo "=== [$name] not run: the ${total_limit}s total is used up"
    rows+=("$name - 0 no-time-left")
    summary
    return 0
  fi
  [ "$left" -lt "$lim" ] && lim=$left
  echo
  echo "=== [$name] $(date -u +%H:%M:%S) limit ${lim}s: $*"
  local t0
  t0=$(date +%s.%N)
  (cd "$dir" && timeout -k 10 "$lim" "$@") 2>&1 | tee "$work/$name.log"
  local rc=${PIPESTATUS[0]} secs note=""
  secs=$(elapsed "$t0")
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && note="timed-out(${lim}s)"
  echo "=== [$name] exit $rc in ${secs}s $note"
  [ "$rc" -eq 0 ] || failed=$((failed + 1))
  rows+=("$name $rc $secs $note")
  summary
  pack
}

skip() {
  [[ ",$steps," == *",$1,"* ]] || return 0
  echo "=== [$1] skipped: $2"
  rows+=("$1 - 0 skipped:$(echo "$2" | tr ' ' '_')")
  summary
}

main() {
  echo "=== full-run $(date -u +%Y-%m-%dT%H:%M:%SZ), steps $steps"
  local t0
  t0=$(date +%s.%N)
  # shellcheck source=unpack.sh
  source "$(dirname "$0")/unpack.sh" || return 2
  rows+=("unpack 0 $(elapsed "$t0")")
  {
    uname -a
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>&1 || true
    echo "node $(node --version)"
    command -v g++ >/dev/null && g++ --version | head -1
    echo "GMLAKE_SHARED=${GMLAKE_SHARED:-unset} (traces: $(ls "${GMLAKE_SHARED:-/nonexistent}/traces" 2>/dev/null | wc -l) entries)"
  } 2>&1 | tee "$work/machine.txt"
  local traces=${GMLAKE_SHARED:-$dest/../shared}/traces

  step doctor "$dest" node apps/cli/dist/main.js doctor
  step vmm "$dest/packages/vmm" node node_modules/vitest/vitest.mjs run --reporter=verbose
  step prebuilt "$dest/packages/vmm" env GMLAKE_VMM_ADDON="$dest/packages/vmm-linux-x64-gnu/gmlake_vmm.node" bash -c \
    'node -e "import(\"./dist/index.js\").then((m) => console.log(m.describeProbe(m.probeCuda())))" &&
     node node_modules/vitest/vitest.mjs run --reporter=verbose test/contract.test.ts test/drivers.test.ts test/native-loader.test.ts'
  step misuse "$dest/packages/vmm" bash -c 'node bench/misuse-probe.mjs cuda --json "$0" && node "$1" "$0" test/fixtures/h200-misuse.json' "$work/misuse-cuda.json" "$gpu_root/scripts/gpu/misuse-check.mjs"
  step stitch "$dest/packages/stitch" node node_modules/vitest/vitest.mjs run --reporter=verbose
  # shellcheck disable=SC2086
  step binding "$dest/packages/vmm" node bench/binding-overhead.mjs host cuda --json "$work/binding-overhead.json" ${BINDING_ARGS:-}
  step reader "$dest/packages/torch-trace" node bench/read-speed.mjs "$traces/opt1b_generate.pickle.gz"
  step memviz "$dest" bash -c 'set -e
    for p in vms gmlake; do
      node apps/cli/dist/main.js replay "$0/small/train_default.pickle" -p $p --set fragLimit=2MiB --export memory-viz "$1/memviz-$p.pickle" 2>/dev/null ||
        node apps/cli/dist/main.js replay "$0/small/train_default.pickle" -p $p --export memory-viz "$1/memviz-$p.pickle"
      python3 -m torch.cuda._memory_viz stats "$1/memviz-$p.pickle" | head -30
      python3 -m torch.cuda._memory_viz trace "$1/memviz-$p.pickle" | tail -5
      python3 -m torch.cuda._memory_viz trace_plot "$1/memviz-$p.pickle" -o "$1/memviz-$p-trace.html"
      python3 -m torch.cuda._memory_viz segment_plot "$1/memviz-$p.pickle" -o "$1/memviz-$p-segments.html"
      ls -la "$1/memviz-$p-trace.html" "$1/memviz-$p-segments.html"
    done
    # the export keeps the stacks: PyTorch'"'"'s viewer names the model'"'"'s code (GPT-2'"'"'s GELU, attention)
    node apps/cli/dist/main.js replay "$0/gpt2_ft_stacks.pickle.gz" -p caching --export memory-viz "$1/memviz-stacks.pickle"
    python3 "$2/memviz_frames.py" "$1/memviz-stacks.pickle"' "$traces" "$work" "$gpu_root/scripts/gpu"
  # shellcheck disable=SC2086
  step bench "$dest" node apps/bench/dist/main.js --traces "$traces" --drivers cuda,sim --capacity-factor 1.02 \
    --out "$work/bench" ${BENCH_ARGS:-}
  [ -f "$work/bench/summary.md" ] && cp "$work/bench/summary.md" "$OUT/bench-summary.md"
  local sweep="$dest/packages/stitch/bench/fault-sweep.mjs"
  if [ ! -f "$sweep" ]; then
    skip faults "no packages/stitch/bench/fault-sweep.mjs"
  elif ! grep -q -- "--driver" "$sweep" || ! grep -q "cuda" "$sweep"; then
    skip faults "fault-sweep.mjs takes no --driver cuda"
  else
    # shellcheck disable=SC2086
    step faults "$dest/packages/stitch" node bench/fault-sweep.mjs --driver cuda ${FAULT_ARGS:-}
  fi
  # not in the default steps (STEPS=reserve): what a PyTorch process holds outside its allocator
  step reserve "$gpu_root" env OUT="$work" bash scripts/gpu/measure-reserve.sh

  # No new replay starts after --budget seconds, so the step ends inside its limit.
  # shellcheck disable=SC2086
  step drivertime "$dest/packages/stitch" node bench/driver-time.mjs --driver cuda --policies vms,caching,gmlake,expandable \
    --traces "$traces,$gpu_root/corpus" --rounds 2 --budget 300 --out "$work/drivertime" ${DRIVERTIME_ARGS:-}
  [ -f "$work/drivertime/driver-time.md" ] && cp "$work/drivertime/driver-time.md" "$OUT/driver-time.md"

  echo
  echo "=== summary (also in summary.txt; everything in results.tar.gz)"
  summary
  cat "$work/summary.txt"
  pack
  [ "$failed" -eq 0 ] || { echo "=== $failed step(s) failed"; return 1; }
}

# Exit status: 0 when every step that ran passed.
main 2>&1 | tee "$OUT/full-run.log"
