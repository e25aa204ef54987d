#!/usr/bin/env python3
"""Prebuilt kernel objects: compile csrc/kernels/*.cu on one machine, link them on another.

The kernels (csrc/kernels, csrc/engine) include no torch or Python header, so an object of theirs
depends only on its sources, nvcc's release, the nvcc flags and the architectures, not on the torch
or Python it is linked with. Their compilation is nearly all of a build (a GPU machine with 16
cores spends ~200 s of a ~210 s build on them), so they can be compiled once on a machine with nvcc
and no GPU and carried, xz-compressed (a few MB for one architecture), to the machine that runs
them. There the build compiles only the torch bindings (csrc/ops/*.cpp) and links:

    python3 scripts/kernel_objects.py build --arch 9.0a      # here: .kobj/ (incremental)
    CUPIPE_KERNEL_OBJECTS=.kobj pip install --no-build-isolation -e .   # there

setup.py links an object only if its key matches the tree being built, and compiles from source
every .cu whose key does not (or that .kobj lacks), so a stale or partial .kobj makes a build
slower, never different. The key of an object is a SHA-256 over nvcc's release (major.minor), the
exact nvcc flags a source build would use (torch's common flags, the architecture flags, the
project's flags), and the path and bytes of the .cu and of every project header it includes,
transitively. The host compiler is not in the key (objects of any GCC with the C++11 string ABI
link together); `status` and the manifest name the one that built them.

This file is imported by setup.py (the flags and the key live here, once) and is a command:
    build   compile what is missing or stale into .kobj/ (parallel, --jobs)
    status  say which objects match the current tree
"""
from __future__ import annotations

import argparse
import concurrent.futures as futures
import hashlib
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parent.parent
FORMAT = 1
MANIFEST = "manifest.json"

# The project's own nvcc flags (setup.py adds the include dir, the define and torch's flags).
NVCC_FLAGS = [
    "-O3",
    "-std=c++17",
    "--expt-relaxed-constexpr",
    "-Xptxas=-warn-spills",
    # torch adds the __CUDA_NO_HALF*__ defines to every nvcc command; the kernels need the half
    # operators back.
    "-U__CUDA_NO_HALF_OPERATORS__",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-U__CUDA_NO_HALF2_OPERATORS__",
]
DEFINES = ["-DCUPIPE_WITH_CUDA=1"]


def nvcc_flags(debug: bool = False) -> List[str]:
    """The project's nvcc flags (setup.py's extra_compile_args["nvcc"])."""
    return NVCC_FLAGS + (["-lineinfo"] if debug else [])


def arch_flags(arch_list: str) -> List[str]:
    """The -gencode flags for a TORCH_CUDA_ARCH_LIST string, as torch's build derives them:
    "9.0" -> sm_90 code, "9.0a" -> sm_90a, "+PTX" adds that architecture's PTX; ';' or ' '
    separate entries. Sorted and de-duplicated like torch's."""
    flags = set()
    for entry in re.split(r"[;\s]+", arch_list.strip()):
        if not entry:
            continue
        ptx = entry.endswith("+PTX")
        arch = entry[: -len("+PTX")] if ptx else entry
        m = re.fullmatch(r"(\d+)\.(\d+)([af]?)", arch)
        if m is None:
            raise ValueError(f"TORCH_CUDA_ARCH_LIST: cannot read architecture {entry!r}")
        num = m.group(1) + m.group(2) + m.group(3)
        flags.add(f"-gencode=arch=compute_{num},code=sm_{num}")
        if ptx:
            flags.add(f"-gencode=arch=compute_{num},code=compute_{num}")
    if not flags:
        raise ValueError("TORCH_CUDA_ARCH_LIST is empty")
    return sorted(flags)


def torch_nvcc_flags() -> List[str]:
    """torch's flags for every nvcc command of an extension (torch.utils.cpp_extension's
    COMMON_NVCC_FLAGS), which precede the project's."""
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS

    return list(COMMON_NVCC_FLAGS)


def compile_flags(arch_list: str, debug: bool = False) -> List[str]:
    """Every flag of a kernel's nvcc command but the include dir, the input and the output, in
    the order torch's build writes them (its common flags, the architectures, -fPIC, ours)."""
    return (torch_nvcc_flags() + arch_flags(arch_list) + ["--compiler-options", "-fPIC"]
            + DEFINES + nvcc_flags(debug))


def nvcc_path() -> str:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    cand = Path(home) / "bin" / "nvcc"
    return str(cand) if cand.exists() else (shutil.which("nvcc") or "nvcc")


