#!/usr/bin/env python3
"""Writes gmlake_torch-<version>-py3-none-manylinux_2_<N>_x86_64.whl from the built tree.

What it holds (no Node.js, compiler, apt or network needed where it installs):
  gmlake_torch/                  the Python module (packages/torch-alloc/python), no caches
  gmlake_torch/_engine/          laid out as the npm package is, so the native code's own
                                 relative paths hold: build/lib (the two libraries, stripped),
                                 build/libnode (libnode and the libraries it needs that it
                                 finds beside it, one file each under its SONAME, and the five
                                 builtin JS files libnode reads), native/boot.cjs, dist (the
                                 built JS), node_modules/@gmlake/* (the engine's packages: their
                                 package.json and built JS, no types, maps or test helpers;
                                 the vmm addon as its prebuilt package)
  gmlake_torch_autoenable.pth    imports gmlake_torch.autoenable only when GMLAKE_POLICY is set
  gmlake_torch-<v>.dist-info/    METADATA, WHEEL, entry_points.txt, RECORD

The platform tag is computed, not assumed: N is the highest GLIBC_2.N symbol version any
ELF file in the wheel needs (objdump -T). Every library a binary needs is either in the
wheel or one a glibc host has (HOST_LIBS); anything else stops the build.

  usage: python3 scripts/wheel/build.py [--out DIR] [--json]   (after `pnpm build`)
"""
import argparse
import base64
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TA = os.path.join(ROOT, "packages", "torch-alloc")
NODELIB = os.path.join(TA, "build", "libnode", "usr", "lib", "x86_64-linux-gnu")
NODESHARE = os.path.join(TA, "build", "libnode", "usr", "share", "nodejs")
# The files libnode reads at start (native/alloc_start.cc checks the same five).
BUILTINS = ("cjs-module-lexer/lexer.js", "cjs-module-lexer/dist/lexer.js", "undici/undici-fetch.js",
            "acorn/dist/acorn.js", "acorn-walk/dist/walk.js")
# Libraries a glibc x86_64 host provides (glibc's own, GCC's runtime) and three that every
# distribution with glibc >= 2.34 ships (OpenSSL 3, zlib): libnode links them, METADATA says so.
HOST_LIBS = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "ld-linux-x86-64.so.2",
             "libstdc++.so.6", "libgcc_s.so.1"}
EXTERNAL_LIBS = ("libssl.so.3", "libcrypto.so.3", "libz.so.1")
# The stitch package's helpers for policy tests: not run by the engine.
NOT_SHIPPED_JS = {"testing.js"}
PY_SOURCES = (".py", ".cc")


def fail(msg):
    print(f"wheel: {msg}", file=sys.stderr)
    sys.exit(1)


