"""Domain-decomposed stencils and reductions over ``torch.distributed``.

A tensor too large for one device is split along one dim across the ranks of a process group;
every rank holds its own contiguous block (``x_local``) and calls the functions here with it.
Each function returns the rank's part of the result the single-device cupipe op would give on
the whole (concatenated) tensor::

    import torch.distributed as dist, cupipe.distributed as cd
    dist.init_process_group("nccl")               # or "gloo" for CPU tensors
    y_local = cd.stencil2d(x_local, w, boundary="reflect")   # x split by rows (dim -2)
    s = cd.reduce(x_local, "sum", dim=None)                   # the global sum, on every rank

Algorithms
----------
*Stencils* (``stencil1d`` along its stencil dim, ``stencil2d`` along the rows, dim -2,
``stencil3d`` along the planes, dim -3). The row
counts of all ranks are exchanged once per call (one small ``all_gather``; it also checks that
the other dims agree). Each rank then sends its first and last ``r`` rows (``r`` = stencil
radius along the split dim) to its neighbours and receives their ``r`` edge rows, with one
``batch_isend_irecv`` (NCCL runs it on its own stream, ordered after the current stream; the
current stream waits for it before the halos are used). The global boundary is applied by the
single-device op itself: the block a rank hands to the op starts (ends) at the global edge when
the rank is the first (last) one, so the op's own ``boundary`` handling is exactly the global
one there; at a cut between two ranks the block is extended by the received halo, so the op's
boundary never reaches an output row. ``circular`` wraps: the first and the last rank are
neighbours. For every rank with at least ``2r`` rows the result is computed as

  1. ``y = op(x_local)`` -- correct everywhere except the ``r`` rows next to each cut;
  2. the ``r`` rows next to each cut from a ``3r``-row block ``cat(halo, x_local[:2r])`` (and
     its mirror at the other cut), copied into ``y``.

``overlap=True`` issues step 1 while the halos are in flight and waits only before step 2;
``overlap=False`` waits first (the same work in the same amounts, so the two can be compared).
Which is faster depends on the machine (on one host of four H200s overlapping lost, on another
it won), so the default ``overlap="auto"`` measures: the first calls of a workload (op, split
layout, dtype, radius, group) time ``OVERLAP_TRIALS`` blocks of ``OVERLAP_BLOCK`` back-to-back
calls of each variant, alternately, the device synchronized around each block (a loop's steady
state: a single synchronized call also times the ranks' launch skew, which overlapping hides);
the ranks agree on the slowest rank's medians (one ``all_reduce``) and keep overlapping only if
it was faster. Inside a CUDA graph capture ``auto`` does not measure
and waits first.
cupipe's stencil kernels launch one wave of persistent blocks that fills every SM, so an NCCL
kernel queued on its own stream behind them could not start until the whole step 1 ended; with
``overlap=True`` step 1 on CUDA leaves ``OVERLAP_FREE_SMS`` SMs free for the exchange.
A rank with ``r <= rows < 2r`` waits and runs the op once on ``cat(halo, x_local, halo)``.

Preconditions (checked on every rank from the gathered sizes, so every rank raises the same
``ValueError`` instead of hanging): with two or more ranks and ``r > 0``, every rank has at
least ``r`` rows (a halo comes from the immediate neighbour only); all dims other than the split
dim, the dtype and the number of dims agree across ranks. The weights, ``boundary`` and
keyword arguments must be the same on every rank (not checked). ``reflect`` needs the global
size along the split dim to exceed ``r``, as for the single-device op.

*Reduce*: the local block is reduced with ``cupipe.reduce``; when the split dim is among the
reduced dims the partial results are combined with one ``all_reduce`` (sums and means in fp32,
or fp64 when fp64 is involved, then cast once, so half-precision results are rounded once as in
the single-device op; amax/amin propagate NaN like torch).

*Several steps* (``steps=k`` on the stencils): the rank's block lives in a buffer with ``h =
r*K`` halo rows at each cut; each pass receives the neighbours' edge rows into them (one exchange)
and runs K steps of the single-device op on the whole buffer (one fused call on CUDA). The op's
boundary at a cut spoils ``r`` more rows a step, which after K steps still end short of the
rank's own rows: K-times fewer messages for ``2h`` redundant rows a step and no copy of the
block. K is as large as the smallest rank's rows allow; K = 1 is the one-step exchange above (the
only one ``overlap`` applies to: a pass's exchange is one message for K steps of work).

*Heat equation* (``heat_steps``): ``u <- u + alpha * laplacian(u)``, the distributed
``stencil2d`` with the weights ``heat_kernel(alpha)`` and ``steps``; ``halo_width=k`` fixes K.

Limitations: forward only (no autograd across ranks: passing tensors that require grad with
grad mode on raises); 1-D decomposition (no 2-D process grid); a halo comes from the adjacent
rank only. Collectives go through the group's backend: CUDA tensors through NCCL, CPU tensors
through gloo; CUDA tensors with a gloo-only group are staged through host memory.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist

from . import ops as _cops

__all__ = ["stencil1d", "stencil2d", "reduce", "heat_steps", "heat_kernel", "split", "gather",
           "split_sizes"]

_ops = torch.ops.cupipe
# SMs the interior stencil leaves free under overlap=True (a module setting; read at each call).
# With fewer free SMs NCCL's point-to-point kernel does not get the blocks it launches; 8 leaves
# it room at a small cost to the interior (measured: docs/design.md §8).
OVERLAP_FREE_SMS = 8
# overlap="auto": OVERLAP_TRIALS timed blocks of each variant, each block OVERLAP_BLOCK calls back
# to back (the steady state of a loop: one synchronized call also times the ranks' launch skew,
# which waiting first exposes and overlapping hides).
OVERLAP_TRIALS = 3
OVERLAP_BLOCK = 4
_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
_META_SLOTS = 12  # ndim, dtype code, then up to 10 dims (the 10th slot hashes the rest)


# ----------------------------------------------------------------------------- small helpers

def split_sizes(n: int, world_size: int) -> List[int]:
    """Rows per rank of an ``n``-row dim split as ``torch.tensor_split`` does (the first
    ``n % world_size`` ranks get one more row)."""
    q, m = divmod(int(n), int(world_size))
    return [q + (1 if i < m else 0) for i in range(world_size)]


def _group_rank_size(group) -> Tuple[int, int]:
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("cupipe.distributed: torch.distributed is not initialized "
                           "(call torch.distributed.init_process_group first)")
    return dist.get_rank(group), dist.get_world_size(group)


def split(x: torch.Tensor, dim: int = 0, *, group=None) -> torch.Tensor:
    """This rank's block of a full tensor ``x`` split along ``dim`` like ``torch.tensor_split``
    (a view; uneven sizes go to the first ranks). For tests and examples: the full tensor has to
    exist on every rank."""
    rank, world = _group_rank_size(group)
    return torch.tensor_split(x, world, dim=dim)[rank]


def _comm_device(t: torch.Tensor, group) -> torch.device:
    """Device for tensors handed to the group's collectives: the tensor's CUDA device when the
    group has NCCL, else the CPU (gloo)."""
    if t.device.type == "cuda" and "nccl" in str(dist.get_backend(group)).lower():
        return t.device
    return torch.device("cpu")


def _meta(x: torch.Tensor, d: int, device) -> torch.Tensor:
    """[ndim, dtype code, size along d, dims with the one along d as -1 (beyond 9: hashed)]."""
    shape = list(x.shape)
    size_d = shape[d] if shape else 1
    if shape:
        shape[d] = -1
    code = _DTYPES.index(x.dtype) if x.dtype in _DTYPES else 100 + len(str(x.dtype))
    slots = [x.dim(), code, size_d]
    room = _META_SLOTS - 3
    if len(shape) <= room:
        slots += shape + [-9] * (room - len(shape))
    else:
        h = 0
        for s in shape[room - 1:]:
            h = (h * 1000003 + s + 2) % (1 << 61)
        slots += shape[:room - 1] + [-10 - h]
    return torch.tensor(slots, dtype=torch.int64, device=device)


def _gather_meta(x: torch.Tensor, d: int, group) -> List[List[int]]:
    """One all_gather of every rank's ``_meta``."""
    dev = _comm_device(x, group)
    _, world = _group_rank_size(group)
    mine = _meta(x, d, dev)
    out = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(out, mine, group=group)
    return [t.tolist() for t in out]