def nvcc_version(nvcc: Optional[str] = None) -> str:
    """nvcc's full version ("13.0.88"), or "" when there is no nvcc."""
    try:
        out = subprocess.run([nvcc or nvcc_path(), "--version"], capture_output=True, text=True).stdout
    except OSError:
        return ""
    m = re.search(r"\bV(\d+\.\d+\.\d+)", out)
    return m.group(1) if m else ""


def release(version: str) -> str:
    """"13.0.88" -> "13.0": objects of one release link and run together."""
    return ".".join(version.split(".")[:2])


_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def project_deps(src: Path, root: Path = ROOT) -> List[Path]:
    """``src`` and every project file it includes with quotes, transitively, resolved like nvcc
    with ``-I csrc``: beside the including file first, then under csrc/. Includes that resolve to
    neither (none in the project) are not the project's and are left out. Sorted, relative to
    ``root``."""
    csrc = root / "csrc"
    seen: Dict[Path, None] = {}
    todo = [src.resolve()]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen[f] = None
        for name in _INCLUDE.findall(f.read_text(errors="replace")):
            for base in (f.parent, csrc):
                cand = (base / name).resolve()
                if cand.is_file():
                    todo.append(cand)
                    break
    return sorted(p.relative_to(root) for p in seen)


def object_key(src: Path, flags: Sequence[str], nvcc_release: str, root: Path = ROOT) -> str:
    """The key of ``src``'s object: see the module's docstring."""
    h = hashlib.sha256()
    h.update(f"cupipe kernel object {FORMAT}\0nvcc {nvcc_release}\0".encode())
    h.update(("\0".join(flags) + "\0").encode())
    for rel in project_deps(src, root):
        data = (root / rel).read_bytes()
        h.update(f"{rel.as_posix()}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def kernel_sources(root: Path = ROOT) -> List[Path]:
    return sorted((root / "csrc" / "kernels").glob("*.cu"))


def load_manifest(kdir: Path) -> dict:
    """The manifest of ``kdir``, or an empty one (missing, unreadable or another format)."""
    try:
        m = json.loads((kdir / MANIFEST).read_text())
    except (OSError, ValueError):
        return {"format": FORMAT, "objects": {}}
    if not isinstance(m, dict) or m.get("format") != FORMAT or not isinstance(m.get("objects"), dict):
        return {"format": FORMAT, "objects": {}}
    return m


def match(kdir: Path, sources: Iterable[Path], flags: Sequence[str], nvcc_release: str,
          root: Path = ROOT) -> Tuple[Dict[Path, Path], List[Path]]:
    """({source: its compressed object in ``kdir``} for the sources whose stored key equals
    their key for this tree and flags, [the other sources])."""
    objects = load_manifest(kdir)["objects"]
    found, rest = {}, []
    for src in sources:
        rel = src.resolve().relative_to(root).as_posix()
        e = objects.get(rel)
        obj = kdir / e["object"] if isinstance(e, dict) and isinstance(e.get("object"), str) else None
        if obj is not None and obj.is_file() and e.get("key") == object_key(src, flags, nvcc_release, root):
            found[src] = obj
        else:
            rest.append(src)
    return found, rest


def unpack(objs: Dict[Path, Path], dest: Path) -> List[str]:
    """Decompress the matched objects into ``dest`` (one .o per source); their paths."""
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for src, xz in sorted(objs.items()):
        o = dest / (src.stem + ".prebuilt.o")
        data = lzma.decompress(xz.read_bytes())
        if not o.exists() or o.read_bytes() != data:  # unchanged objects keep their mtime
            o.write_bytes(data)
        out.append(str(o))
    return out


# ----------------------------------------------------------------------------- the command

def _compile_one(src: Path, flags: List[str], nvcc: str, out_xz: Path) -> Tuple[Path, float, str]:
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        obj = Path(tmp) / (src.stem + ".o")
        cmd = [nvcc, f"-I{ROOT / 'csrc'}", "-c", str(src), "-o", str(obj)] + flags
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"nvcc failed on {src.relative_to(ROOT)}:\n{p.stderr[-4000:]}")
        tmp_xz = out_xz.with_suffix(".tmp")
        tmp_xz.write_bytes(lzma.compress(obj.read_bytes(), preset=9))
        os.replace(tmp_xz, out_xz)
    return src, time.time() - t0, p.stderr


