"""The build's configuration, shared by setup.py and tools/kernel_objects.py: the project's nvcc
flags, the TORCH_CUDA_ARCH_LIST parser, and the key of a prebuilt kernel object.

The kernels (csrc/kernels, csrc/engine) include no torch or Python header, so an object of theirs
depends only on its sources, nvcc's release, the nvcc flags and the architectures. setup.py links
a prebuilt object (CUPIPE_KERNEL_OBJECTS=DIR, built by tools/kernel_objects.py) only if its key
matches the tree being built and compiles every other .cu from source, so a stale or partial
folder makes a build slower, never different. The key of an object is a SHA-256 over nvcc's
release (major.minor), the exact nvcc flags a source build would use (torch's common flags, the
architecture flags, the project's flags), and the path and bytes of the .cu and of every project
header it includes, transitively. The host compiler is not in the key (objects of any GCC with the
C++11 string ABI link together).

Standard library only (torch is imported lazily by torch_nvcc_flags), so setup.py can load it
before anything else.
"""
from __future__ import annotations

import hashlib
import json
import lzma
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parent
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
