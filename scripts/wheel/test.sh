#!/usr/bin/env bash
# The wheel as a user gets it: built here, checked on its own terms (check_wheel.py: RECORD,
# tags, no leftovers or duplicates, the glibc tag read back with readelf), installed with pip (--no-index) into a fresh venv
# (python3 -m venv: Debian's python3-venv) in a temp folder, then run from outside the source
# tree with neither node nor a compiler on PATH:
#   1. `python -m gmlake_torch --help` exits 0, `info` finds the library, libnode and the hook;
#   2. `python -m gmlake_torch check`: the engine starts, allocates and frees (host driver),
#      nothing leaked;
#   3. packages/torch-alloc/test/python_api.py against the installed copy (GMLAKE_TEST_INSTALLED=1:
#      the venv's own .pth line, a stand-in torch; memory_stats() & co, GMLAKE_POLICY, the CLI);
#   4. pip uninstall takes the .pth line away with the module;
#   5. scripts/wheel/gpu-verify.sh (the lead's GPU command) on a stand-in torch (test_gpu_verify.py).
# The folder is removed at exit.  usage: bash scripts/wheel/test.sh [--no-build]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
fail() {
  echo "wheel test FAILED: $*" >&2
  exit 1
}
started=$SECONDS
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gmlake-wheel.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM HUP

bash "$root/scripts/wheel/build.sh" "$@" --out "$tmp/dist" --json >"$tmp/build.json"
whl=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["wheel"])' "$tmp/build.json")
python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print("%s: %.1f MiB, GLIBC %s, GLIBCXX %s" % (r["name"], r["bytes"] / 1048576, r["glibc"], r["glibcxx"]))' "$tmp/build.json"

python3 "$root/scripts/wheel/check_wheel.py" "$whl" || fail "check_wheel.py"

# Debian's python3 where there is one (its python3-venv), else the python3 on PATH.
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
"$py" -m venv "$tmp/venv" || fail "python3 -m venv (apt-get install python3-venv)"
# A PATH with the venv, a shell and a few tools: no node, no compiler, no source tree.
mkdir -p "$tmp/bin"
for t in sh bash env cat cp cut du grep rm tee; do ln -s "$(command -v "$t")" "$tmp/bin/$t"; done
full_path=$PATH
export PATH="$tmp/venv/bin:$tmp/bin"
unset PYTHONPATH NODE_PATH
for t in node npm g++ gcc cc cmake; do
  if command -v "$t" >/dev/null; then fail "$t is on the restricted PATH"; fi
done
cd "$tmp"
pip install --no-index --no-deps --disable-pip-version-check -q "$whl" >pip.log 2>&1 || { cat pip.log >&2; fail "pip install $whl"; }
site=$(python -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
[ -f "$site/gmlake_torch_autoenable.pth" ] || fail "no gmlake_torch_autoenable.pth in $site"
where=$(python -c 'import gmlake_torch, os; print(os.path.dirname(gmlake_torch.__file__))')
[ "$where" = "$site/gmlake_torch" ] || fail "gmlake_torch imported from $where, not the venv"
echo "installed in $site ($(du -sh "$site/gmlake_torch" | cut -f1))"

python -m gmlake_torch --help >help.out || fail "python -m gmlake_torch --help exited $?"
grep -q "run" help.out || fail "--help lists no run"
python -m gmlake_torch info | tee info.out
grep -q "^library .*(present)" info.out && grep -q "^libnode .*(present)" info.out && grep -q "^hook .*(installed)" info.out ||
  fail "info: a part is missing"
python -m gmlake_torch check | tee check.out
grep -q '"ok": true' check.out || fail "check"
gmlake-torch --version | grep -q "gmlake_torch $(python -c 'import json, sys; print(json.load(open(sys.argv[1]))["version"])' "$tmp/build.json")" ||
  fail "gmlake-torch --version"

cp "$root/packages/torch-alloc/test/python_api.py" "$tmp/python_api.py"
GMLAKE_TEST_INSTALLED=1 python "$tmp/python_api.py" || fail "python_api.py against the installed copy"
# the CPU harness's cases that need nothing of the source tree, against the installed copy (host driver)
cp "$root/packages/torch-alloc/test/harness.py" "$tmp/harness.py"
GMLAKE_TEST_INSTALLED=1 python "$tmp/harness.py" stress:caching:locker stress:vms:thread stress:vms:locker stress:vms-tight:locker \
  oom budget:vms bad-free front-cache-fuzz pools:vms restart >harness.out 2>&1 || { cat harness.out >&2; fail "the harness against the installed copy"; }
echo "harness against the installed copy: $(python -c 'import sys; print(open(sys.argv[1]).read().splitlines()[-1])' harness.out)"

pip uninstall -y -q gmlake_torch >/dev/null 2>&1 || fail "pip uninstall"
[ ! -e "$site/gmlake_torch_autoenable.pth" ] && [ ! -e "$site/gmlake_torch" ] || fail "pip uninstall left files behind"
PATH="$full_path" "$py" "$root/scripts/wheel/test_gpu_verify.py" "$whl" || fail "gpu-verify.sh on the stand-in torch"
echo "wheel test: passed in $((SECONDS - started)) s"
