"""First-use compilation of kernel instances, and their disk cache.

The build compiles the instances the tuning table can choose (cupipe/_kernels.py); any other one
(an explicit mechanism, stage count or copy width, a tuned entry) is compiled the first time a
launch asks for it: nvcc turns a one-instance file (the same text as the build's files) into a
cubin with the build's flags for the device's architecture, which is cached on disk and loaded
by the module (csrc/kernels/registry.h). Everything here but the load works without a GPU.

Cache: ``$CUPIPE_CACHE_DIR``, else ``~/.cache/cupipe`` (beside the tuning cache); one file per
instance under ``kernels/<arch>/``, named by a key over the headers the module was built
with (its ``include`` snapshot), the flags, nvcc's version, the architecture and the id. A file
ends in a trailer with the SHA-256 of its cubin: a truncated or corrupt file is rebuilt. Writers
take a lock file and rename into place, so processes compiling the same instance all succeed.
"""
from __future__ import annotations

import concurrent.futures as _futures
import fcntl
import functools
import hashlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

from . import _kernels

log = logging.getLogger("cupipe")

FORMAT = 2  # 2: keys over the instance's own sources (instance_digest), not every header
_TRAILER = b"CUPIPE-CUBIN-1\0\0"  # 16 bytes, then the SHA-256 of the cubin
_TRAILER_LEN = len(_TRAILER) + 32


class KernelCacheError(RuntimeError):
    """A kernel could not be compiled or cached (the message says why and what to do)."""


def _build_info() -> dict:
    from ._build_info import BUILD_INFO
    return BUILD_INFO


def include_dir() -> Path:
    """The headers the module was built with (setup.py's snapshot of csrc/engine and csrc/kernels)."""
    return Path(__file__).resolve().parent / "include"


def cache_dir() -> Path:
    """``$CUPIPE_CACHE_DIR``, else ``~/.cache/cupipe`` (the tuning cache's folder too)."""
    env = os.environ.get("CUPIPE_CACHE_DIR")
    return Path(env).expanduser() if env else Path(os.path.expanduser("~")) / ".cache" / "cupipe"


@functools.lru_cache(maxsize=None)
def source_digest(root: Optional[str] = None) -> str:
    """SHA-256 over the path and bytes of every header under ``root`` (default: include_dir())."""
    base = Path(root) if root else include_dir()
    h = hashlib.sha256()
    files = sorted(p for p in base.rglob("*") if p.is_file() and p.suffix in (".h", ".cuh"))
    if not files:
        raise KernelCacheError(f"cupipe: no kernel headers under {base}; reinstall cupipe (setup.py ships them)")
    for p in files:
        data = p.read_bytes()
        h.update(f"{p.relative_to(base).as_posix()}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*(.*)$", re.M)


def instance_digest(source: str, root: Optional[str] = None) -> str:
    """SHA-256 over an instance file's text and the path and bytes of every header under ``root``
    (default: include_dir()) that its quoted includes reach, transitively, each looked up beside
    its includer first and then under ``root``, as nvcc does: the sources its compile reads, so
    that a header's change recompiles only the instances that include it. An include that is not
    a plain name falls back to every header (source_digest); toolkit headers (<...>, or quoted
    but not in the snapshot) are the nvcc version's, which the key has too."""
    return _closure_digest(source, str(root) if root else str(include_dir()))


@functools.lru_cache(maxsize=None)
def _closure_digest(source: str, root: str) -> str:
    base = Path(root)
    h = hashlib.sha256(source.encode())
    seen: Dict[str, bytes] = {}
    todo = [(Path(), source)]
    while todo:
        here, text = todo.pop()
        for m in _INCLUDE.finditer(text):
            arg = m.group(1).strip()
            if arg.startswith("<"):
                continue
            name = re.match(r'"([^"]+)"', arg)
            if name is None:
                return source_digest(root)
            for rel in (here / name.group(1), Path(name.group(1))):
                path = (base / rel).resolve()
                if path.is_file() and path.is_relative_to(base.resolve()):
                    key = path.relative_to(base.resolve()).as_posix()
                    if key not in seen:
                        seen[key] = path.read_bytes()
                        todo.append((Path(key).parent, seen[key].decode(errors="replace")))
                    break
            else:
                h.update(f"\0outside the snapshot: {name.group(1)}\0".encode())
    for key in sorted(seen):
        h.update(f"\0{key}\0{len(seen[key])}\0".encode())
        h.update(seen[key])
    return h.hexdigest()