def readelf_dynamic(path):
    out = subprocess.run(["readelf", "-d", "-W", path], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    soname = re.findall(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", out)
    return needed, (soname[0] if soname else None)


def symbol_versions(path):
    """The GLIBC_ / GLIBCXX_ / CXXABI_ versions `path` refers to, from its dynamic symbols."""
    out = subprocess.run(["objdump", "-T", path], capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"\b((?:GLIBC|GLIBCXX|CXXABI)_[0-9][0-9.]*)\b", out))


def highest(versions, prefix):
    vs = [tuple(int(x) for x in v[len(prefix) + 1:].split(".")) for v in versions if v.startswith(prefix + "_")]
    return ".".join(map(str, max(vs))) if vs else None


def is_elf(path):
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def stripped_copy(src, tmp):
    """Our own binaries lose their symbol tables (Debian's come stripped already)."""
    dst = os.path.join(tmp, os.path.basename(src) + ".stripped")
    shutil.copyfile(src, dst)
    subprocess.run(["strip", "--strip-unneeded", dst], check=True)
    return dst


def manifest(pkg_dir):
    with open(os.path.join(pkg_dir, "package.json")) as f:
        return json.load(f)


def engine_packages():
    """The @gmlake packages torch-alloc runs on (dependencies, not devDependencies), found as
    node resolves them from each package, the way scripts/gpu/closure.mjs follows pnpm's links."""
    seen, order, todo = {}, [], [TA]
    while todo:
        d = todo.pop()
        for name in sorted((manifest(d).get("dependencies") or {})):
            if not name.startswith("@gmlake/") or name in seen:
                continue
            real = os.path.realpath(os.path.join(d, "node_modules", name))
            if not os.path.isfile(os.path.join(real, "package.json")):
                fail(f"{name} (a dependency of {manifest(d)['name']}) is not linked at {real}: run pnpm install")
            seen[name] = real
            order.append(name)
            todo.append(real)
    return [(n, seen[n]) for n in sorted(order)]


def built_js(pkg_dir):
    dist = os.path.join(pkg_dir, "dist")
    if not os.path.isdir(dist):
        fail(f"{dist} missing: run pnpm build")
    out = []
    for base, dirs, files in os.walk(dist):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(".js") and f not in NOT_SHIPPED_JS:
                p = os.path.join(base, f)
                out.append((os.path.relpath(p, pkg_dir), p))
    return out


def collect(tmp):
    """[(path in the wheel, file on disk)]: everything but the .dist-info."""
    files = []
    py = os.path.join(TA, "python", "gmlake_torch")
    for f in sorted(os.listdir(py)):
        if f.endswith(PY_SOURCES):
            files.append((f"gmlake_torch/{f}", os.path.join(py, f)))
    eng = "gmlake_torch/_engine"
    files.append((f"{eng}/package.json", os.path.join(TA, "package.json")))
    files.append((f"{eng}/native/boot.cjs", os.path.join(TA, "native", "boot.cjs")))
    files += [(f"{eng}/{rel}", p) for rel, p in built_js(TA)]
    for name, d in engine_packages():
        files.append((f"{eng}/node_modules/{name}/package.json", os.path.join(d, "package.json")))
        files += [(f"{eng}/node_modules/{name}/{rel}", p) for rel, p in built_js(d)]
    # the vmm addon as npm installs it: the prebuilt package the vmm loader looks for
    prebuilt = os.path.join(ROOT, "packages", "vmm-linux-x64-gnu")
    addon = os.path.join(prebuilt, "gmlake_vmm.node")
    if not os.path.isfile(addon):
        addon = os.path.join(ROOT, "packages", "vmm", "build", "Release", "gmlake_vmm.node")
    if not os.path.isfile(addon):
        fail("no vmm addon (packages/vmm-linux-x64-gnu/gmlake_vmm.node or packages/vmm/build/Release): run pnpm build")
    files.append((f"{eng}/node_modules/@gmlake/vmm-linux-x64-gnu/package.json", os.path.join(prebuilt, "package.json")))
    files.append((f"{eng}/node_modules/@gmlake/vmm-linux-x64-gnu/gmlake_vmm.node", stripped_copy(addon, tmp)))
    for lib in ("libgmlake_torch_alloc.so", "libgmlake_embed.so"):
        p = os.path.join(TA, "build", "lib", lib)
        if not os.path.isfile(p):
            fail(f"{p} missing: run pnpm --filter @gmlake/torch-alloc build")
        files.append((f"{eng}/build/lib/{lib}", stripped_copy(p, tmp)))
    # libnode and, transitively, every library it needs that lies beside it (by SONAME: a
    # wheel holds no symlinks, so each is one file under the name the loader asks for)
    libdir = f"{eng}/build/libnode/usr/lib/x86_64-linux-gnu"
    todo, bundled = ["libnode.so.108"], set()
    while todo:
        so = todo.pop()
        if so in bundled:
            continue
        p = os.path.join(NODELIB, so)
        if not os.path.exists(p):
            continue  # a host library: checked below
        bundled.add(so)
        files.append((f"{libdir}/{so}", os.path.realpath(p)))
        todo += readelf_dynamic(p)[0]
    for b in BUILTINS:
        p = os.path.join(NODESHARE, b)
        if not os.path.isfile(p):
            fail(f"{p} missing: run packages/torch-alloc/scripts/fetch-libnode.sh")
        files.append((f"{eng}/build/libnode/usr/share/nodejs/{b}", p))
    return files


def check_binaries(files):
    """Every NEEDED is in the wheel or on the host list; returns the symbol versions needed."""
    inside = {os.path.basename(arc) for arc, _ in files}
    versions, external = set(), set()
    for arc, p in files:
        if not is_elf(p):
            continue
        needed, _ = readelf_dynamic(p)
        for n in needed:
            if n in EXTERNAL_LIBS:
                external.add(n)
            elif n not in inside and n not in HOST_LIBS:
                fail(f"{arc} needs {n}, which is neither in the wheel nor a library the host provides")
        versions |= symbol_versions(p)
    return versions, sorted(external)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


# site.py runs this line at every start; it imports our hook only when GMLAKE_POLICY is set
PTH = os.path.join(TA, "python", "gmlake_torch_autoenable.pth")


def metadata(version, external, description):
    lines = [
        "Metadata-Version: 2.1",
        "Name: gmlake_torch",
        f"Version: {version}",
        "Summary: The GMLake stitching engine as PyTorch's CUDA allocator (libnode and the engine inside; GMLAKE_POLICY=vms turns it on)",
        "Home-page: https://github.com/gmlake/gmlake-ts/tree/main/packages/torch-alloc",
        "License: Apache-2.0",
        "Requires-Python: >=3.8",
        "Classifier: Operating System :: POSIX :: Linux",
        "Classifier: Programming Language :: Python :: 3",
    ]
    lines += [f"Requires-External: {lib}" for lib in external]
    lines += ["Description-Content-Type: text/markdown", "", description]
    return "\n".join(lines) + "\n"


DESCRIPTION = """\
The stitching engine of gmlake-ts as PyTorch's CUDA allocator, in PyTorch's own process
(the engine runs in an embedded Node.js that the wheel carries: nothing else to install).

    pip install gmlake_torch-*.whl
    GMLAKE_POLICY=vms python train.py            # or torchrun / accelerate launch: no code change
    python -m gmlake_torch run --policy vms train.py
    python -m gmlake_torch --help

torch.cuda.memory_stats(), max_memory_allocated(), memory_summary() and the rest answer from
the engine. Needs PyTorch >= 2.1 with CUDA, and OpenSSL 3 and zlib on the host.
"""


def build(out_dir):
    version = manifest(TA)["version"]
    with tempfile.TemporaryDirectory() as tmp:
        files = collect(tmp)
        arcs = [a for a, _ in files]
        dup = {a for a in arcs if arcs.count(a) > 1}
        if dup:
            fail(f"twice in the wheel: {sorted(dup)}")
        versions, external = check_binaries(files)
        glibc = highest(versions, "GLIBC")
        major, minor = glibc.split(".")[:2]
        tag = f"py3-none-manylinux_{major}_{minor}_x86_64"
        name = f"gmlake_torch-{version}-{tag}.whl"
        info = f"gmlake_torch-{version}.dist-info"
        extra = {
            "gmlake_torch_autoenable.pth": read(PTH),
            f"{info}/METADATA": metadata(version, external, DESCRIPTION).encode(),
            f"{info}/WHEEL": (f"Wheel-Version: 1.0\nGenerator: gmlake scripts/wheel/build.py\nRoot-Is-Purelib: false\nTag: {tag}\n").encode(),
            f"{info}/entry_points.txt": b"[console_scripts]\ngmlake-torch = gmlake_torch.cli:main\n",
        }
        os.makedirs(out_dir, exist_ok=True)
        for old in os.listdir(out_dir):
            if old.startswith("gmlake_torch-") and old.endswith(".whl"):
                os.remove(os.path.join(out_dir, old))
        path = os.path.join(out_dir, name)
        record = io.StringIO()
        tmp_path = path + ".tmp"
        unpacked = 0
        with zipfile.ZipFile(tmp_path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
            def put(arc, data, mode=0o644):
                nonlocal unpacked
                zi = zipfile.ZipInfo(arc, date_time=(2020, 1, 1, 0, 0, 0))  # the same bytes from the same tree
                zi.compress_type = zipfile.ZIP_DEFLATED
                zi.external_attr = (0o100000 | mode) << 16
                z.writestr(zi, data, compresslevel=9)
                record.write(f"{arc},{record_hash(data)},{len(data)}\n")
                unpacked += len(data)

            for arc, p in sorted(files):
                put(arc, read(p), 0o755 if is_elf(p) else 0o644)
            for arc in sorted(extra):
                put(arc, extra[arc])
            record.write(f"{info}/RECORD,,\n")
            z.writestr(zipfile.ZipInfo(f"{info}/RECORD", date_time=(2020, 1, 1, 0, 0, 0)), record.getvalue(),
                       compress_type=zipfile.ZIP_DEFLATED)
        os.replace(tmp_path, path)
    return {
        "wheel": path, "name": name, "version": version, "tag": tag, "bytes": os.path.getsize(path),
        "unpacked_bytes": unpacked, "files": len(files) + len(extra) + 1, "glibc": glibc,
        "glibcxx": highest(versions, "GLIBCXX"), "cxxabi": highest(versions, "CXXABI"), "external": external,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(prog="scripts/wheel/build.py", description="Builds the gmlake_torch wheel from the built tree.")
    ap.add_argument("--out", default=os.path.join(ROOT, "build", "wheel"), help="folder for the .whl (default build/wheel)")
    ap.add_argument("--json", action="store_true", help="print what was built as one JSON line")
    args = ap.parse_args(argv)
    for tool in ("readelf", "objdump", "strip"):
        if shutil.which(tool) is None:
            fail(f"needs {tool} (binutils)")
    r = build(os.path.abspath(args.out))
    if args.json:
        print(json.dumps(r))
    else:
        print(f"{r['wheel']}\n  {r['bytes'] / 1048576:.1f} MiB ({r['unpacked_bytes'] / 1048576:.1f} MiB unpacked, {r['files']} files); "
              f"tag {r['tag']} (GLIBC {r['glibc']}, GLIBCXX {r['glibcxx']}, CXXABI {r['cxxabi']}); "
              f"from the host: {', '.join(r['external'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
