"""What ``mechanism="auto"`` / ``stages=0`` / ``vec_bytes=0`` resolve to, and an on-device
search that can replace the shipped choice with a measured one.

Two sources, in this order of precedence, for a call through the ``cupipe.*`` Python wrappers
with ``mechanism="auto"`` on a CUDA tensor:

1. the **tuning cache**: a JSON file written by :func:`tune` (``$CUPIPE_CACHE_DIR/tuning.json``,
   default ``~/.cache/cupipe/tuning.json``), keyed by (op, shape class, dtype, device name);
2. the **shipped table** compiled into the extension (``csrc/ops/tuning.cpp``; the measurements
   behind it are in docs/design.md), which is also what ``torch.ops.cupipe.*`` called directly
   always uses, and what code traced by ``torch.compile`` uses (the cache is not consulted while
   compiling).

Explicit arguments always win: the cache is consulted only when ``mechanism="auto"``; it then
fills ``stages`` and ``vec_bytes`` too, where they are 0. On the CPU the knobs are validated and
ignored, so there is nothing to resolve and nothing to tune.

The cache file is read once per process, on the first auto call on a CUDA tensor, and kept in
memory (a lookup is a dict access); :func:`tune` updates both the file and the in-memory copy.
Entries written by *other* processes afterwards are seen after :func:`reload_cache`. Writes are
atomic (a temporary file in the same directory, then ``os.replace``) and serialised across
processes by an advisory lock (``fcntl.flock`` on ``tuning.json.lock``) so that concurrent
writers merge rather than drop each other's entries. A file that does not parse, or has an
unknown format, is ignored with a warning (and replaced by the next :func:`tune`).
Set ``CUPIPE_TUNING_CACHE=0`` to ignore the cache entirely.

This module sits below ``cupipe.ops`` (whose wrappers call :func:`cached_config`) and never
imports it: :func:`explain` and :func:`tune` bind their arguments against the op schemas, and
everything the table decides, with its reasons, comes from ``cupipe._C``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import inspect
import json
import os
import tempfile
import textwrap
import threading
import warnings
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from . import _C
from .timing import time_ms

FORMAT_VERSION = 1
CACHE_FILE = "tuning.json"
OPS = tuple(_C.TUNED_OPS)                                    # the ops with an "auto" to resolve
ALL_MECHANISMS = tuple(m for m in _C.MECHANISMS if m != "auto")

_lock = threading.Lock()
_memory: Optional[Dict[str, dict]] = None     # key -> entry, loaded lazily
_memory_path: Optional[str] = None            # the file _memory was loaded from
_device_names: Dict[int, str] = {}


# ----------------------------------------------------------------------------- the cache file

def cache_dir() -> str:
    """``$CUPIPE_CACHE_DIR`` if set, else ``~/.cache/cupipe``."""
    d = os.environ.get("CUPIPE_CACHE_DIR")
    return d if d else os.path.join(os.path.expanduser("~"), ".cache", "cupipe")


def cache_path() -> str:
    """The tuning cache file: ``cache_dir()/tuning.json``."""
    return os.path.join(cache_dir(), CACHE_FILE)


def _cache_enabled() -> bool:
    return os.environ.get("CUPIPE_TUNING_CACHE", "1") not in ("0", "false", "off", "no")


def read_cache(path: Optional[str] = None, *, warn: bool = True) -> Dict[str, dict]:
    """The entries of the cache file (``{key: entry}``); ``{}`` if it does not exist. A file that
    cannot be read or parsed, or has another format version, is ignored with a warning."""
    path = path or cache_path()
    try:
        with open(path, "r", encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:  # ValueError covers json.JSONDecodeError and bad UTF-8
        if warn:
            warnings.warn(f"cupipe: ignoring the tuning cache {path}: it is unreadable or corrupt "
                          f"({type(e).__name__}: {e}); the next cupipe.tune() replaces it",
                          RuntimeWarning, stacklevel=3)
        return {}
    entries = data.get("entries") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION or not isinstance(entries, dict):
        if warn:
            warnings.warn(f"cupipe: ignoring the tuning cache {path}: not a cupipe tuning file of "
                          f"format {FORMAT_VERSION}; the next cupipe.tune() replaces it",
                          RuntimeWarning, stacklevel=3)
        return {}
    return {k: v for k, v in entries.items() if _valid_entry(v)}


def _valid_entry(e) -> bool:
    return (isinstance(e, dict) and e.get("mechanism") in ALL_MECHANISMS
            and isinstance(e.get("stages"), int) and 1 <= e["stages"] <= 8
            and e.get("vec_bytes", 0) in (0, 4, 8, 16))


@contextlib.contextmanager
def _file_lock(path: str):
    """Exclusive advisory lock on ``path + '.lock'`` (no-op where fcntl does not exist: the
    write is still atomic, but concurrent writers may then drop each other's new entries)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    with open(path + ".lock", "a+") as lf:
        fcntl.flock(lf.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lf.fileno(), fcntl.LOCK_UN)


def store_entries(new: Dict[str, dict], path: Optional[str] = None) -> Dict[str, dict]:
    """Merge ``new`` into the cache file: lock, read, merge, write a temporary file, ``os.replace``
    it over the old one. Readers never see a half-written file. Returns the merged entries."""
    path = path or cache_path()
    for k, e in new.items():
        if not _valid_entry(e):
            raise ValueError(f"cupipe: invalid tuning entry for {k!r}: {e!r}")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with _file_lock(path):
        entries = read_cache(path, warn=True)
        entries.update(new)
        doc = {"format": FORMAT_VERSION, "entries": dict(sorted(entries.items()))}
        fd, tmp = tempfile.mkstemp(prefix=CACHE_FILE + ".", suffix=".tmp",
                                   dir=os.path.dirname(path) or ".")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    global _memory
    with _lock:
        if _memory_path == path:
            _memory = dict(entries)
    return entries


def reload_cache() -> None:
    """Forget the in-memory copy of the cache; the next auto call re-reads the file (picks up
    entries other processes wrote, or a changed ``CUPIPE_CACHE_DIR``)."""
    global _memory, _memory_path
    with _lock:
        _memory, _memory_path = None, None


def _entries() -> Dict[str, dict]:
    global _memory, _memory_path
    if _memory is None:
        with _lock:
            if _memory is None:
                path = cache_path()
                _memory = read_cache(path) if _cache_enabled() else {}
                _memory_path = path
    return _memory


# ----------------------------------------------------------------------------- keys

def _bucket(n: int) -> int:
    """log2 bucket of a size: sizes in [2^(k-1), 2^k) share bucket k (0 for size 0)."""
    return int(n).bit_length()


def _memory_order(shape: Sequence[int], strides: Optional[Sequence[int]]) -> str:
    """The dims of size > 1 by decreasing stride, as ":m<dims>" when that is not their logical
    order (a transposed, permuted or channels_last input: the planner reads another view of it);
    "" for logical order or unknown strides."""
    if strides is None:
        return ""
    dims = [d for d in range(len(shape)) if shape[d] != 1]
    order = sorted(dims, key=lambda d: -strides[d])  # stable: equal strides keep logical order
    return "" if order == dims else ":m" + "".join(str(d) for d in order)


def shape_class(op: str, shape: Sequence[int], *, dim=None, radius=None, strides=None) -> str:
    """A coarse key for ``op`` on an input of ``shape``: ndim, the log2 bucket of each size
    (:func:`_bucket`), the memory order of the dims when it is not the logical one (``strides``),
    and what else selects a different kernel geometry -- the stencil's radius (``radius``: r for
    stencil1d, (ry, rx) for stencil2d, (rz, ry, rx) for stencil3d) and dim, or the reduced dims.

    >>> shape_class("stencil2d", (8192, 8192), radius=(1, 1))
    'nd2:14x14:r1x1'
    >>> shape_class("stencil2d", (8, 16, 64, 64), radius=(1, 1), strides=(65536, 1, 1024, 16))
    'nd4:4x5x7x7:m0231:r1x1'
    """
    nd = len(shape)
    sizes = "x".join(str(_bucket(s)) for s in shape) or "scalar"
    key = f"nd{nd}:{sizes}" + _memory_order(shape, strides)
    if op == "stream_copy":
        return key
    if op == "stencil1d":
        d = (dim if dim is not None else -1) % max(nd, 1)
        return f"{key}:d{d}:r{radius}"
    if op == "stencil2d":
        ry, rx = radius
        return f"{key}:r{ry}x{rx}"
    if op == "stencil3d":
        rz, ry, rx = radius
        return f"{key}:r{rz}x{ry}x{rx}"
    if op == "reduce":
        if dim is None or len(dim) == 0:
            dims = "all"
        else:
            dims = ",".join(str(d) for d in sorted({d % max(nd, 1) for d in dim}))
        return f"{key}:dims{dims}"
    raise ValueError(f"cupipe: unknown op {op!r}; expected one of {', '.join(OPS)}")


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def code_sm(info: dict) -> int:
    """The architecture the kernels run as, from ``_C.cuda_device_info``: ``code_sm`` (older than
    the device's ``sm`` where the build has only older code or PTX for it; csrc/kernels/params.h),
    or ``sm`` from a build that does not report it."""
    return int(info.get("code_sm", info.get("sm", 0)))


def device_name(device) -> str:
    idx = torch.device(device).index
    if idx is None:
        idx = torch.cuda.current_device()
    name = _device_names.get(idx)
    if name is None:
        name = _device_names[idx] = torch.cuda.get_device_name(idx)
    return name


def cache_key(op: str, cls: str, dtype: torch.dtype, dev_name: str) -> str:
    return f"{op}|{cls}|{_dtype_name(dtype)}|{dev_name}"


# reduce's state ops run their own kernel per state kind (csrc/kernels/reduce/stateful.cuh): their
# cache entries carry the kind, apart from the scalar ops' (sum, mean, amax, amin).
_STATE_KINDS = {"var": "moments", "std": "moments", "argmax": "arg", "argmin": "arg", "logsumexp": "lse",
                "norm": "norm"}


def _reduce_kind_suffix(reduce_op) -> str:
    kind = _STATE_KINDS.get(reduce_op) if isinstance(reduce_op, str) else None
    return f":{kind}" if kind else ""


def _kernel_suffix(op: str, a: Dict[str, object]) -> str:
    """What else picks the kernel, in a cache key: reduce's state kind, and steps > 1 of
    stencil1d/stencil2d (the fused kernel, tuned apart from the single step)."""
    if op == "reduce":
        return _reduce_kind_suffix(a.get("op"))
    steps = a.get("steps", 1)
    return ":steps" if op in ("stencil1d", "stencil2d") and type(steps) is int and steps > 1 else ""


# ----------------------------------------------------------------------------- the hot path

def cached_config(op: str, x: torch.Tensor, mechanism: str, stages: int, vec_bytes: int = 0, *,
                  weights: Optional[torch.Tensor] = None, dim=None, reduce_op=None,
                  steps: int = 1) -> Tuple[str, int, int]:
    """The (mechanism, stages, vec_bytes) a Python wrapper passes on: the tuning cache's entry
    for this call when ``mechanism == "auto"`` and there is one, else the arguments unchanged
    (the op then resolves auto from the shipped table). Cheap and side-effect free after the
    first call of a process (one file read, then dict lookups); never consulted while
    ``torch.compile`` traces. Malformed arguments pass through untouched, for the op to reject."""
    if mechanism != "auto" or torch.compiler.is_compiling() or not x.is_cuda:
        return mechanism, stages, vec_bytes
    entries = _entries()
    if not entries:
        return mechanism, stages, vec_bytes
    shape = tuple(x.shape)
    if not all(type(s) is int for s in shape):  # symbolic sizes: leave it to the shipped table
        return mechanism, stages, vec_bytes
    radius = None
    try:
        if op == "stencil1d":
            if weights.dim() != 1 or type(dim) is not int or not -len(shape) <= dim < max(len(shape), 1):
                return mechanism, stages, vec_bytes
            radius = (weights.shape[0] - 1) // 2
        elif op == "stencil2d":
            if weights.dim() != 2:
                return mechanism, stages, vec_bytes
            radius = ((weights.shape[0] - 1) // 2, (weights.shape[1] - 1) // 2)
        elif op == "stencil3d":
            if weights.dim() != 3:
                return mechanism, stages, vec_bytes
            radius = tuple((k - 1) // 2 for k in weights.shape)
        cls = shape_class(op, shape, dim=dim, radius=radius, strides=tuple(x.stride()))
        cls += _kernel_suffix(op, {"op": reduce_op, "steps": steps})
    except Exception:  # let the op produce its own error message
        return mechanism, stages, vec_bytes
    e = entries.get(cache_key(op, cls, x.dtype, device_name(x.device)))
    if e is None:
        return mechanism, stages, vec_bytes
    return _from_entry(e, stages, vec_bytes)


def _from_entry(e: dict, stages: int, vec_bytes: int) -> Tuple[str, int, int]:
    """A cache entry's (mechanism, stages, vec_bytes), explicit stages / vec_bytes kept."""
    return (e["mechanism"], stages if stages > 0 else e["stages"],
            vec_bytes if vec_bytes > 0 else e.get("vec_bytes", 0))


# ----------------------------------------------------------------------------- explain / tune

def _signature(op: str) -> inspect.Signature:
    """The signature of ``cupipe.<op>``, read off the op's schema (the wrappers have exactly it)."""
    if op not in OPS:
        raise ValueError(f"cupipe: unknown op {op!r}; expected one of {', '.join(OPS)}")
    params = []
    for arg in getattr(torch.ops.cupipe, op).default._schema.arguments:
        kind = inspect.Parameter.KEYWORD_ONLY if arg.kwarg_only else inspect.Parameter.POSITIONAL_OR_KEYWORD
        default = arg.default_value if arg.has_default_value() else inspect.Parameter.empty
        params.append(inspect.Parameter(arg.name, kind, default=default))
    return inspect.Signature(params)


def _bind(op: str, x, args, kwargs) -> Dict[str, object]:
    """The op's arguments by name (defaults filled in), as the wrapper would receive them."""
    sig = _signature(op)
    try:
        b = sig.bind(x, *args, **kwargs)
    except TypeError as e:
        raise TypeError(f"cupipe: arguments do not match cupipe.{op}{sig}: {e}") from None
    b.apply_defaults()
    return dict(b.arguments)


def _geometry(op: str, a: Dict[str, object]) -> Dict[str, object]:
    """The dim / radius keywords of shape_class for the bound arguments ``a``."""
    if op == "stencil1d":
        return {"dim": a["dim"], "radius": (a["weights"].shape[0] - 1) // 2}
    if op == "stencil2d":
        w = a["weights"]
        return {"radius": ((w.shape[0] - 1) // 2, (w.shape[1] - 1) // 2)}
    if op == "stencil3d":
        return {"radius": tuple((k - 1) // 2 for k in a["weights"].shape)}
    if op == "reduce":
        d = a["dim"]
        return {"dim": None if d is None else ([d] if isinstance(d, int) else list(d))}
    return {}


def _table_args(op: str, a: Dict[str, object]) -> Dict[str, object]:
    """The keywords of ``_C.table_shape`` / ``_C.layout_plan`` for the bound arguments ``a``."""
    if op == "stencil1d":
        kw = {"weights": a["weights"], "dim": a["dim"], "boundary": a["boundary"], "steps": a["steps"]}
    elif op == "stencil2d":
        kw = {"weights": a["weights"], "boundary": a["boundary"], "steps": a["steps"]}
    elif op == "stencil3d":
        kw = {"weights": a["weights"], "boundary": a["boundary"]}
    elif op == "reduce":  # (the mechanism: the state ops fold two runs of dims only under auto or sync)
        kw = {"dim": a["dim"], "reduce_op": a["op"], "dtype": a["dtype"], "mechanism": a["mechanism"]}
    else:
        kw = {}
    return kw


def _table_shape(op: str, x: torch.Tensor, a: Dict[str, object]) -> Dict[str, object]:
    """The shape keywords of ``_C.resolve_config`` for the bound arguments ``a``, derived in C++
    as the op derives them (``_C.table_shape``)."""
    return _C.table_shape(op, x, **_table_args(op, a))


@dataclasses.dataclass
class Explanation:
    """What auto resolves to for one call; ``str()`` of it is a readable report."""
    op: str
    device: str
    mechanism: Optional[str]
    stages: Optional[int]
    vec_bytes: Optional[int]
    source: str            # "cpu", "explicit", "tuning cache", "shipped table"
    reason: str
    key: Optional[str] = None
    requested: Optional[Dict[str, object]] = None
    layout: Optional[str] = None  # how the kernels read x's memory (the layout planner, csrc/ops/layout.h)
    # The kernel instances the call launches, in order, each with where it comes from: built ahead
    # of time, compiled on first use and loaded, or still to be compiled (cached on disk or not).
    kernels: Optional[List[Tuple[str, str]]] = None
    # Each kernel's launch, in the same order: (blocks in the grid, threads a block, dynamic shared
    # memory bytes a block). A kernel not loaded yet is sized as for one block an SM (registry.h).
    launches: Optional[List[Tuple[int, int, int]]] = None

    def __str__(self) -> str:
        lines = [f"cupipe.{self.op} on {self.device}"]
        if self.requested:
            lines.append("  requested: " + ", ".join(f"{k}={v!r}" for k, v in self.requested.items()))
        if self.mechanism is not None:
            vec = "" if self.vec_bytes is None else f", vec_bytes={self.vec_bytes}"
            lines.append(f"  resolves to: mechanism={self.mechanism!r}, stages={self.stages}{vec}")
        lines.append(f"  source: {self.source}")
        if self.key:
            lines.append(f"  key: {self.key}")
        lines.append(textwrap.fill(f"  why: {self.reason}", width=100, subsequent_indent="       "))
        if self.layout:
            lines.append(textwrap.fill(f"  layout: {self.layout}", width=100, subsequent_indent="          "))
        for i, (kid, origin) in enumerate(self.kernels or []):
            lines.append(("  kernels: " if i == 0 else "           ") + f"{kid}  [{origin}]")
            if self.launches and i < len(self.launches) and self.launches[i][1] > 0:
                blocks, threads, smem = self.launches[i]
                lines.append(f"             launch: {blocks} blocks of {threads} threads, {smem / 1024:.1f} KiB of "
                             "shared memory a block" + ("" if origin.startswith(("built", "compiled on"))
                                                        else " (the grid as for one block an SM until it is loaded)"))
        return "\n".join(lines)


def _planned_kernels(op: str, a: Dict[str, object], mechanism: str, stages: int,
                     vec_bytes: Optional[int]) -> Tuple[List[Tuple[str, str]], List[Tuple[int, int, int]]]:
    """The kernels the op launches with the bound arguments ``a`` and this resolved configuration,
    recorded by the launchers instead of launched (``_C._plan_kernels``), each with its origin; and
    their launches (blocks, threads, shared memory bytes)."""
    from . import _kernel_cache

    x = a["x"]
    call = dict(a, mechanism=mechanism, stages=stages)
    if vec_bytes is not None:
        call["vec_bytes"] = vec_bytes
    with torch.no_grad():
        plan = _C._plan_kernels(lambda: getattr(torch.ops.cupipe, op)(**call))
    info = _C.cuda_device_info(x.device.index if x.device.index is not None else torch.cuda.current_device())
    arch = _kernel_cache.arch_of(int(info["sm"]))
    out = []
    for kid, origin, *_ in plan:
        if origin == "ahead-of-time":
            out.append((kid, "built ahead of time"))
        elif origin == "first-use":
            out.append((kid, "compiled on first use, loaded"))
        else:
            cached = _kernel_cache.is_cached(kid, arch)
            out.append((kid, "first use: " + ("in the disk cache, loaded when first called" if cached else
                                               f"compiled for {arch} when first called (a few seconds)")))
    return out, [tuple(p[2:5]) for p in plan]


def explain(op: str, x: torch.Tensor, *args, **kwargs) -> Explanation:
    """Report which (mechanism, stages, vec_bytes) ``cupipe.<op>(x, *args, **kwargs)`` would run
    with, and why (explicit argument, tuning cache entry, or the shipped table), and on a GPU the
    kernel instances it launches and where each comes from (built ahead of time or compiled on
    first use). Takes exactly the op's arguments, e.g. ``print(cupipe.explain("stencil2d", x, w))``.
    Launches none of cupipe's kernels and compiles nothing."""
    a = _bind(op, x, args, kwargs)
    mech, stages = a["mechanism"], a["stages"]
    vec = a.get("vec_bytes", 0)
    requested = {"mechanism": mech, "stages": stages}
    if op == "stream_copy":
        requested["vec_bytes"] = vec
    layout = _C.layout_plan(op, x, **_table_args(op, a))
    if x.device.type != "cuda":
        _C.resolve_config(op, 0, mech, stages, vec)  # validates the knobs like the op does
        return Explanation(op, str(x.device), None, None, None, "cpu",
                           "the CPU path runs plain C++ loops: mechanism, stages and vec_bytes are "
                           "validated and then ignored", requested=requested, layout=layout)
    sm_info = _C.cuda_device_info(x.device.index if x.device.index is not None
                                  else torch.cuda.current_device())
    sm = code_sm(sm_info)
    dev_sm = int(sm_info.get("sm", sm))
    dev = f"{device_name(x.device)} (sm_{dev_sm}" + (f", kernels run as sm_{sm})" if sm != dev_sm else ")")
    vec_out = None if op != "stream_copy" else vec
    cls = shape_class(op, tuple(x.shape), strides=tuple(x.stride()), **_geometry(op, a)) + _kernel_suffix(op, a)
    key = cache_key(op, cls, x.dtype, device_name(x.device))
    # What the table makes of this call, and its reason for its own choice (csrc/ops/tuning.cpp).
    m, s, v, table_why = _C.explain_config(op, sm, mech, stages, vec, **_table_shape(op, x, a))
    if mech != "auto":
        why = "mechanism given explicitly; the tuning cache is consulted only for mechanism='auto'"
        if stages == 0:
            why += f"; stages=0 resolved by the shipped table to {s}"
        return Explanation(op, dev, m, s, v if vec_out is not None else None, "explicit", why,
                           key, requested, layout, *_planned_kernels(op, a, m, s, v if op == "stream_copy" else None))
    e = _entries().get(key)
    if e is not None:
        m, s, v = _from_entry(e, stages, vec)
        measured = e.get("measured", "?")
        why = (f"tuned by cupipe.tune() on {measured}: {e.get('ms', float('nan')):.4g} ms vs "
               f"{e.get('table_ms', float('nan')):.4g} ms for the shipped table's choice "
               f"({e.get('table_config', '?')}); calls through torch.ops.cupipe.* and code "
               f"compiled by torch.compile use the shipped table instead")
        return Explanation(op, dev, m, s, v if vec_out is not None else None,
                           f"tuning cache ({cache_path()})", why, key, requested, layout,
                           *_planned_kernels(op, a, m, s, v if op == "stream_copy" else None))
    why = table_why
    if stages > 0:
        why += f"; stages={stages} given explicitly"
    if op == "stream_copy" and vec > 0:
        why += f"; vec_bytes={vec} given explicitly"
    why += f"; no tuning cache entry for this key in {cache_path()}"
    return Explanation(op, dev, m, s, v if vec_out is not None else None,
                       "shipped table (csrc/ops/tuning.cpp)", why, key, requested, layout,
                       *_planned_kernels(op, a, m, s, v if op == "stream_copy" else None))


def _rtol(dtype: torch.dtype) -> float:
    """Tolerance between two configurations' results: they may sum in different orders, and a
    half-precision result can then round to a neighbouring value."""
    return {torch.float16: 1e-2, torch.bfloat16: 2e-2}.get(dtype, 1e-3)


def tune(op: str, x: torch.Tensor, *args, mechanisms: Optional[Iterable[str]] = None,
         stage_counts: Iterable[int] = (1, 2, 3, 4, 6, 8), vec_widths: Iterable[int] = (8, 16),
         reps: int = 20, warmup: int = 3, save: bool = True, verbose: bool = True,
         **kwargs) -> dict:
    """Measure ``cupipe.<op>(x, *args, **kwargs)`` over mechanisms x stages (x vec_bytes for
    stream_copy), and cache the fastest for (op, shape class, dtype, device name); later
    ``mechanism="auto"`` calls through the ``cupipe.*`` wrappers with a matching key use it.

    Each candidate's result is first checked against the shipped table's result (a wrong or
    failing candidate is skipped, never cached); then each is timed (median of ``reps``
    CUDA-event-timed calls). Returns ``{"key", "mechanism", "stages", "vec_bytes", "ms",
    "table_ms", "table_config", "results": [...]}``; ``save=False`` measures without caching.

    Needs a CUDA tensor and a CUDA build: on the CPU the knobs are ignored, so this raises
    ``RuntimeError`` rather than caching a meaningless choice.
    """
    if not isinstance(x, torch.Tensor) or x.device.type != "cuda":
        raise RuntimeError(
            f"cupipe.tune needs a CUDA tensor (got one on {getattr(x, 'device', type(x))}): the "
            "CPU path ignores mechanism/stages/vec_bytes, so there is nothing to tune. Move the "
            "input to a GPU, or use cupipe.explain() to see what auto resolves to.")
    if not _C.with_cuda:
        raise RuntimeError("cupipe.tune: this cupipe build has no CUDA kernels (CUPIPE_NO_CUDA=1?)")
    sm = code_sm(_C.cuda_device_info(x.device.index if x.device.index is not None
                                     else torch.cuda.current_device()))
    return _tune(op, x, args, kwargs, sm=sm, dev_name=device_name(x.device),
                 timer=lambda fn: time_ms(fn, reps, warmup), mechanisms=mechanisms,
                 stage_counts=stage_counts, vec_widths=vec_widths, save=save, verbose=verbose)


def _tune(op, x, args, kwargs, *, sm: int, dev_name: str, timer, mechanisms, stage_counts,
          vec_widths, save: bool, verbose: bool) -> dict:
    """The search behind :func:`tune`, with the device facts and the timer passed in (so it can
    be exercised on the CPU in tests)."""
    global _memory, _memory_path

    for k in ("mechanism", "stages", "vec_bytes"):
        if k in kwargs:
            raise TypeError(f"cupipe.tune: do not pass {k}=; tune searches it (use mechanisms=, "
                            "stage_counts=, vec_widths= to narrow the search)")
    a = _bind(op, x, args, kwargs)
    if mechanisms is None:
        mechanisms = [m for m in ALL_MECHANISMS if m != "tma" or sm >= 90]
    widths = list(vec_widths) if op == "stream_copy" else [0]
    cls = shape_class(op, tuple(x.shape), strides=tuple(x.stride()), **_geometry(op, a))
    cls += _kernel_suffix(op, a)
    key = cache_key(op, cls, x.dtype, dev_name)

    call = _direct_call(op, a)
    ref = call("auto", 0, 0)  # the shipped table's choice, through the op directly
    table = _C.resolve_config(op, sm, "auto", 0, 0, **_table_shape(op, x, a))
    table_ms = timer(lambda: call("auto", 0, 0))
    tol = _rtol(ref.dtype) if ref.is_floating_point() else 0.0
    results: List[dict] = []
    for m in mechanisms:
        for s in stage_counts:
            for v in widths:
                try:
                    got = call(m, s, v)
                    torch.testing.assert_close(got, ref, rtol=tol, atol=tol, equal_nan=True)
                    ms = timer(lambda: call(m, s, v))
                except Exception as e:  # unsupported on this device, or wrong: never cached
                    results.append({"mechanism": m, "stages": s, "vec_bytes": v, "ms": None,
                                    "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"})
                    continue
                results.append({"mechanism": m, "stages": s, "vec_bytes": v, "ms": ms})
                if verbose:
                    print(f"  cupipe.tune {op}: {m:<16} stages={s} "
                          + (f"vec={v:<2} " if op == "stream_copy" else "") + f"{ms:.4f} ms")
    ok = [r for r in results if r["ms"] is not None]
    if not ok:
        raise RuntimeError(f"cupipe.tune: no candidate ran correctly for {key}: "
                           + "; ".join(r.get("error", "") for r in results[:3]))
    best = min(ok, key=lambda r: r["ms"])
    entry = {"mechanism": best["mechanism"], "stages": best["stages"],
             "vec_bytes": best["vec_bytes"], "ms": best["ms"], "table_ms": table_ms,
             "table_config": f"{table[0]}/{table[1]}" + (f"/vec{table[2]}" if op == "stream_copy" else ""),
             "measured": datetime.datetime.now().isoformat(timespec="seconds"),
             "torch": torch.__version__, "shape": list(x.shape)}
    if save:
        store_entries({key: entry})
        with _lock:  # make this process see the new entry at once
            if _memory is None or _memory_path != cache_path():
                _memory, _memory_path = read_cache(warn=False), cache_path()
            else:
                _memory[key] = entry
    if verbose:
        print(f"cupipe.tune {op}: best {entry['mechanism']}/{entry['stages']}"
              + (f"/vec{entry['vec_bytes']}" if op == "stream_copy" else "")
              + f" {entry['ms']:.4f} ms vs shipped table {entry['table_config']} {table_ms:.4f} ms"
              + (f"; cached as {key!r} in {cache_path()}" if save else ""))
    return dict(entry, key=key, results=results)


def _direct_call(op: str, a: Dict[str, object]):
    """``f(mechanism, stages, vec_bytes)`` calling ``torch.ops.cupipe.<op>`` directly (so the
    tuning cache is bypassed) with the other arguments bound in ``a``."""
    x = a["x"]
    ops = torch.ops.cupipe
    if op == "stream_copy":
        return lambda m, s, v: ops.stream_copy(x, mechanism=m, stages=s, vec_bytes=v)
    if op == "stencil1d":
        return lambda m, s, v: ops.stencil1d(x, a["weights"], dim=a["dim"], boundary=a["boundary"],
                                             mechanism=m, stages=s, steps=a["steps"])
    if op == "stencil2d":
        return lambda m, s, v: ops.stencil2d(x, a["weights"], boundary=a["boundary"],
                                             mechanism=m, stages=s, steps=a["steps"])
    if op == "stencil3d":
        return lambda m, s, v: ops.stencil3d(x, a["weights"], boundary=a["boundary"],
                                             mechanism=m, stages=s, steps=a["steps"])
    d = a["dim"]
    dims = None if d is None else ([d] if isinstance(d, int) else list(d))
    corr = 1 if a.get("correction") is None else a.get("correction")
    return lambda m, s, v: ops.reduce(x, a["op"], dims, a["keepdim"], dtype=a["dtype"],
                                      correction=corr, ord=a.get("ord", 2), mechanism=m, stages=s)