def nvcc_path() -> Optional[str]:
    """nvcc: $CUPIPE_NVCC, else $CUDA_HOME/bin/nvcc, else the one on PATH, else /usr/local/cuda's."""
    env = os.environ.get("CUPIPE_NVCC")
    if env:
        return env if os.path.isfile(env) and os.access(env, os.X_OK) else None
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")):
        if home and os.path.isfile(os.path.join(home, "bin", "nvcc")):
            return os.path.join(home, "bin", "nvcc")
    found = shutil.which("nvcc")
    if found:
        return found
    cand = "/usr/local/cuda/bin/nvcc"
    return cand if os.path.isfile(cand) else None


@functools.lru_cache(maxsize=None)
def nvcc_version(nvcc: str) -> str:
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    m = re.search(r"\bV(\d+\.\d+\.\d+)", out)
    return m.group(1) if m else ""


def arch_of(sm: int) -> str:
    """The architecture a first-use compile targets on a device of compute capability ``sm``
    (10 * major + minor): ``sm_90a`` where the build's list names 9.0a, else ``sm_90``."""
    arch_list = (_build_info().get("arch_list") or "")
    major, minor = divmod(int(sm), 10)
    for entry in re.split(r"[;\s]+", arch_list):
        if entry.replace("+PTX", "") in (f"{major}.{minor}a", f"{major}.{minor}f"):
            return f"sm_{sm}{entry.replace('+PTX', '')[-1]}"
    return f"sm_{sm}"


def kernel_flags() -> List[str]:
    flags = _build_info().get("kernel_flags")
    if not flags:
        raise KernelCacheError("cupipe: this build recorded no kernel flags (a CPU-only build has no CUDA kernels)")
    return list(flags)


def kernel_key(instance_id: str, header: str, arch: str, flags: Sequence[str], nvcc_ver: str, digest: str) -> str:
    h = hashlib.sha256()
    for part in (f"cupipe kernel {FORMAT}", instance_id, header, arch, "\0".join(flags), nvcc_ver, digest):
        h.update(part.encode() + b"\0")
    return h.hexdigest()


def _gencode(arch: str) -> str:
    num = arch[len("sm_"):]
    return f"-gencode=arch=compute_{num},code=sm_{num}"


def _no_nvcc_error(instance_id: str) -> KernelCacheError:
    return KernelCacheError(
        f"cupipe: kernel {instance_id} is not built into this install and has to be compiled on first use, "
        "but there is no nvcc (looked at $CUPIPE_NVCC, $CUDA_HOME/bin, PATH and /usr/local/cuda/bin). Fixes: "
        "install the CUDA toolkit (or set CUPIPE_NVCC / CUDA_HOME); or use mechanism='auto' and stages=0, "
        "whose kernels are built in; or rebuild with CUPIPE_AOT=all to build every configuration; or copy a "
        "cache made by cupipe.precompile(...) on a machine with nvcc into $CUPIPE_CACHE_DIR.")


