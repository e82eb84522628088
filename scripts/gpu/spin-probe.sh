#!/usr/bin/env bash
# What the engine's JS thread's spin buys and costs, inside each process (issue 27): per run the
# process's CPU seconds per wall second (the JS thread's spin included) and the time the calling
# threads spend inside alloc+free per step (GMLAKE_TIME_CALLS=total), under the default spin,
# shorter spins and no JS thread (a Locker per call). These two do not depend on the machine's
# run-to-run speed as step times do (docs/notebook/2026-12-03-step-time-noise.md).
#   here:   bash scripts/gpu/bundle.sh --live      (.gpu/live.tar.xz)
#   there:  `run` with carry [".gpu"] and: bash scripts/gpu/spin-probe.sh
# Knobs: WORKLOAD (gpt2_ft), STEPS (16; the first 3 left out), REPS (2), POLICY (vms),
#   VARIANTS (space-separated NAME:ENV, default "default: spin100:GMLAKE_SPIN_US=100
#   spin20:GMLAKE_SPIN_US=20 locker:GMLAKE_THREADING=locker").
# Out ($OUT): NAME-REP.out (live_workloads.py's RESULT line) and spin-probe.txt, a line per run.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-$root/gpu-out}
workload=${WORKLOAD:-gpt2_ft}
steps=${STEPS:-16}
reps=${REPS:-2}
if ! [[ $steps =~ ^[0-9]+$ && $steps -gt 4 && $reps =~ ^[1-9][0-9]*$ ]]; then
  echo "spin-probe: STEPS must be a whole number above 4 and REPS a positive one (got STEPS='$steps' REPS='$reps')" >&2
  exit 2
fi
mkdir -p "$OUT"
# shellcheck source=live-env.sh
. "$root/scripts/gpu/live-env.sh"
live_env spin-probe
export GMLAKE_TIME_CALLS=total
: >"$OUT/spin-probe.txt"
for rep in $(seq 1 "$reps"); do
  for v in ${VARIANTS:-default: spin100:GMLAKE_SPIN_US=100 spin20:GMLAKE_SPIN_US=20 locker:GMLAKE_THREADING=locker}; do
    name=${v%%:*}
    # shellcheck disable=SC2086  # the variant's settings are words by design
    env ${v#*:} python3 scripts/gpu/live_workloads.py "$workload" --allocator "ours:${POLICY:-vms}" --steps "$steps" \
      >"$OUT/$name-$rep.out" 2>"$OUT/$name-$rep.err"
    python3 - "$OUT/$name-$rep.out" "$name" >>"$OUT/spin-probe.txt" <<'PY'
import json, sys
res = [json.loads(l[len("RESULT "):]) for l in open(sys.argv[1]) if l.startswith("RESULT ")]
if not res:
    print(sys.argv[2], "failed (see its .err)")
    sys.exit()
r = res[0]
s, c, p = r["step_s"][3:], r["step_cpu_s"][3:], r["step_proc_cpu_s"][3:]
eng = r["step_engine"][3:]
call = sum(e.get("call_us", 0) for e in eng) / len(eng)
allocs = sum(e.get("allocs", 0) for e in eng) / len(eng)
print(f"{sys.argv[2]} step {sum(s) / len(s):.4f} s, CPU main {sum(c) / sum(s):.3f} process {sum(p) / sum(s):.3f} s/s, "
      f"alloc+free {call / 1e3:.2f} ms/step ({100 * call / 1e6 / (sum(s) / len(s)):.2f}% of it), {allocs:.0f} allocs/step")
PY
    tail -1 "$OUT/spin-probe.txt"
  done
done