def _host_compiler() -> str:
    cc = os.environ.get("CC") or "gcc"
    try:
        return subprocess.run([cc, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    except (OSError, IndexError):
        return cc


def build(kdir: Path, arch_list: str, jobs: int, debug: bool = False) -> int:
    nvcc = nvcc_path()
    version = nvcc_version(nvcc)
    if not version:
        print(f"kernel_objects: no nvcc at {nvcc}", file=sys.stderr)
        return 2
    flags = compile_flags(arch_list, debug)
    kdir.mkdir(parents=True, exist_ok=True)
    manifest = load_manifest(kdir)
    sources = kernel_sources()
    keys = {s: object_key(s, flags, release(version)) for s in sources}
    _, todo = match(kdir, sources, flags, release(version))
    print(f"kernel_objects: {len(sources) - len(todo)} of {len(sources)} objects current; "
          f"compiling {len(todo)} for {arch_list} with nvcc {version}, {jobs} at a time")
    objects = {k: v for k, v in manifest["objects"].items()
               if (ROOT / k).is_file()}  # sources that were removed leave the manifest
    failed = 0
    t_all = time.time()
    with futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        # Longest first (the stencil and reduction files take minutes, the others seconds): by
        # the bytes of source each one compiles.
        order = sorted(todo, key=lambda s: -sum((ROOT / d).stat().st_size for d in project_deps(s)))
        pending = {pool.submit(_compile_one, s, flags, nvcc, kdir / (s.stem + ".o.xz")): s for s in order}
        for fut in futures.as_completed(pending):
            src = pending[fut]
            rel = src.relative_to(ROOT).as_posix()
            try:
                _, secs, log = fut.result()
            except RuntimeError as e:
                print(e, file=sys.stderr)
                objects.pop(rel, None)
                failed += 1
                continue
            spills = log.count("Registers are spilled")
            objects[rel] = {"key": keys[src], "object": src.stem + ".o.xz", "seconds": round(secs, 1)}
            print(f"  {rel}: {secs:.0f} s{f' ({spills} spill warnings)' if spills else ''}")
            manifest["objects"] = objects
            _write_manifest(kdir, manifest, arch_list, version)  # progress survives an interrupt
    manifest["objects"] = objects  # also when nothing compiled: removed sources leave it
    _write_manifest(kdir, manifest, arch_list, version)
    for stale in set(p.name for p in kdir.glob("*.o.xz")) - {e["object"] for e in objects.values()}:
        (kdir / stale).unlink()
    size = sum(p.stat().st_size for p in kdir.glob("*.o.xz"))
    print(f"kernel_objects: {len(objects)} objects in {kdir} ({size / 2**20:.1f} MiB), "
          f"{time.time() - t_all:.0f} s; {failed} failed")
    return 1 if failed else 0


def _write_manifest(kdir: Path, manifest: dict, arch_list: str, version: str) -> None:
    m = dict(manifest, format=FORMAT, arch_list=arch_list, nvcc=version, host_compiler=_host_compiler())
    tmp = kdir / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(m, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, kdir / MANIFEST)


def status(kdir: Path, arch_list: Optional[str], debug: bool = False) -> int:
    m = load_manifest(kdir)
    arch_list = arch_list or m.get("arch_list")
    if not arch_list:
        print(f"kernel_objects: nothing in {kdir}")
        return 1
    version = nvcc_version()
    flags = compile_flags(arch_list, debug)
    found, rest = match(kdir, kernel_sources(), flags, release(version or m.get("nvcc", "")))
    print(f"kernel_objects: {kdir}: built for {m.get('arch_list')} by nvcc {m.get('nvcc')} "
          f"({m.get('host_compiler')}); for {arch_list} and this tree {len(found)} match, "
          f"{len(rest)} would compile: {' '.join(s.name for s in rest) or '-'}")
    return 0 if not rest else 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=["build", "status"])
    ap.add_argument("--out", type=Path, default=ROOT / ".kobj", help="the objects' folder (.kobj)")
    ap.add_argument("--arch", default=None,
                    help="TORCH_CUDA_ARCH_LIST to compile for (default: $TORCH_CUDA_ARCH_LIST, else 9.0a)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--debug", action="store_true", help="the CUPIPE_DEBUG=1 flags (-lineinfo)")
    a = ap.parse_args(argv)
    if a.command == "build":
        arch = a.arch or os.environ.get("TORCH_CUDA_ARCH_LIST") or "9.0a"
        return build(a.out, arch, a.jobs, a.debug)
    return status(a.out, a.arch, a.debug)


if __name__ == "__main__":
    sys.exit(main())