def _read_valid(path: Path) -> Optional[bytes]:
    """The cubin in ``path``, or None when the file is missing, truncated or corrupt."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise KernelCacheError(f"cupipe: cannot read the kernel cache file {path} ({e}); set CUPIPE_CACHE_DIR "
                               "to a readable and writable directory") from e
    if len(data) > _TRAILER_LEN and data[-_TRAILER_LEN:-32] == _TRAILER:
        cubin = data[:-_TRAILER_LEN]
        if hashlib.sha256(cubin).digest() == data[-32:]:
            return cubin
    log.warning("cupipe: kernel cache file %s is truncated or corrupt; compiling it again", path)
    return None


def _writable_dir(d: Path) -> None:
    try:
        d.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=d, prefix=".probe", delete=True)
        probe.close()
    except OSError as e:
        raise KernelCacheError(
            f"cupipe: the kernel cache directory {d} is not writable ({e.strerror or e}); set CUPIPE_CACHE_DIR to "
            "a writable directory (kernels not built into the install are compiled and cached there)") from e


def _instance_source(header: str, instance_id: str) -> str:
    """The one-instance file a first-use compile builds."""
    return _kernels.translation_unit([_kernels.Instance("", header, instance_id, "", 0, "", "")])


def _compile(inst_header: str, instance_id: str, arch: str, flags: Sequence[str], nvcc: str, out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="cupipe-kernel-") as tmp:
        src = Path(tmp) / "instance.cu"
        src.write_text(_instance_source(inst_header, instance_id))
        cubin = Path(tmp) / "instance.cubin"
        cmd = [nvcc, f"-I{include_dir()}", "-cubin", str(src), "-o", str(cubin), _gencode(arch)] + list(flags)
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0 or not cubin.is_file():
            raise KernelCacheError(f"cupipe: nvcc failed to compile kernel {instance_id} for {arch}:\n"
                                   f"{' '.join(cmd)}\n{p.stderr[-4000:]}")
        data = cubin.read_bytes()
        tmp_out = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        tmp_out.write_bytes(data + _TRAILER + hashlib.sha256(data).digest())
        os.replace(tmp_out, out)  # atomic: readers see the old file or the whole new one


def cubin(instance_id: str, header: str, arch: str, *, quiet: bool = False) -> bytes:
    """The cubin of one instance for ``arch`` (``sm_90``): from the cache, else compiled (and
    cached) now. Raises KernelCacheError with the reason and the fixes."""
    return _cubin(instance_id, header, arch, quiet)[0]


def _cache_path(instance_id: str, header: str, arch: str, nvcc_ver: str) -> Path:
    key = kernel_key(instance_id, header, arch, kernel_flags(), nvcc_ver,
                     instance_digest(_instance_source(header, instance_id)))
    return cache_dir() / "kernels" / arch / key[:2] / f"{key}.cubin"


def _cached(instance_id: str, header: str, arch: str, nvcc_versions: Iterable[str]) -> Optional[bytes]:
    """The valid cached cubin of the instance made by any of these nvcc versions, else None."""
    for ver in nvcc_versions:
        data = _read_valid(_cache_path(instance_id, header, arch, ver))
        if data is not None:
            return data
    return None


def _cubin(instance_id: str, header: str, arch: str, quiet: bool = False):
    """(cubin, whether it was compiled now)."""
    nvcc = nvcc_path()
    if nvcc is None:
        # Without nvcc a cache made elsewhere still serves: this id under any nvcc version seen.
        data = _cached(instance_id, header, arch, _versions_in_cache())
        if data is None:
            raise _no_nvcc_error(instance_id)
        return data, False
    ver = nvcc_version(nvcc) or "unknown"
    path = _cache_path(instance_id, header, arch, ver)
    data = _read_valid(path)
    if data is not None:
        return data, False
    d = path.parent
    _writable_dir(d)
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one compile per key; the others wait and read its file
        data = _read_valid(path)
        if data is not None:
            return data, False
        if not quiet:
            log.info("cupipe: compiling %s for %s on first use (cached in %s)", instance_id, arch, d)
        _compile(header, instance_id, arch, kernel_flags(), nvcc, path)
        _remember_version(ver)
        data = _read_valid(path)
    if data is None:
        raise KernelCacheError(f"cupipe: the cache file {path} was not readable right after it was written")
    return data, True


@functools.lru_cache(maxsize=None)
def _headers_by_id() -> Dict[str, str]:
    return {i.id: i.header for i in _kernels.all_instances()}


def is_cached(instance_id: str, arch: str) -> bool:
    """Whether a valid cubin of the instance for ``arch`` is in the disk cache (compiles nothing)."""
    iid = _kernels.normalize_id(instance_id)
    header = _headers_by_id().get(iid)
    if header is None or not _build_info().get("kernel_flags"):
        return False
    nvcc = nvcc_path()
    versions = [nvcc_version(nvcc) or "unknown"] if nvcc else _versions_in_cache()
    return _cached(iid, header, arch, versions) is not None


def _versions_in_cache() -> List[str]:
    try:
        return [v for v in (cache_dir() / "nvcc_versions").read_text().split() if v]
    except OSError:
        return []


def _remember_version(ver: str) -> None:
    seen = _versions_in_cache()
    if ver in seen:
        return
    try:
        tmp = cache_dir() / f".nvcc_versions.{os.getpid()}.tmp"
        tmp.write_text("\n".join(seen + [ver]) + "\n")
        os.replace(tmp, cache_dir() / "nvcc_versions")
    except OSError:
        pass  # only a hint for machines without nvcc that reuse this cache


def compile_for_device(header: str, instance_id: str, device: int) -> bytes:
    """The module's compiler hook (registry.h): the cubin of an instance for a CUDA device."""
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    return cubin(instance_id, header, arch_of(10 * major + minor))


def compile_many(instances: Sequence["_kernels.Instance"], arch: str, jobs: Optional[int] = None):
    """{id: (cubin, compiled now)} for ``instances`` and ``arch``, compiled in parallel where not cached."""
    jobs = jobs or max(1, os.cpu_count() or 1)
    todo = list(instances)
    if todo:
        log.info("cupipe: precompiling %d kernel instances for %s, %d at a time (cache: %s)",
                 len(todo), arch, jobs, cache_dir())
    out = {}
    with _futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futs = {pool.submit(_cubin, i.id, i.header, arch, True): i for i in sorted(todo, key=lambda i: -i.cost)}
        for f in _futures.as_completed(futs):
            out[futs[f].id] = f.result()
    return out