def _fmt_shape(meta: List[int]) -> str:
    ndim = meta[0]
    dims = [meta[2] if s == -1 else s for s in meta[3:3 + min(ndim, _META_SLOTS - 3)]]
    txt = ", ".join("..." if s <= -10 else str(s) for s in dims)
    return f"({txt}{',' if ndim == 1 else ''})"


def _dtype_name(code: int) -> str:
    return str(_DTYPES[code]) if 0 <= code < len(_DTYPES) else "an unsupported dtype"


@dataclass
class _Layout:
    group: object
    rank: int
    world: int
    sizes: List[int]       # rows of every rank along the split dim
    prev: Optional[int]    # group rank of the neighbour before (None at a global edge)
    next: Optional[int]    # group rank of the neighbour after
    comm_device: torch.device


def _layout(x: torch.Tensor, d: int, group, circular: bool, need: int, name: str,
            what: str = "the stencil radius along the split dim") -> _Layout:
    """Gather every rank's shape, check they agree off the split dim ``d`` and that every rank
    has at least ``need`` rows along it (world > 1), and find the neighbours."""
    rank, world = _group_rank_size(group)
    metas = _gather_meta(x, d, group)
    m0 = metas[0]
    for i, m in enumerate(metas):
        if m[0] != m0[0] or m[1] != m0[1]:
            raise ValueError(
                f"{name}: every rank must pass a tensor of the same dtype and number of dims; "
                f"rank {i} has {m[0]} dims and {_dtype_name(m[1])}, rank 0 has {m0[0]} dims and "
                f"{_dtype_name(m0[1])}")
        if m[3:] != m0[3:]:
            raise ValueError(
                f"{name}: all dims except the split dim ({d}) must agree across ranks; rank {i} "
                f"has shape {_fmt_shape(m)}, rank 0 has {_fmt_shape(m0)}")
    sizes = [m[2] for m in metas]
    if world > 1 and need > 0:
        for i, n in enumerate(sizes):
            if n < need:
                raise ValueError(
                    f"{name}: rank {i} has {n} row(s) along the split dim (dim {d}) but "
                    f"{what} is {need}: with {world} ranks every rank needs at least {need} "
                    f"row(s), since halos come from the adjacent rank only (rows per rank: "
                    f"{sizes})")
    if world == 1:
        prev = nxt = None
    elif circular:
        prev, nxt = (rank - 1) % world, (rank + 1) % world
    else:
        prev = rank - 1 if rank > 0 else None
        nxt = rank + 1 if rank < world - 1 else None
    return _Layout(group, rank, world, sizes, prev, nxt, _comm_device(x, group))


