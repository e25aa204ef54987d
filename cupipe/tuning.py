"""What ``mechanism="auto"`` / ``stages=0`` / ``vec_bytes=0`` resolve to, and an on-device
search that can replace the shipped choice with a measured one.

Two sources, in this order of precedence, for a call through the ``cupipe.*`` Python wrappers
with ``mechanism="auto"`` on a CUDA tensor:

1. the **tuning cache**: a JSON file written by :func:`tune` (``$CUPIPE_CACHE_DIR/tuning.json``,
   default ``~/.cache/cupipe/tuning.json``), keyed by (op, shape class, dtype, device name);
2. the **shipped table** compiled into the extension (``csrc/ops/tuning.cpp``, read off
   BENCHMARKS.md), which is also what ``torch.ops.cupipe.*`` called directly always uses, and
   what code traced by ``torch.compile`` uses (the cache is not consulted while compiling).

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
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
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

from .timing import time_ms

FORMAT_VERSION = 1
CACHE_FILE = "tuning.json"
OPS = ("stream_copy", "stencil1d", "stencil2d", "reduce")
ALL_MECHANISMS = ("sync", "pipeline", "pipeline_thread", "primitives", "cg", "barrier",
                  "specialized", "tma")

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


def shape_class(op: str, shape: Sequence[int], *, dim=None, radius=None) -> str:
    """A coarse key for ``op`` on an input of ``shape``: ndim, the log2 bucket of each size
    (:func:`_bucket`), and what else selects a different kernel geometry -- the stencil's
    radius (``radius``: r for stencil1d, (ry, rx) for stencil2d) and dim, or the reduced dims.

    >>> shape_class("stencil2d", (8192, 8192), radius=(1, 1))
    'nd2:14x14:r1x1'
    """
    nd = len(shape)
    sizes = "x".join(str(_bucket(s)) for s in shape) or "scalar"
    key = f"nd{nd}:{sizes}"
    if op == "stream_copy":
        return key
    if op == "stencil1d":
        d = (dim if dim is not None else -1) % max(nd, 1)
        return f"{key}:d{d}:r{radius}"
    if op == "stencil2d":
        ry, rx = radius
        return f"{key}:r{ry}x{rx}"
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


# ----------------------------------------------------------------------------- the hot path

def cached_config(op: str, x: torch.Tensor, mechanism: str, stages: int, vec_bytes: int = 0, *,
                  weights: Optional[torch.Tensor] = None, dim=None) -> Tuple[str, int, int]:
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
        cls = shape_class(op, shape, dim=dim, radius=radius)
    except Exception:  # let the op produce its own error message
        return mechanism, stages, vec_bytes
    e = entries.get(cache_key(op, cls, x.dtype, device_name(x.device)))
    if e is None:
        return mechanism, stages, vec_bytes
    return (e["mechanism"], stages if stages > 0 else e["stages"],
            vec_bytes if vec_bytes > 0 else e.get("vec_bytes", 0))


# ----------------------------------------------------------------------------- explain / tune

def _op_fn(op: str):
    from . import ops
    if op not in OPS:
        raise ValueError(f"cupipe: unknown op {op!r}; expected one of {', '.join(OPS)}")
    return getattr(ops, op)


def _bind(op: str, x, args, kwargs) -> Dict[str, object]:
    """The op's arguments by name (defaults filled in), as the wrapper would receive them."""
    fn = _op_fn(op)
    try:
        b = inspect.signature(fn).bind(x, *args, **kwargs)
    except TypeError as e:
        raise TypeError(f"cupipe: arguments do not match cupipe.{op}{inspect.signature(fn)}: {e}") \
            from None
    b.apply_defaults()
    return dict(b.arguments)


