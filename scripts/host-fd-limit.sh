#!/usr/bin/env bash
# Every public trace x policy replayed on the host driver (real memfd + mmap) under a
# small fd limit: each run must complete (an out-of-memory under the capacity is a
# result) or end with a clear resource error (exit 4), never a fake out-of-memory.
#   scripts/host-fd-limit.sh [FD_LIMIT=256] [CAPACITY=141GiB]     (after pnpm build)
# Prints a Markdown table; exits 1 if any run ended otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
limit="${1:-256}"
capacity="${2:-141GiB}"
traces="${GMLAKE_SHARED:-../shared}/traces"
cli="node apps/cli/dist/main.js"
bad=0
err=$(mktemp)
trap 'rm -f "$err"' EXIT
echo "| trace | policy | exit | events | OOM | memCreate | peak reserved GiB | s |"
echo "| --- | --- | ---: | ---: | --- | ---: | ---: | ---: |"
for t in "$traces"/*.pickle.gz "$traces"/small/*.pickle; do
  for p in caching expandable gmlake vms; do
    t0=$EPOCHREALTIME
    out=$(ulimit -n "$limit" && $cli replay "$t" --driver host -p "$p" --capacity "$capacity" --json 2>"$err")
    rc=$?
    s=$(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $t0 }")
    name=$(basename "$t")
    if [ "$rc" = 0 ]; then
      row=$(node -e 'const r=JSON.parse(process.argv[1]);console.log([r.events,r.oom?`at #${r.oom.eventIndex}`:"no",r.driverCalls.memCreate??0,(r.peakReservedBytes/2**30).toFixed(2)].join(" | "))' "$out")
      echo "| $name | $p | 0 | $row | $s |"
    elif [ "$rc" = 4 ]; then
      echo "| $name | $p | 4 | $(head -c 160 "$err") | | | | $s |"
    else
      echo "| $name | $p | $rc | $(head -c 160 "$err") | | | | $s |"
      bad=1
    fi
  done
done
exit $bad
