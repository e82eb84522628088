#!/usr/bin/env python3
"""gpu-verify.sh on CPU: the wheel installed into a venv over this python, test/python_api.py's
stand-in torch on PYTHONPATH (its torchrun runs one worker), the engine on the host driver, and
in place of the GPT-2 job a script that allocates through PyTorch's function pointers and then
calls train_check.report (the RESULT the real job prints). It must pass with ours under
GMLAKE_POLICY (alone and under torchrun) and PyTorch's without, installed into a venv and with
pip --user (INSTALL=user); and fail when the figures torch.cuda answers are not the engine's
(a stand-in report that lies about one).

  usage: python3 scripts/wheel/test_gpu_verify.py WHEEL
"""
import importlib.util
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))

JOB = """
import sys, torch
sys.path.insert(0, {here!r})
import train_check
torch.cuda.first_tensor()  # CUDA's first use: where GMLAKE_POLICY's hook starts the engine
if torch.cuda.memory.swapped:
    h = torch.cuda.memory.hooks
    ps = [h["alloc"](n << 20, 0, 0) for n in (3, 5, 9)]
    h["free"](ps.pop(), 9 << 20, 0, 0)
{lie}
train_check.report("stand-in", [1.0], [0.01])
"""


def run(wheel, out, job, env):
    e = {k: v for k, v in os.environ.items() if not k.startswith("GMLAKE_") and k not in ("LOCAL_RANK", "PYTHONPATH")}
    e.update(env)
    return subprocess.run(["bash", os.path.join(HERE, "gpu-verify.sh")], env=dict(
        e, WHEEL=wheel, TRAIN_SCRIPT=job, CHECK_DRIVER="host", OUT=out, PYTHON=sys.executable, GMLAKE_DRIVER="host",
        GMLAKE_THREADING="locker"), capture_output=True, text=True, timeout=600)


def main(argv):
    if len(argv) != 1 or not argv[0].endswith(".whl"):
        print("usage: python3 scripts/wheel/test_gpu_verify.py WHEEL", file=sys.stderr)
        return 2
    wheel = os.path.abspath(argv[0])
    spec = importlib.util.spec_from_file_location("python_api", os.path.join(ROOT, "packages", "torch-alloc", "test", "python_api.py"))
    api = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(api)
    with tempfile.TemporaryDirectory() as d:
        torch_dir = api.stand_in(os.path.join(d, "stand-in"))
        for name, lie, want_rc, install in (("honest", "", 0, "venv"), ("lying", "torch.cuda.max_memory_allocated = lambda device=None: 1", 1, "venv"),
                                            ("honest-user", "", 0, "user")):
            job = os.path.join(d, f"{name}.py")
            with open(job, "w") as f:
                f.write(JOB.format(here=HERE, lie=lie))
            r = run(wheel, os.path.join(d, f"out-{name}"), job, {"PYTHONPATH": torch_dir, "INSTALL": install})
            text = r.stdout + r.stderr
            if r.returncode != want_rc:
                print(text[-4000:])
                print(f"test_gpu_verify: the {name} job: exit {r.returncode}, expected {want_rc}", file=sys.stderr)
                return 1
            if name.startswith("honest"):
                for want in ("gmlake:vms: max_memory_allocated 0.017 GiB", "equal to the engine's", "pytorch: max_memory_allocated 0.000",
                             "gmlake vms allocator memory summary", "gpu-verify: passed"):
                    if want not in text:
                        print(text[-4000:])
                        print(f"test_gpu_verify: no {want!r} in gpu-verify.sh's output", file=sys.stderr)
                        return 1
                if text.count("equal to the engine's") != 2:
                    print(f"test_gpu_verify: not both ours (env var, torchrun) equal:\n{text[-3000:]}", file=sys.stderr)
                    return 1
            elif "torch.cuda's figures differ from the engine's" not in text:
                print(f"test_gpu_verify: the lying job failed for another reason:\n{text[-3000:]}", file=sys.stderr)
                return 1
    print("test_gpu_verify: gpu-verify.sh passes on the stand-in and fails when torch's figures are not the engine's")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