def _geometry(op: str, a: Dict[str, object]) -> Dict[str, object]:
    """The dim / radius keywords of shape_class for the bound arguments ``a``."""
    if op == "stencil1d":
        return {"dim": a["dim"], "radius": (a["weights"].shape[0] - 1) // 2}
    if op == "stencil2d":
        w = a["weights"]
        return {"radius": ((w.shape[0] - 1) // 2, (w.shape[1] - 1) // 2)}
    if op == "reduce":
        d = a["dim"]
        return {"dim": None if d is None else ([d] if isinstance(d, int) else list(d))}
    return {}


# Why the shipped table picks what it picks (mirrors the comments in csrc/ops/tuning.cpp), keyed
# by (op, mechanism, stages): a reason is only given while the table still makes that choice.
_STENCIL_REASONS = {
    ("barrier", 2): "along the last dim on sm_90 (4- and 8-byte types): barrier with 2 stages ran "
                    "a 2^28 fp32 r=4 signal in 0.621-0.681 ms against specialized/2's 0.661-0.701 "
                    "and primitives/2's 0.764-0.815 (H200, BENCHMARKS.md, fourth run); fp32 runs "
                    "about two tiles per block (0.543 ms against 0.571 with one wave of persistent "
                    "blocks, sixth run)",
    ("tma", 2): "on sm_90, 2-D boxes of 2-byte types, fp32 3x3 and 5x5 boxes and fp32 boxes "
                "wider than 5, whose rows are whole 16-byte multiples from an aligned pointer: tma "
                "with 2 stages moves each tile as one tensor-map box (fp16 8192^2 3x3 0.083 ms "
                "against primitives/2's 0.112, fp32 9x9 0.344 against 0.380; H200, BENCHMARKS.md, "
                "sixth run); fp32 3x3 and 5x5 run their fixed consumers in 128-thread blocks, one "
                "and two tiles per block (8192^2 0.141 and 0.142 ms against primitives/2's 0.146 "
                "and 0.152, twelfth run), the fp32 9x9 its wide consumer in persistent 128-thread "
                "blocks (0.2365 ms against 0.249 in 256-thread ones, twenty-third run); 2-byte "
                "3x3 and 5-point boxes run 128-thread blocks on 32 x 256 tiles, one per block "
                "(fp16 0.0765 ms against 0.080 on persistent 64 x 128 ones, twenty-fourth run); fp16 boxes "
                "of 5-9 tap rows run the narrow tensor-core "
                "kernels (fp16 5x5 0.085 ms against the CUDA cores' 0.113, thirteenth run); "
                "2-byte signals along the last dim: one bulk copy per 32 KiB tile (fp16 2^28 r=4 "
                "0.299 ms against barrier/2's 0.302 and specialized/2's 0.307, twenty-second run)",
    ("primitives", 2): "primitives (guaranteed LDGSTS, zero-fill tails) with 2 stages: 2-D boxes on "
                       "sm_90 (fp32 8192^2 3x3 0.157 ms against specialized/2's 0.169, 5x5 0.156 "
                       "against 0.190; fp16 3x3 0.127 against 0.205; H200, BENCHMARKS.md, fifth "
                       "run), stencils along a strided dim, and GPUs before sm_90 (not measured per "
                       "shape there); fp32 3x3 and 5-point boxes whose rows are not whole 16-byte "
                       "multiples run about two tiles per block (8192^2 0.145-0.147 ms against "
                       "0.151-0.152 with one wave, sixth run)",
}
_TABLE_REASONS = {
    ("stream_copy", "sync", 1): "measured on an H200 (BENCHMARKS.md, 2026-11-23, eighth run): with "
                                "grids of short-lived blocks of two 8 KiB tiles, sync with one stage "
                                "ran 2^28 fp32 at 0.994x of y.copy_(x), every other mechanism at "
                                "0.965-0.980x; plain loads with the whole device occupied already "
                                "keep enough bytes in flight (since the seventeenth run one 16 KiB "
                                "tile per block: 0.998x of cudaMemcpyAsync)",
    ("stream_copy", "primitives", 2): "before sm_90 the table takes the LDGSTS path (primitives, 2 "
                                      "stages), which needs no Hopper instructions",
    **{(op, m, s): why for op in ("stencil1d", "stencil2d") for (m, s), why in _STENCIL_REASONS.items()},
    ("reduce", "primitives", 2): "primitives with 2 stages: along the innermost dim (32 KiB stages; a "
                                 "whole tensor, short or long rows) it led or tied every case of "
                                 "the H200 sweep (sum all 0.263 ms, BENCHMARKS.md, third run of "
                                 "2026-11-22); over columns (chunks up to 16 KiB wide, 64 KiB "
                                 "stages) 0.251-0.253 ms against 4 stages of 32 KiB's 0.264-0.269 "
                                 "(fifth run)",
    ("reduce", "tma", 1): "tma with 1 stage of 32 KiB along the innermost dim on sm_90+ (a whole "
                          "tensor, short or long rows): sum all 2^28 fp32 0.2428 ms against "
                          "primitives/2's 0.2444-0.2449, rows (4194304, 64) 0.2595 against 0.2634, "
                          "amax all 0.2454 against 0.2481, bf16 -> fp32 0.1264 against 0.1283 "
                          "(H200, BENCHMARKS.md, fourteenth run); one bulk copy per tile leaves "
                          "the threads to the fold; since the nineteenth run a whole tensor or a "
                          "few long rows at one stage take a block per 64 KiB chunk and a partials "
                          "pass (sum all 0.2374 -> 0.2367 ms, rows (64, 2^22) 0.2378 -> 0.2360)",
    ("reduce", "tma", 3): "tma with 3 stages of 64 KiB over columns on sm_90+ (rows of 4 KiB or "
                          "more, a multiple of 128 bytes: each tile row lands at its source's offset "
                          "modulo 128): (32768, 8192) fp32 0.2452 ms against primitives/2's "
                          "0.2488-0.2489 and tma/2's 0.2468-0.2474 (H200, BENCHMARKS.md, "
                          "twentieth run)",
    ("reduce", "primitives", 1): "primitives with 1 stage for rows of 4-32 KiB along the innermost "
                                 "dim (a row or two per 32 KiB stage, each folded by several warps): "
                                 "(4096, 4096) fp32 0.0206-0.0212 ms against 2 stages' "
                                 "0.0215-0.0232 over four H200 runs, L2 warm or evicted "
                                 "(BENCHMARKS.md, tenth run of 2026-11-23); a block has a tile or "
                                 "two, little to overlap, and one stage fits twice the blocks; "
                                 "since the eighteenth run a block per ~16 KiB tile of rows, one "
                                 "stage whatever is asked (0.0194-0.0195 ms, tma alike)",
}


def _table_reason(op: str, mechanism: str, stages: int) -> str:
    return _TABLE_REASONS.get((op, mechanism, stages),
                              "the shipped table's choice for this op and GPU (see the comments in "
                              "csrc/ops/tuning.cpp)")


def _table_shape(op: str, x: torch.Tensor, a: Dict[str, object]) -> Dict[str, int]:
    """The shape arguments of _C.resolve_config: for reduce, the (outer, r, inner) view the op
    reduces (as reduce_canonical_view in csrc/ops/args.cpp builds it); for the stencils the radii
    (ry along the rows, rx along the last dim, as the kernels see them), the element size and, for
    stencil2d, whether the rows are whole 16-byte multiples from an aligned pointer (rows16);
    nothing for stream_copy."""
    if op == "stencil1d":
        r = (a["weights"].shape[0] - 1) // 2
        last = x.dim() == 0 or int(a["dim"]) % max(x.dim(), 1) == x.dim() - 1
        return {"ry": 0 if last else r, "rx": r if last else 0, "esz": x.element_size()}
    if op == "stencil2d":
        w = a["weights"]
        # The kernels see x.contiguous(): a copy is a fresh (aligned) allocation; a contiguous x
        # is aligned when its storage offset is (storages start aligned; fake tensors have no
        # data pointer to ask).
        rows16 = (x.dim() > 0 and x.shape[-1] * x.element_size() % 16 == 0
                  and (not x.is_contiguous() or x.storage_offset() * x.element_size() % 16 == 0))
        return {"ry": (w.shape[0] - 1) // 2, "rx": (w.shape[1] - 1) // 2, "esz": x.element_size(),
                "rows16": bool(rows16)}
    if op != "reduce":
        return {}
    # The element size the kernel reads: dtype=float64 converts a narrower input first.
    esz = 8 if a.get("dtype") == torch.float64 else x.element_size()
    nd, sizes = x.dim(), list(x.shape)
    d = a["dim"]
    dims = range(nd) if d is None else ([d] if isinstance(d, int) else list(d))
    reduced = sorted({int(k) % max(nd, 1) for k in dims}) if nd else []
    if not reduced:
        return {"outer": x.numel(), "r": 1, "inner": 1, "esz": esz}
    if reduced == list(range(reduced[0], reduced[-1] + 1)):
        return {"outer": math.prod(sizes[:reduced[0]]), "r": math.prod(sizes[reduced[0]:reduced[-1] + 1]),
                "inner": math.prod(sizes[reduced[-1] + 1:]), "esz": esz}
    r = math.prod(sizes[k] for k in reduced)
    return {"outer": x.numel() // max(r, 1), "r": r, "inner": 1, "esz": esz}


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
        return "\n".join(lines)


def explain(op: str, x: torch.Tensor, *args, **kwargs) -> Explanation:
    """Report which (mechanism, stages, vec_bytes) ``cupipe.<op>(x, *args, **kwargs)`` would run
    with, and why (explicit argument, tuning cache entry, or the shipped table). Takes exactly
    the op's arguments, e.g. ``print(cupipe.explain("stencil2d", x, w))``. Runs nothing."""
    from . import _C

    a = _bind(op, x, args, kwargs)
    mech, stages = a["mechanism"], a["stages"]
    vec = a.get("vec_bytes", 0)
    requested = {"mechanism": mech, "stages": stages}
    if op == "stream_copy":
        requested["vec_bytes"] = vec
    have_table = hasattr(_C, "resolve_config")
    if x.device.type != "cuda":
        if have_table:
            _C.resolve_config(op, 0, mech, stages, vec)  # validates the knobs like the op does
        return Explanation(op, str(x.device), None, None, None, "cpu",
                           "the CPU path runs plain C++ loops: mechanism, stages and vec_bytes are "
                           "validated and then ignored", requested=requested)
    if not have_table:
        raise RuntimeError("cupipe.explain needs cupipe._C.resolve_config, which this build lacks; "
                           "rebuild: pip install --no-build-isolation --no-deps -e .")
    sm_info = _C.cuda_device_info(x.device.index if x.device.index is not None
                                  else torch.cuda.current_device())
    sm = code_sm(sm_info)
    dev_sm = int(sm_info.get("sm", sm))
    dev = f"{device_name(x.device)} (sm_{dev_sm}" + (f", kernels run as sm_{sm})" if sm != dev_sm else ")")
    vec_out = None if op != "stream_copy" else vec
    cls = shape_class(op, tuple(x.shape), **_geometry(op, a))
    key = cache_key(op, cls, x.dtype, device_name(x.device))
    if mech != "auto":
        m, s, v = _C.resolve_config(op, sm, mech, stages, vec, **_table_shape(op, x, a))
        why = "mechanism given explicitly; the tuning cache is consulted only for mechanism='auto'"
        if stages == 0:
            why += f"; stages=0 resolved by the shipped table to {s}"
        return Explanation(op, dev, m, s, v if vec_out is not None else None, "explicit", why,
                           key, requested)
    e = _entries().get(key)
    if e is not None:
        m = e["mechanism"]
        s = stages if stages > 0 else e["stages"]
        v = vec if vec > 0 else e.get("vec_bytes", 0)
        measured = e.get("measured", "?")
        why = (f"tuned by cupipe.tune() on {measured}: {e.get('ms', float('nan')):.4g} ms vs "
               f"{e.get('table_ms', float('nan')):.4g} ms for the shipped table's choice "
               f"({e.get('table_config', '?')}); calls through torch.ops.cupipe.* and code "
               f"compiled by torch.compile use the shipped table instead")
        return Explanation(op, dev, m, s, v if vec_out is not None else None,
                           f"tuning cache ({cache_path()})", why, key, requested)
    shape = _table_shape(op, x, a)
    m, s, v = _C.resolve_config(op, sm, mech, stages, vec, **shape)
    tm, ts, _ = _C.resolve_config(op, sm, "auto", 0, 0, **shape)  # the table's own full choice
    why = _table_reason(op, tm, ts)
    if stages > 0:
        why += f"; stages={stages} given explicitly"
    if op == "stream_copy" and vec > 0:
        why += f"; vec_bytes={vec} given explicitly"
    why += f"; no tuning cache entry for this key in {cache_path()}"
    return Explanation(op, dev, m, s, v if vec_out is not None else None,
                       "shipped table (csrc/ops/tuning.cpp)", why, key, requested)


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
    from . import _C

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
    from . import _C

    for k in ("mechanism", "stages", "vec_bytes"):
        if k in kwargs:
            raise TypeError(f"cupipe.tune: do not pass {k}=; tune searches it (use mechanisms=, "
                            "stage_counts=, vec_widths= to narrow the search)")
    a = _bind(op, x, args, kwargs)
    if mechanisms is None:
        mechanisms = [m for m in ALL_MECHANISMS if m != "tma" or sm >= 90]
    widths = list(vec_widths) if op == "stream_copy" else [0]
    cls = shape_class(op, tuple(x.shape), **_geometry(op, a))
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
                                             mechanism=m, stages=s)
    if op == "stencil2d":
        return lambda m, s, v: ops.stencil2d(x, a["weights"], boundary=a["boundary"],
                                             mechanism=m, stages=s)
    d = a["dim"]
    dims = None if d is None else ([d] if isinstance(d, int) else list(d))
    return lambda m, s, v: ops.reduce(x, a["op"], dims, a["keepdim"], dtype=a["dtype"],
                                      mechanism=m, stages=s)