def _check_no_grad(name: str, *tensors: torch.Tensor) -> None:
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        raise NotImplementedError(
            f"{name}: autograd through the distributed ops is not implemented (halos and "
            "all_reduce results are not differentiated across ranks); call it under "
            "torch.no_grad() or with tensors that do not require grad")


# ----------------------------------------------------------------------------- halo exchange

_TAG_DOWN, _TAG_UP = 7101, 7102  # rows sent to the next rank / to the previous rank


class _Halo:
    """Posted halo exchange of ``h`` rows along ``d``: ``top`` (rows from the previous rank) and
    ``bottom`` (rows from the next rank), valid after ``wait()``."""

    def __init__(self, x: torch.Tensor, d: int, h: int, lay: _Layout,
                 into: Tuple[Optional[torch.Tensor], Optional[torch.Tensor]] = (None, None)):
        n = x.shape[d]
        self.top = self.bottom = None
        self._works = []
        self._keep = []
        self._dev = x.device
        # ``into``: where top and bottom go (views of a caller's buffer); received in place when
        # the view is contiguous on the group's device, else through a buffer copied in wait()
        self._into = into
        cdev = lay.comm_device
        shape = list(x.shape)
        shape[d] = h

        def buf(t):
            t = t.contiguous()
            return t if t.device == cdev else t.to(cdev)

        def dst(t):
            if t is not None and t.is_contiguous() and t.device == cdev:
                return t
            return torch.empty(shape, dtype=x.dtype, device=cdev)

        ops = []
        # Order matters for NCCL (it ignores tags and matches a pair's messages in posting
        # order): every rank posts send-down, recv-from-prev, send-up, recv-from-next, so with
        # two ranks and a circular boundary (prev == next) the pairs still line up.
        if lay.next is not None:
            s = buf(x.narrow(d, n - h, h))
            self._keep.append(s)
            ops.append(dist.P2POp(dist.isend, s, group=lay.group, tag=_TAG_DOWN,
                                  group_peer=lay.next))
        if lay.prev is not None:
            self.top = dst(into[0])
            ops.append(dist.P2POp(dist.irecv, self.top, group=lay.group, tag=_TAG_DOWN,
                                  group_peer=lay.prev))
            s = buf(x.narrow(d, 0, h))
            self._keep.append(s)
            ops.append(dist.P2POp(dist.isend, s, group=lay.group, tag=_TAG_UP,
                                  group_peer=lay.prev))
        if lay.next is not None:
            self.bottom = dst(into[1])
            ops.append(dist.P2POp(dist.irecv, self.bottom, group=lay.group, tag=_TAG_UP,
                                  group_peer=lay.next))
        if ops:
            self._works = dist.batch_isend_irecv(ops)

    def wait(self) -> "_Halo":
        for w in self._works:
            w.wait()
        self._works = []
        self._keep = []
        self.top = self._place(self.top, self._into[0])
        self.bottom = self._place(self.bottom, self._into[1])
        return self

    def _place(self, got: Optional[torch.Tensor], into: Optional[torch.Tensor]):
        if got is None or got is into:
            return got
        if into is not None:
            return into.copy_(got)
        return got if got.device == self._dev else got.to(self._dev)


@dataclass
class _OverlapTrial:
    """overlap="auto"'s measurements of one workload: seconds per call of each block, [waiting
    first, overlapping]; the block under way: its calls so far and its start."""
    times: Tuple[List[float], List[float]] = field(default_factory=lambda: ([], []))
    choice: Optional[bool] = None
    calls: int = 0
    t0: float = 0.0


# The decision per workload key (the same on every rank: it holds no rank's own shape).
_overlap_auto: Dict[tuple, _OverlapTrial] = {}


def _check_overlap(name: str, overlap) -> None:
    if not (isinstance(overlap, bool) or overlap == "auto"):
        raise ValueError(f"{name}: overlap must be True, False or \"auto\", got {overlap!r}")


def _halo_stencil_auto(x: torch.Tensor, d: int, r: int, apply: Callable[..., torch.Tensor],
                       lay: _Layout, tag: str) -> torch.Tensor:
    """_halo_stencil with overlap="auto" (module docstring): time both variants on the first
    calls of this workload, in alternate blocks of back-to-back calls, then keep the faster."""
    if x.is_cuda and torch.cuda.is_current_stream_capturing():
        return _halo_stencil(x, d, r, apply, lay, False)
    others = tuple(s for i, s in enumerate(x.shape) if i != d)
    key = (tag, others, x.dtype, x.device.type, d, r, lay.world, tuple(lay.sizes), id(lay.group))
    trial = _overlap_auto.setdefault(key, _OverlapTrial())
    if trial.choice is not None:
        return _halo_stencil(x, d, r, apply, lay, trial.choice)
    overlap = len(trial.times[0]) > len(trial.times[1])  # alternately, waiting first
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    if trial.calls == 0:
        sync()
        trial.t0 = time.perf_counter()
    y = _halo_stencil(x, d, r, apply, lay, overlap)
    trial.calls += 1
    if trial.calls == OVERLAP_BLOCK:
        sync()
        trial.times[overlap].append((time.perf_counter() - trial.t0) / OVERLAP_BLOCK)
        trial.calls = 0
        if len(trial.times[1]) == OVERLAP_TRIALS:
            med = torch.tensor([statistics.median(t) for t in trial.times], dtype=torch.float64,
                               device=lay.comm_device)
            dist.all_reduce(med, op=dist.ReduceOp.MAX, group=lay.group)
            trial.choice = bool(med[1] < med[0])
    return y


