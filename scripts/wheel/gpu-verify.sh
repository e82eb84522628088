#!/usr/bin/env bash
# On the GPU host, the wheel as a user installs it and a job switched to ours by the
# environment alone.
#   here:   bash scripts/wheel/build.sh                    (build/wheel/gmlake_torch-*.whl)
#   there:  `run` with carry ["build/wheel"]: bash scripts/wheel/gpu-verify.sh
# 1. a venv over the image's python (--system-site-packages: its torch; --without-pip: the
#    image's own pip installs into it), `pip install --no-index` the wheel; where no venv can
#    be made (or INSTALL=user), `pip install --user` into a PYTHONUSERBASE of its own, a site
#    dir too, so the .pth hook runs there the same way;
# 2. python -m gmlake_torch info, check --driver cuda;
# 3. GMLAKE_POLICY=vms python scripts/wheel/train_check.py (nothing of ours in the script);
# 4. the same under torchrun (python -m torch.distributed.run --nproc-per-node 1);
# 5. the same with no GMLAKE_POLICY: PyTorch's own allocator, the control.
# Each job prints torch.cuda.memory_summary() and RESULT {json}; logs go to $OUT (or
# gpu-verify-out/ at the root). Fails unless 3 and 4 ran on ours with torch.cuda's figures equal to the
# engine's and 5 on PyTorch's.
#   knobs: PYTHON (default python3), STEPS (default 6), POLICY (default vms); for the CPU test
#   (test_gpu_verify.py, a stand-in torch): WHEEL, TRAIN_SCRIPT, CHECK_DRIVER (default cuda)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$root/gpu-verify-out}
mkdir -p "$out"
python=${PYTHON:-python3}
policy=${POLICY:-vms}
fail() {
  echo "gpu-verify FAILED: $*" >&2
  exit 1
}
train=${TRAIN_SCRIPT:-$root/scripts/wheel/train_check.py}
shopt -s nullglob
whls=("$root"/build/wheel/gmlake_torch-*.whl)
[ -n "${WHEEL:-}" ] && whls=("$WHEEL")
[ "${#whls[@]}" = 1 ] || fail "expected one build/wheel/gmlake_torch-*.whl (bash scripts/wheel/build.sh here, carry build/wheel), found ${#whls[@]}"
whl=${whls[0]}
venv=$(mktemp -d "${TMPDIR:-/tmp}/gmlake-venv.XXXXXX")
trap 'rm -rf "$venv"' EXIT
"$python" -m pip --version >/dev/null 2>&1 || fail "$python has no pip ($python -m pip)"

echo "== install $(basename "$whl") ($(du -h "$whl" | cut -f1)) over $("$python" -c 'import sys, torch; print(sys.executable, "torch", torch.__version__)')"
pip_flags=(--no-index --no-deps --disable-pip-version-check)
if [ "${INSTALL:-venv}" = venv ] && "$python" -m venv --system-site-packages --without-pip "$venv/env" 2>"$out/venv.log"; then
  py="$venv/env/bin/python"
  echo "into a venv with the system's site-packages: $venv/env"
  # A python that is a venv itself (the GPU host's image is one) shares only its base's
  # site-packages with a venv made from it: its own (torch) are added by a .pth line.
  "$python" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' &&
    "$python" -c 'import site; print("\n".join(site.getsitepackages()))' >"$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_gmlake_outer_venv.pth"
else
  [ "${INSTALL:-venv}" = venv ] && echo "no venv ($(tail -1 "$out/venv.log")): pip install --user into a PYTHONUSERBASE of its own"
  export PYTHONUSERBASE="$venv/user"
  py=$python
  pip_flags+=(--user)
  # a distribution's python may refuse --user installs (PEP 668): this user base is ours alone
  if "$python" -m pip install --help 2>/dev/null | grep -q -- --break-system-packages; then pip_flags+=(--break-system-packages); fi
fi
"$py" -m pip install "${pip_flags[@]}" "$whl" >"$out/pip.log" 2>&1 || { cat "$out/pip.log" >&2; fail "pip install"; }
tail -1 "$out/pip.log"
"$py" -m gmlake_torch info | tee "$out/info.txt"
# the engine alone, no torch (a failure is reported at the end: the jobs still run)
checked=1
"$py" -m gmlake_torch check --driver "${CHECK_DRIVER:-cuda}" 2>&1 | tee "$out/check.json"
grep -q '"ok": true' "$out/check.json" || checked=0

job() {  # job NAME [env VAR=...] CMD...: runs one job, keeps its log, prints its RESULT
  local name=$1
  shift
  echo "== $name: $*"
  local rc=0
  (cd "$out" && env STEPS="${STEPS:-6}" "$@") >"$out/$name.log" 2>&1 || rc=$?
  [ "$rc" = 0 ] || { tail -30 "$out/$name.log" >&2; fail "$name exited $rc"; }
  grep -A60 "memory summary" "$out/$name.log" | grep -v 'RESULT {' | head -30 || true
  grep 'RESULT {' "$out/$name.log" | tail -1 | tee "$out/$name.result"
}
check_result() {  # check_result NAME ALLOCATOR: the job's RESULT ran on ALLOCATOR (ours: torch's figures = the engine's)
  "$py" - "$out/$1.result" "$2" <<'EOF' || fail "$1: see $out/$1.log"
import json, sys
r = json.loads(open(sys.argv[1]).read().split("RESULT ", 1)[1])
want = sys.argv[2]
if r["allocator"] != want:
    sys.exit(f"ran on {r['allocator']}, expected {want}")
if want != "pytorch" and not r.get("equal"):
    sys.exit(f"torch.cuda's figures differ from the engine's: {r}")
print(f"{want}: max_memory_allocated {r['max_memory_allocated'] / 2**30:.3f} GiB, max_memory_reserved "
      f"{r['max_memory_reserved'] / 2**30:.3f} GiB" + (", equal to the engine's" if want != "pytorch" else ""))
EOF
}
job env-var env GMLAKE_POLICY="$policy" "$py" "$train"
check_result env-var "gmlake:$policy"
job torchrun env GMLAKE_POLICY="$policy" "$py" -m torch.distributed.run --nproc-per-node 1 "$train"
check_result torchrun "gmlake:$policy"
job pytorch env -u GMLAKE_POLICY "$py" "$train"
check_result pytorch pytorch
[ "$checked" = 1 ] || fail "python -m gmlake_torch check --driver ${CHECK_DRIVER:-cuda} (the jobs passed): $out/check.json"
echo "gpu-verify: passed (logs in $out)"
