#!/usr/bin/env bash
# Driver time with every trace x policy in its own process, so that each pays its own first
# touch of device memory (driver-time.mjs replays them all in one process, where whatever
# runs first pays the process's first touch alone). On the GPU host, from the full bundle:
#   bash scripts/gpu/run.sh bash ../../scripts/gpu/driver-time-fresh.sh [REPS] [SPEC...]
# SPEC: a policy, or POLICY:{json options} (e.g. 'vms:{"minTailHandleBytes":134217728}');
# default: vms caching. REPS (default 2): processes per trace and spec, in turns (ABAB).
# DRIVER: cuda (default), or sim / host to try the script without a GPU.
# DRIVER_TIME_BENCH: another copy of the per-process bench, relative to the workspace (to
# measure a change of the measuring code itself against the committed one in one call).
# TRACES: substrings picking traces (default: every trace of the shared traces and of
# CORPUS, default corpus/ beside this script's workspace).
# Prints one markdown table (median and range over the processes of "% of trace" and
# driver ms, teardown apart) and writes it to $OUT/driver-time-fresh.md; every process's own
# tables (per call kind, handle size, first touch, phase) go to $OUT/driver-time-fresh-runs.md
# (what refits the sim's first-touch costs).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
bench=$repo/${DRIVER_TIME_BENCH:-packages/stitch/bench/driver-time.mjs}
driver=${DRIVER:-cuda}
reps=${1:-2}
shift || true
specs=("$@")
[ ${#specs[@]} -eq 0 ] && specs=(vms caching)
if ! [[ $reps =~ ^[1-9][0-9]*$ ]]; then
  echo "driver-time-fresh: REPS must be a positive number, not '$reps'" >&2
  exit 2
fi
shared=${GMLAKE_SHARED:-$repo/../shared}
corpus=${CORPUS:-$repo/corpus}
traces=()
for f in "$shared"/traces/*.pickle* "$corpus"/*.pickle*; do
  [ -f "$f" ] || continue
  n=$(basename "$f")
  n=${n%%.pickle*}
  if [ -n "${TRACES:-}" ]; then
    keep=0
    for t in $TRACES; do [[ $n == *$t* ]] && keep=1; done
    [ $keep -eq 1 ] || continue
  fi
  traces+=("$n")
done
if [ ${#traces[@]} -eq 0 ]; then
  echo "driver-time-fresh: no traces under $shared/traces or $corpus${TRACES:+ matching $TRACES}" >&2
  exit 2
fi
tmp=$(mktemp -d)
: >"$tmp/runs.md"
for t in "${traces[@]}"; do
  for ((r = 1; r <= reps; r++)); do
    for i in "${!specs[@]}"; do
      s=${specs[$i]}
      p=${s%%:*}
      o=${s#"$p"}
      o=${o#:}
      out=$tmp/$t-$r-$i
      if ! node "$bench" --driver "$driver" --policies "$p" ${o:+--options "$o"} --traces "$shared/traces,$corpus" --trace "/$t.pickle" --rounds 1 --out "$out" >"$out.log" 2>&1; then
        echo "driver-time-fresh: $t $s rep $r failed: $(tail -1 "$out.log")" >&2
        continue
      fi
      echo "$s" >"$out/spec"
      { echo; echo "## $t, $s, process $r"; echo; sed -n '/^### /,$p' "$out/driver-time.md"; } >>"$tmp/runs.md"
    done
  done
done
mkdir -p "${OUT:-$tmp}"
# the summary from each process's driver-time.json (one run each: this trace, this spec)
python3 - "$tmp" "$reps" "$driver" <<'EOF' | tee "${OUT:-$tmp}/driver-time-fresh.md"
import glob, json, os, statistics, sys
by = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*", "driver-time.json"))):
    spec = open(os.path.join(os.path.dirname(f), "spec")).read().strip()
    for run in json.load(open(f))["runs"]:
        name = os.path.basename(run["trace"])
        by.setdefault((name, spec), []).append((sum(run["perKindCalls"].values()), run["driverMsWorkload"], run["pctOfTrace"]))
print(f"Driver time, each trace x policy in its own process ({sys.argv[2]} processes each; {sys.argv[3]} driver; teardown apart)\n")
print("| trace | policy | processes | driver calls | driver ms, median (min..max) | % of trace, median (min..max) |")
print("| --- | --- | ---: | ---: | ---: | ---: |")
for (t, s), v in by.items():
    ms = [x[1] for x in v]
    pct = [x[2] for x in v]
    print(f"| {t} | {s} | {len(v)} | {v[0][0]} | {statistics.median(ms):.1f} ({min(ms):.1f}..{max(ms):.1f}) | "
          f"{statistics.median(pct):.2f} ({min(pct):.2f}..{max(pct):.2f}) |")
EOF
cp "$tmp/runs.md" "${OUT:-$tmp}/driver-time-fresh-runs.md"
[ -n "${OUT:-}" ] && echo "(each process's tables: $OUT/driver-time-fresh-runs.md)"
rm -rf "$tmp"