def _halo_stencil(x: torch.Tensor, d: int, r: int, apply: Callable[..., torch.Tensor],
                  lay: _Layout, overlap: Union[bool, str], tag: str = "") -> torch.Tensor:
    """One distributed stencil application along split dim ``d`` with radius ``r`` there.
    ``apply(block, free_sms=0)`` is the single-device op (with the global boundary) on a local
    block, leaving ``free_sms`` SMs to other streams. ``tag`` names the op for overlap="auto"."""
    n = x.shape[d]
    if lay.world == 1 or r == 0 or x.numel() == 0:
        return apply(x)
    if overlap == "auto":  # every rank measures (a rank without an interior runs one variant twice)
        return _halo_stencil_auto(x, d, r, apply, lay, tag)
    halo = _Halo(x, d, r, lay)
    if n >= 2 * r:
        if not overlap:
            halo.wait()
        # interior (and global-edge) rows; the r rows at each cut are redone below
        y = apply(x, OVERLAP_FREE_SMS if overlap else 0)
        halo.wait()
        if halo.top is not None:
            blk = torch.cat([halo.top, x.narrow(d, 0, 2 * r)], d)
            y.narrow(d, 0, r).copy_(apply(blk).narrow(d, r, r))
        if halo.bottom is not None:
            blk = torch.cat([x.narrow(d, n - 2 * r, 2 * r), halo.bottom], d)
            y.narrow(d, n - r, r).copy_(apply(blk).narrow(d, r, r))
        return y
    halo.wait()
    parts = [t for t in (halo.top, x, halo.bottom) if t is not None]
    y = apply(torch.cat(parts, d))
    return y.narrow(d, r if halo.top is not None else 0, n).contiguous()


