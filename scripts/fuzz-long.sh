#!/usr/bin/env bash
# A long fuzz run: the property tests of the replayer/engine (stitch test/hostile.test.ts)
# and of buggy outside policies (stitch test/policy-guard.test.ts), the CLI end to end
# (apps/cli test/fuzz.test.ts), the snapshot reader (torch-trace test/fuzz.test.ts), then the
# full fault sweep and a random-fault soak, then the coverage-guided fuzzers of the reader and
# the replay path (apps/cli/fuzz/engine.mjs) and of generated outside policies
# (apps/cli/fuzz/policy-target.mjs).
#
#   bash scripts/fuzz-long.sh [CASES] [SEED]
#   bash scripts/fuzz-long.sh --coverage-only [EXECUTIONS] [SEED]
#   bash scripts/fuzz-long.sh --policies-only [EXECUTIONS] [SEED]
#
# --policies-only: the outside-policy fuzzer alone: a coverage-guided run of
# FUZZ_GUIDED_SECONDS (default 600) that builds its corpus (FUZZ_POLICY_CORPUS, default
# .fuzz-corpus/policies), then EXECUTIONS (default 1,000,000) uninstrumented executions
# mutating that corpus (about 3x faster); every kind of finding is written once to
# .fuzz-findings/ and counted (--keep-going), and the exit status is 1 if there was any.
#
# CASES: cases per property (default 20000; the CI run uses 800-2500). SEED: the
# fast-check seed and the coverage fuzzer's (default: the current time, printed, so a
# failure can be replayed with the same CASES and SEED). EXECUTIONS: the coverage
# fuzzer's (default 2,000,000, at most FUZZ_MAX_SECONDS, default 3600); its corpus is
# kept in FUZZ_CORPUS (default .fuzz-corpus/, ignored by git) so runs build on each
# other, its findings go to .fuzz-findings/. Needs a build first: pnpm build.
set -euo pipefail
cd "$(dirname "$0")/.."
coverage() {
  mkdir -p "${FUZZ_CORPUS:-.fuzz-corpus}"
  echo "fuzz-long: coverage-guided, $1 executions at most ${FUZZ_MAX_SECONDS:-3600} s, seed $2, $(date -u +%FT%TZ)"
  node apps/cli/fuzz/engine.mjs --runs "$1" --max-seconds "${FUZZ_MAX_SECONDS:-3600}" --seed "$2" \
    --corpus "${FUZZ_CORPUS:-.fuzz-corpus}" --findings .fuzz-findings
}
policies() {
  local corpus="${FUZZ_POLICY_CORPUS:-.fuzz-corpus/policies}" rc=0
  mkdir -p "$corpus"
  echo "fuzz-long: outside policies, guided ${FUZZ_GUIDED_SECONDS:-600} s then $1 executions, seed $2, $(date -u +%FT%TZ)"
  node apps/cli/fuzz/engine.mjs --target policy-target.mjs --max-seconds "${FUZZ_GUIDED_SECONDS:-600}" --seed "$2" \
    --corpus "$corpus" --findings .fuzz-findings --keep-going --quiet || rc=1
  FUZZ_NO_COVERAGE=1 node apps/cli/fuzz/engine.mjs --target policy-target.mjs --runs "$1" --max-seconds "${FUZZ_MAX_SECONDS:-3600}" \
    --seed "$2" --corpus "$corpus" --findings .fuzz-findings --keep-going --quiet || rc=1
  return $rc
}
if [ "${1:-}" = "--policies-only" ]; then
  policies "${2:-1000000}" "${3:-$(date +%s)}"
  exit $?
fi
if [ "${1:-}" = "--coverage-only" ]; then
  coverage "${2:-2000000}" "${3:-$(date +%s)}"
  exit 0
fi
CASES="${1:-20000}"
SEED="${2:-$(date +%s)}"
export FUZZ_RUNS="$CASES" FUZZ_SEED="$SEED" FUZZ_SPAWNS="${FUZZ_SPAWNS:-64}"
echo "fuzz-long: $CASES cases per property, seed $SEED, $(date -u +%FT%TZ), $(nproc) cores"
t0=$(date +%s)
# stitch: 2 properties x 4 policies; cli: 2 properties (+ FUZZ_SPAWNS spawned processes); reader: its own set
(cd packages/stitch && pnpm vitest run test/hostile.test.ts test/policy-guard.test.ts --testTimeout=0)
(cd apps/cli && pnpm vitest run test/fuzz.test.ts --testTimeout=0)
if [ -f packages/torch-trace/test/fuzz.test.ts ]; then
  (cd packages/torch-trace && pnpm vitest run test/fuzz.test.ts --testTimeout=0)
fi
# every policy x call site x up to 40 ordinals per workload (sim), then release-side faults
(cd packages/stitch && node bench/fault-sweep.mjs --per-call 40)
(cd packages/stitch && node bench/fault-sweep.mjs --per-call 12 --release-side)
total=$((CASES * 8 + CASES * 2 + FUZZ_SPAWNS))
echo "fuzz-long: done in $(( $(date +%s) - t0 )) s; stitch + cli cases: $total (seed $SEED); reader cases as its test printed"
coverage "${FUZZ_EXECUTIONS:-2000000}" "$SEED"
policies "${FUZZ_POLICY_EXECUTIONS:-1000000}" "$SEED"