def precompile(op=None, dtype=None, mechanism=None, stages=None, *, device=None, arch: Optional[str] = None,
               jobs: Optional[int] = None, radius=None) -> Dict[str, int]:
    """Compile, in parallel, every kernel instance of these configurations that is not built into
    the module (nor cached), and load them into this process, so that no call of them compiles on
    first use: before capturing CUDA graphs, before a sweep. Each filter is one value or a list;
    None takes every value.

    op: "stream_copy", "stencil1d", "stencil2d", "stencil3d" (a stencil brings its weight gradient),
    "stencil_steps" (the fused kernels of the stencils' steps=k) or "reduce";
    dtype: torch dtypes or their names; mechanism: cupipe.MECHANISMS; stages: 1..8.
    device: the CUDA device to compile for and load on (default: the current one).
    arch: e.g. "sm_90": only fill the disk cache for that architecture (no GPU needed, nothing loaded).
    jobs: parallel nvcc processes (default: the CPU count).
    radius: stencil3d's (rz, ry, rx), or a list of them: only its kernels for those radii (its
    kernels are compiled per depth radius and in-plane class; None: every one), and only the
    stencil_steps kernels of those (ry, rx) (a 2-D stencil's radii as its kernels see them).

    Returns counts: {"instances", "ahead_of_time", "cached", "compiled", "loaded"}.
    """
    import torch

    from . import _C

    def names(v):
        if v is None:
            return None
        vs = v if isinstance(v, (list, tuple, set)) else [v]
        return [str(x).replace("torch.", "") if isinstance(x, torch.dtype) else x for x in vs]

    insts = instances_for(op, dtype=names(dtype), mechanism=names(mechanism), stages=names(stages),
                          radius=radius)
    load = arch is None
    if load:
        if not (getattr(_C, "with_cuda", False) and torch.cuda.is_available()):
            raise RuntimeError("cupipe.precompile: no CUDA device to load kernels on; pass arch='sm_90' (say) to "
                               "only fill the disk cache")
        dev = device if isinstance(device, int) else torch.device(device).index if device is not None else None
        dev = torch.cuda.current_device() if dev is None else dev
        major, minor = torch.cuda.get_device_capability(dev)
        arch = arch_of(10 * major + minor)
        built_in = {i for i in insts if _C._kernel_origin(i.id) == "ahead-of-time"}
        if not _C.cuda_device_info(dev).get("ahead_of_time_code", True):
            built_in = set()
    else:
        built_in_ids = set(getattr(_C, "_ahead_of_time_kernels", lambda: [])())
        built = {"sm_" + e.replace(".", "").replace("+PTX", "") for e in re.split(r"[;\s]+", _build_info().get("arch_list") or "") if e}
        built_in = {i for i in insts if i.id in built_in_ids} if arch in built else set()
    todo = [i for i in insts if i not in built_in]
    results = compile_many(todo, arch, jobs)
    loaded = 0
    if load:
        with torch.cuda.device(dev):
            for iid, (data, _) in results.items():
                _C._load_kernel(iid, data)
                loaded += 1
    compiled = sum(1 for _, c in results.values() if c)
    return {"instances": len(insts), "ahead_of_time": len(built_in), "cached": len(results) - compiled,
            "compiled": compiled, "loaded": loaded}


def instances_for(ops: Optional[Iterable[str]] = None, dtype=None, mechanism=None, stages=None,
                  radius=None) -> List["_kernels.Instance"]:
    """Every instance of the ops (stream_copy, stencil1d, stencil2d, stencil3d, stencil_steps, reduce;
    None: all) that matches the filters. The stencils bring their weight gradient's instances."""
    ops_set = None
    if ops is not None:
        ops_set = set()
        for op in ([ops] if isinstance(ops, str) else ops):
            if op in ("stencil1d", "stencil2d", "stencil"):
                ops_set |= {"stencil", "stencil_wgrad"}
            elif op == "stencil3d":  # a depth radius of 0 and the weight gradient run the 2-D kernels
                ops_set |= {"stencil3d", "stencil", "stencil_wgrad"}
            elif op in ("stream_copy", "reduce", "stencil_steps"):  # stencil_steps: steps=k's fused kernels
                ops_set.add(op)
            else:
                raise ValueError(f"cupipe.precompile: unknown op {op!r}; expected stream_copy, stencil1d, stencil2d, "
                                 "stencil3d, stencil_steps or reduce")
    insts = _kernels.select(_kernels.all_instances(), op=ops_set, dtype=dtype, mechanism=mechanism, stages=stages)
    if radius is not None:  # stencil3d's kernels of these (rz, ry, rx) only
        radii = [radius] if isinstance(radius[0], int) else list(radius)
        keep = {f"rz{rz}_r{_kernels.volume_radius_class(ry, rx)}" for rz, ry, rx in radii}
        keep |= {f"ry{ry}_rx{rx}" for _, ry, rx in radii}
        insts = [i for i in insts if i.op not in ("stencil3d", "stencil_steps") or i.family in keep]
    return insts