def _stepped_halo(x: torch.Tensor, d: int, r: int, steps: int, apply: Callable[..., torch.Tensor],
                  lay: _Layout, per_pass: Optional[int] = None, overlap: Union[bool, str] = False,
                  tag: str = "") -> torch.Tensor:
    """``steps`` applications of the stencil along split dim ``d`` (radius ``r`` there);
    ``apply(block, steps=k)`` runs k steps of the single-device op (fused on CUDA). The rank's
    block lives in a buffer with ``h = r*K`` halo rows at each cut; each pass receives the
    neighbours' edge rows into them and runs K steps on the whole buffer: the op's boundary at a
    cut spoils ``r`` more rows a step, which never reach the rank's own rows. So a pass costs one
    exchange of ``h`` rows, ``2h`` redundant rows of each step and no copy of the block. K =
    ``per_pass``, or as many steps as the smallest rank's rows allow (a halo comes from the
    adjacent rank only); with K = 1 each step is ``_halo_stencil`` (``overlap``, ``tag``)."""
    if lay.world == 1 or r == 0 or x.numel() == 0:
        return apply(x, steps=steps)
    kmax = min(steps, per_pass if per_pass is not None else max(1, min(lay.sizes) // r))
    if kmax == 1:  # a row a step: the one-step exchange, which can overlap
        for _ in range(steps):
            x = _halo_stencil(x, d, r, apply, lay, overlap, tag)
        return x
    n, h = x.shape[d], r * kmax
    top = h if lay.prev is not None else 0
    bot = h if lay.next is not None else 0
    shape = list(x.shape)
    shape[d] = top + n + bot
    e = torch.empty(shape, dtype=x.dtype, device=x.device)
    e.narrow(d, top, n).copy_(x)
    done = 0
    while done < steps:
        k = min(kmax, steps - done)
        _Halo(e.narrow(d, top, n), d, h, lay,
              into=(e.narrow(d, 0, h) if top else None, e.narrow(d, top + n, h) if bot else None)).wait()
        e = apply(e, steps=k)
        done += k
    return e.narrow(d, top, n).contiguous()


def _check_steps(name: str, steps: int) -> None:
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"{name}: steps must be an int >= 1, got {steps!r}")


def _check_boundary(name: str, boundary: str) -> None:
    if boundary not in _cops.BOUNDARIES:
        raise ValueError(f"{name}: boundary must be one of {list(_cops.BOUNDARIES)}, "
                         f"got {boundary!r}")


# ----------------------------------------------------------------------------- stencils

def stencil1d(x_local: torch.Tensor, weights: torch.Tensor, *, dim: int = -1,
              boundary: str = "zero", group=None, overlap: Union[bool, str] = "auto",
              mechanism: str = "auto", stages: int = 0,
              split_dim: Optional[int] = None, steps: int = 1) -> torch.Tensor:
    """Distributed ``cupipe.stencil1d``: ``x_local`` is this rank's block of a tensor split
    along ``split_dim`` (default: the stencil dim ``dim``) across the ranks of ``group``, in rank
    order. Returns this rank's block of ``cupipe.stencil1d(x_global, weights, dim=dim,
    boundary=boundary)``. Exchanges ``r = (len(weights)-1)//2`` halo rows with the neighbour
    ranks; when ``split_dim`` is not the stencil dim no communication is needed (the local op).
    ``steps=k``: the stencil k times, an ``r*K`` halo exchanged once per K steps (module
    docstring). See the module docstring for the algorithm, ``overlap`` and the preconditions."""
    name = "cupipe.distributed.stencil1d"
    _check_boundary(name, boundary)
    _check_overlap(name, overlap)
    _check_steps(name, steps)
    _check_no_grad(name, x_local, weights)
    if weights.dim() != 1 or weights.shape[0] % 2 == 0:
        raise ValueError(f"{name}: weights must be 1-D of odd length 2r+1, got shape "
                         f"{tuple(weights.shape)}")
    nd = max(x_local.dim(), 1)
    if not -nd <= dim < nd:
        raise IndexError(f"{name}: dim {dim} out of range for a {x_local.dim()}-D tensor")
    dim_n = dim % nd
    sd = dim_n if split_dim is None else split_dim
    if not -nd <= sd < nd:
        raise IndexError(f"{name}: split_dim {split_dim} out of range for a "
                         f"{x_local.dim()}-D tensor")

    def apply(blk, free_sms=0, steps=1):
        if free_sms and blk.is_cuda:
            return _ops._stencil1d_ex(blk, weights, dim_n, boundary, mechanism, stages, free_sms)
        return _ops.stencil1d(blk, weights, dim=dim_n, boundary=boundary, mechanism=mechanism,
                              stages=stages, steps=steps)

    if x_local.dim() == 0 or sd % nd != dim_n:
        return _ops.stencil1d(x_local, weights, dim=dim_n, boundary=boundary, mechanism=mechanism,
                              stages=stages, steps=steps)
    r = (weights.shape[0] - 1) // 2
    lay = _layout(x_local, dim_n, group, boundary == "circular", r, name)
    return _stepped_halo(x_local, dim_n, r, steps, apply, lay, None, overlap,
                         f"stencil1d:{weights.shape[0]}:{boundary}")


def _split_stencil(op: str, nd: int, x_local: torch.Tensor, weights: torch.Tensor,
                   apply: Callable[..., torch.Tensor], boundary: str, group, overlap: Union[bool, str],
                   steps: int, name: str = "", per_pass: Optional[int] = None) -> torch.Tensor:
    """stencil2d and stencil3d split along their first stencil dim (dim -nd): the checks, then one
    halo exchange (or one per pass of several steps) along it. ``apply`` is the local op;
    ``per_pass`` fixes the steps a pass (heat_steps' ``halo_width``)."""
    name = name or f"cupipe.distributed.{op}"
    _check_boundary(name, boundary)
    _check_overlap(name, overlap)
    _check_steps(name, steps)
    _check_no_grad(name, x_local, weights)
    if weights.dim() != nd or any(k % 2 == 0 for k in weights.shape):
        raise ValueError(f"{name}: weights must be {nd}-D of odd sizes 2r+1, got shape {tuple(weights.shape)}")
    if x_local.dim() < nd:
        raise ValueError(f"{name}: x_local must have at least {nd} dims, got {x_local.dim()}")
    d = x_local.dim() - nd
    r = (weights.shape[0] - 1) // 2
    if per_pass is not None and per_pass > 1:
        lay = _layout(x_local, d, group, boundary == "circular", r * per_pass, name, what="halo_width")
    else:
        lay = _layout(x_local, d, group, boundary == "circular", r, name)
    return _stepped_halo(x_local, d, r, steps, apply, lay, per_pass, overlap,
                         f"{op}:{tuple(weights.shape)}:{boundary}")


def _apply2d(weights: torch.Tensor, boundary: str, mechanism: str, stages: int) -> Callable[..., torch.Tensor]:
    """The local stencil2d for the halo helpers: ``apply(block, free_sms=0, steps=1)``."""
    def apply(blk, free_sms=0, steps=1):
        if free_sms and blk.is_cuda:
            return _ops._stencil2d_ex(blk, weights, boundary, mechanism, stages, free_sms)
        return _ops.stencil2d(blk, weights, boundary=boundary, mechanism=mechanism, stages=stages,
                              steps=steps)
    return apply


def stencil2d(x_local: torch.Tensor, weights: torch.Tensor, *, boundary: str = "zero",
              group=None, overlap: Union[bool, str] = "auto", mechanism: str = "auto",
              stages: int = 0, steps: int = 1) -> torch.Tensor:
    """Distributed ``cupipe.stencil2d``: ``x_local`` (``(..., h_rank, W)``) is this rank's block
    of rows (dim -2) of a tensor split across the ranks of ``group`` in rank order. Returns this
    rank's rows of ``cupipe.stencil2d(x_global, weights, boundary=boundary)``. Exchanges ``ry``
    halo rows (``weights`` is ``(2ry+1, 2rx+1)``) with the neighbour ranks; ``steps=k``: the
    stencil k times, an ``ry*K`` halo once per K steps. See the module docstring for the
    algorithm, ``overlap`` and the preconditions."""
    return _split_stencil("stencil2d", 2, x_local, weights, _apply2d(weights, boundary, mechanism, stages),
                          boundary, group, overlap, steps)


def stencil3d(x_local: torch.Tensor, weights: torch.Tensor, *, boundary: str = "zero",
              group=None, overlap: Union[bool, str] = "auto", mechanism: str = "auto",
              stages: int = 0, steps: int = 1) -> torch.Tensor:
    """Distributed ``cupipe.stencil3d``: ``x_local`` (``(..., d_rank, H, W)``) is this rank's block
    of planes (dim -3) of a volume split across the ranks of ``group`` in rank order. Returns this
    rank's planes of ``cupipe.stencil3d(x_global, weights, boundary=boundary)``. Exchanges ``rz``
    halo planes (``weights`` is ``(2rz+1, 2ry+1, 2rx+1)``) with the neighbour ranks. ``overlap``
    issues the interior while the halos are in flight (the 3-D kernel leaves no SMs free: its
    blocks are not persistent, so the exchange's kernel starts between them); ``steps=k``: the
    stencil k times, an ``rz*K`` halo once per K steps. See the module docstring for the algorithm
    and the preconditions."""
    def apply(blk, free_sms=0, steps=1):
        return _ops.stencil3d(blk, weights, boundary=boundary, mechanism=mechanism, stages=stages,
                              steps=steps)

    return _split_stencil("stencil3d", 3, x_local, weights, apply, boundary, group, overlap, steps)


# ----------------------------------------------------------------------------- heat equation

def heat_kernel(alpha: float, *, dtype: torch.dtype = torch.float64,
                device=None) -> torch.Tensor:
    """3x3 weights of one explicit heat step ``u + alpha * laplacian(u)`` (5-point Laplacian):
    ``[[0, a, 0], [a, 1 - 4a, a], [0, a, 0]]``. Stable for ``0 <= alpha <= 0.25``."""
    a = float(alpha)
    return torch.tensor([[0.0, a, 0.0], [a, 1.0 - 4.0 * a, a], [0.0, a, 0.0]], dtype=dtype,
                        device=device)


def heat_steps(u_local: torch.Tensor, steps: int, alpha: float, *, boundary: str = "zero",
               group=None, halo_width: Optional[int] = None, overlap: Union[bool, str] = "auto",
               mechanism: str = "auto", stages: int = 0) -> torch.Tensor:
    """Advance the 2-D heat equation ``u <- u + alpha * laplacian(u)`` ``steps`` times on a grid
    split by rows (dim -2) across ``group``; returns this rank's rows of the result: the
    distributed ``stencil2d(u_local, heat_kernel(alpha), boundary=boundary, steps=steps)``.

    ``halo_width=k > 1`` exchanges a ``k``-row halo once per ``k`` steps and runs the ``k``
    steps on the block and its halos as one fused call (``steps=k``; ``k``-times fewer messages
    for ``k`` redundant rows per cut per step; ``overlap`` is ignored then); every rank needs at
    least ``halo_width`` rows when there are two or more ranks. ``halo_width=1`` exchanges a
    1-row halo every step (``overlap`` as in ``stencil2d``). The default, ``None``, takes as many
    steps a pass as the smallest rank's rows allow, as ``stencil2d(..., steps=...)`` does. The
    computation runs in ``u_local``'s dtype."""
    name = "cupipe.distributed.heat_steps"
    if not isinstance(steps, int) or steps < 0:
        raise ValueError(f"{name}: steps must be an int >= 0, got {steps!r}")
    if halo_width is not None and (not isinstance(halo_width, int) or halo_width < 1):
        raise ValueError(f"{name}: halo_width must be None or an int >= 1, got {halo_width!r}")
    if u_local.dim() < 2:
        raise ValueError(f"{name}: u_local must have at least 2 dims, got {u_local.dim()}")
    w = heat_kernel(alpha, device=u_local.device)
    if steps == 0:
        _check_boundary(name, boundary)
        _check_overlap(name, overlap)
        _check_no_grad(name, u_local)
        return u_local.contiguous().clone()
    return _split_stencil("stencil2d", 2, u_local, w, _apply2d(w, boundary, mechanism, stages),
                          boundary, group, overlap, steps, name, per_pass=halo_width)


# ----------------------------------------------------------------------------- reduce

def _acc_dtype(x_dtype: torch.dtype, dtype: Optional[torch.dtype]) -> torch.dtype:
    return torch.float64 if torch.float64 in (x_dtype, dtype) else torch.float32


def reduce(x_local: torch.Tensor, op: str = "sum", dim: Union[int, Sequence[int], None] = None,
           keepdim: bool = False, *, group=None, split_dim: int = 0,
           dtype: Optional[torch.dtype] = None, correction: float = 1, ord: float = 2,
           mechanism: str = "auto", stages: int = 0) -> torch.Tensor:
    """Distributed ``cupipe.reduce``: ``x_local`` is this rank's block of a tensor split along
    ``split_dim`` across ``group``. When ``split_dim`` is reduced, returns the full result of
    ``cupipe.reduce(x_global, op, dim, keepdim, dtype=dtype)`` on every rank (local reduction +
    one ``all_reduce``); otherwise returns this rank's block of it with no communication.

    sum/mean: partial sums in fp32 (fp64 when ``x`` or ``dtype`` is fp64), summed across ranks,
    divided by the global count for mean, cast once to the result dtype. amax/amin: MAX/MIN
    all_reduce, with NaN propagated like torch (NaN anywhere in a reduced slice gives NaN).
    var/std, logsumexp, norm, argmax/argmin (``correction`` and ``ord`` as in ``cupipe.reduce``):
    each rank's partial states (count, mean and squared deviations; logsumexp; the local norm;
    the best value with its global index) gathered with one ``all_gather`` and merged in rank
    order: the same result on every rank, bit-identical on repeat. Ranks may hold zero rows, as
    long as the reduced slices are not empty globally."""
    name = "cupipe.distributed.reduce"
    _check_no_grad(name, x_local)
    if op not in _cops.REDUCE_OPS:
        raise ValueError(f"{name}: op must be one of {list(_cops.REDUCE_OPS)}, got {op!r}")
    if x_local.dim() == 0:
        raise ValueError(f"{name}: x_local is 0-dim; a split tensor has at least one dim")
    nd = x_local.dim()
    if not -nd <= split_dim < nd:
        raise IndexError(f"{name}: split_dim {split_dim} out of range for a {nd}-D tensor")
    sd = split_dim % nd
    if isinstance(dim, int):
        dims_in = [dim]
    else:
        dims_in = [] if dim is None else list(dim)
    for dd in dims_in:
        if not -nd <= dd < nd:
            raise IndexError(f"{name}: dim {dd} out of range for a {nd}-D tensor")
    dims = sorted({dd % nd for dd in dims_in}) if dims_in else list(range(nd))

    def local(t, o, dt, **kw):
        # correction and ord reach the ops that take them, and the op called (for its errors)
        if o in ("var", "std") or o == op:
            kw.setdefault("correction", correction)
        if o == "norm" or o == op:
            kw.setdefault("ord", ord)
        return _cops.reduce(t, o, dim, keepdim, dtype=dt, mechanism=mechanism, stages=stages, **kw)

    if sd not in dims:
        return local(x_local, op, dtype)
    if op not in ("sum", "mean", "amax", "amin"):
        return _reduce_states(x_local, op, dim, dims, sd, keepdim, dtype, correction, ord, group, local, name)
    if op in ("amax", "amin") and dtype is not None:
        return local(x_local, op, dtype)  # the op's own error for dtype= with amax/amin
    if dtype is not None and dtype not in _DTYPES:
        return local(x_local, op, dtype)  # the op's own dtype error

    lay = _layout(x_local, sd, group, False, 0, name)
    n_glob = sum(lay.sizes)
    shape = list(x_local.shape)
    other = 1
    for dd in dims:
        if dd != sd:
            other *= shape[dd]
    cdev = lay.comm_device

    if op in ("sum", "mean"):
        out_dtype = dtype if dtype is not None else x_local.dtype
        acc = _acc_dtype(x_local.dtype, dtype)
        part = local(x_local, "sum", acc)
        buf = part.to(cdev).contiguous()
        dist.all_reduce(buf, op=dist.ReduceOp.SUM, group=lay.group)
        if op == "mean":
            buf = buf / float(n_glob * other)  # 0/0 = NaN for an empty mean, as in torch
        return buf.to(device=x_local.device, dtype=out_dtype)

    # amax / amin
    if n_glob == 0 or other == 0:
        return local(x_local, op, None)  # empty reduction: the op's own error (on every rank)
    acc = torch.float64 if x_local.dtype == torch.float64 else torch.float32
    ident = float("-inf") if op == "amax" else float("inf")
    out_shape = [1 if i in dims else s for i, s in enumerate(shape)] if keepdim else \
        [s for i, s in enumerate(shape) if i not in dims]
    if x_local.shape[sd] == 0:
        part = torch.full(out_shape, ident, dtype=acc, device=cdev)
    else:
        part = local(x_local, op, None).to(device=cdev, dtype=acc)
    nan = torch.isnan(part)
    vals = torch.where(nan, torch.full_like(part, ident), part)
    flag = nan.to(acc) if op == "amax" else -nan.to(acc)
    buf = torch.cat([vals.reshape(-1), flag.reshape(-1)])
    dist.all_reduce(buf, op=dist.ReduceOp.MAX if op == "amax" else dist.ReduceOp.MIN,
                    group=lay.group)
    m = vals.numel()
    res = torch.where(buf[m:] != 0, torch.full_like(buf[:m], float("nan")), buf[:m])
    return res.reshape(out_shape).to(device=x_local.device, dtype=x_local.dtype)


def _reduce_states(x_local, op, dim, dims, sd, keepdim, dtype, correction, ord, group, local, name):
    """var/std, logsumexp, norm, argmax/argmin over dims that include the split dim: one
    all_gather of each rank's partial state, merged in rank order."""
    # The op's own errors for its arguments, on every rank alike (a one-element CPU call: no launch).
    local(torch.zeros([1] * x_local.dim(), dtype=x_local.dtype), op, dtype)
    lay = _layout(x_local, sd, group, False, 0, name)
    shape = list(x_local.shape)
    gshape = list(shape)
    gshape[sd] = sum(lay.sizes)
    n_glob = math.prod(gshape[d] for d in dims)
    out_shape = [1 if i in dims else s for i, s in enumerate(shape)] if keepdim else \
        [s for i, s in enumerate(shape) if i not in dims]
    cdev = lay.comm_device
    acc = _acc_dtype(x_local.dtype, dtype)
    empty = x_local.shape[sd] == 0
    xa = x_local if x_local.dtype == acc else x_local.to(acc)  # partial states in the accumulation dtype

    def gather(t):
        t = t.to(device=cdev, dtype=acc if t.is_floating_point() else t.dtype).contiguous()
        out = [torch.empty_like(t) for _ in range(lay.world)]
        dist.all_gather(out, t, group=lay.group)
        return out

    def full(v):
        return torch.full(out_shape, v, dtype=acc, device=x_local.device)

    if n_glob == 0 and op in ("argmax", "argmin"):
        return local(torch.empty(gshape, dtype=x_local.dtype, device=x_local.device), op, dtype)  # its error
    if op in ("var", "std"):
        n = math.prod(shape[d] for d in dims)
        mean = full(0.0) if empty else local(xa, "mean", None)
        m2 = full(0.0) if empty else local(xa, "var", None, correction=0) * n
        counts = [n_r * math.prod(shape[d] for d in dims if d != sd) for n_r in lay.sizes]
        tot_n, tot_mean, tot_m2 = 0, None, None
        for n_r, mean_r, m2_r in zip(counts, gather(mean), gather(m2)):  # Chan's merge, rank order
            if n_r == 0:
                continue
            if tot_mean is None:
                tot_n, tot_mean, tot_m2 = n_r, mean_r, m2_r
                continue
            d = mean_r - tot_mean
            nn = tot_n + n_r
            tot_mean = tot_mean + d * (n_r / nn)
            tot_m2 = tot_m2 + m2_r + d * d * (tot_n * n_r / nn)
            tot_n = nn
        if tot_m2 is None:  # nothing anywhere: nan, as torch's
            tot_m2 = torch.full(out_shape, float("nan"), dtype=acc, device=cdev)
        var = tot_m2 / max(n_glob - correction, 0)
        res = var.sqrt() if op == "std" else var
        return res.to(device=x_local.device, dtype=x_local.dtype)
    if op == "logsumexp":
        part = full(float("-inf")) if empty else local(xa, "logsumexp", None)
        res = torch.logsumexp(torch.stack(gather(part)), 0)
        return res.to(device=x_local.device, dtype=x_local.dtype)
    if op == "norm":
        if n_glob == 0 and math.isinf(ord):
            return local(torch.empty(gshape, dtype=x_local.dtype, device=x_local.device), op, dtype)  # its error
        ident = float("inf") if ord == -math.inf else 0.0
        part = full(ident) if empty else local(xa, "norm", None)
        # The global norm is the norm of the ranks' norms (ord 0: their counts add up).
        res = torch.linalg.vector_norm(torch.stack(gather(part)), 1 if ord == 0 else ord, dim=0)
        return res.to(device=x_local.device, dtype=dtype if dtype is not None else x_local.dtype)
    # argmax / argmin: the best value of each rank with its index in the global tensor
    offset = sum(lay.sizes[:lay.rank])
    if empty:
        idx = torch.zeros(out_shape, dtype=torch.int64, device=x_local.device)
        val = full(float("nan"))
    else:
        idx = local(x_local, op, None)
        d0 = dim if dim is None else dims[0]
        if d0 is None:
            coords = list(torch.unravel_index(idx, shape))
            coords[sd] = coords[sd] + offset
            val = x_local.reshape(-1)[idx].to(acc)
            idx = torch.zeros_like(idx)
            for k, c in enumerate(coords):  # the flat index in the global shape
                idx = idx * gshape[k] + c
        else:
            val = torch.gather(xa, d0, idx if keepdim else idx.unsqueeze(d0))
            val = val if keepdim else val.squeeze(d0)
            idx = idx + offset
    valid = [n_r > 0 for n_r in lay.sizes]
    best_v, best_i = None, None
    for ok, v_r, i_r in zip(valid, gather(val), gather(idx)):  # rank order: smaller indices first
        if not ok:
            continue
        if best_v is None:
            best_v, best_i = v_r, i_r
            continue
        nan_r, nan_b = torch.isnan(v_r), torch.isnan(best_v)
        better = (v_r > best_v) if op == "argmax" else (v_r < best_v)
        take = (nan_r & ~nan_b) | (~nan_r & ~nan_b & better)
        best_v, best_i = torch.where(take, v_r, best_v), torch.where(take, i_r, best_i)
    return best_i.to(x_local.device)


# ----------------------------------------------------------------------------- gather

def gather(x_local: torch.Tensor, dim: int = 0, *, group=None) -> torch.Tensor:
    """The whole tensor, on every rank: the ranks' blocks concatenated along ``dim`` in rank
    order (uneven sizes allowed; one all_gather of the sizes, one of the padded blocks). For
    checking results and small grids, not for large ones."""
    name = "cupipe.distributed.gather"
    nd = max(x_local.dim(), 1)
    d = dim % nd
    lay = _layout(x_local, d, group, False, 0, name)
    if lay.world == 1:
        return x_local.contiguous().clone()
    mx = max(lay.sizes)
    cdev = lay.comm_device
    shape = list(x_local.shape)
    shape[d] = mx
    padded = torch.zeros(shape, dtype=x_local.dtype, device=cdev)
    padded.narrow(d, 0, x_local.shape[d]).copy_(x_local)
    out = [torch.empty_like(padded) for _ in range(lay.world)]
    dist.all_gather(out, padded, group=lay.group)
    full = torch.cat([t.narrow(d, 0, s) for t, s in zip(out, lay.sizes)], d)
    return full.to(x_local.device)
