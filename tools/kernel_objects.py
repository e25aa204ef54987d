#!/usr/bin/env python3
"""Usage: python3 tools/kernel_objects.py {build,status} [--arch 9.0a] [--out .kobj] [--jobs N] [--debug]

Prebuilt kernel objects: compile csrc/kernels/*.cu on a machine with nvcc and no GPU, link them
on the GPU machine, where the build then compiles only the torch bindings:

    python3 tools/kernel_objects.py build --arch 9.0a                  # here: .kobj/ (incremental)
    CUPIPE_KERNEL_OBJECTS=.kobj pip install --no-build-isolation -e .   # there

    build   compile what is missing or stale into .kobj/ (parallel, --jobs)
    status  say which objects match the current tree

The flags and the objects' keys live in build_config.py (repo root), which setup.py loads too.
"""
from __future__ import annotations

import argparse
import concurrent.futures as futures
import json
import lzma
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from build_config import (FORMAT, MANIFEST, ROOT, compile_flags, kernel_sources, load_manifest,  # noqa: E402
                          match, nvcc_path, nvcc_version, object_key, project_deps, release)


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
    ap = argparse.ArgumentParser(description="Compile csrc/kernels/*.cu into prebuilt kernel objects "
                                             "(CUPIPE_KERNEL_OBJECTS) or check them against the tree.")
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
