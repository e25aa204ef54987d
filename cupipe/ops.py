"""Python wrappers, fake (meta) kernels and autograd for ``torch.ops.cupipe.*``.

Each public function has exactly the signature of its op (DESIGN.md's API table) and calls it;
the op itself does all argument checking, in C++, on every backend.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Union

import torch

from . import tuning as _tuning

MECHANISMS = ("auto", "sync", "pipeline", "pipeline_thread", "primitives", "cg", "barrier",
              "specialized", "tma")
BOUNDARIES = ("zero", "replicate", "circular", "reflect")
REDUCE_OPS = ("sum", "mean", "amax", "amin")

_ops = torch.ops.cupipe


# ----------------------------------------------------------------------------- public functions

def stream_copy(x: torch.Tensor, *, mechanism: str = "auto", stages: int = 0,
                vec_bytes: int = 0) -> torch.Tensor:
    """``x.clone()`` (a contiguous result), moved through the engine's shared-memory stage ring.

    Args:
        x: any dtype, any strides (non-contiguous input is made contiguous once, up front).
        mechanism: how tiles move global->shared: one of ``cupipe.MECHANISMS``; ``"auto"`` picks
            the fastest measured one for the device.
        stages: depth of the stage ring, 1..8; 0 = auto.
        vec_bytes: width of one async copy, 4, 8 or 16; 0 = auto. Narrowed automatically when
            the input's and output's addresses do not allow it.

    With ``mechanism="auto"`` on a CUDA tensor, an entry of the tuning cache written by
    ``cupipe.tune`` for this (op, shape class, dtype, device) takes precedence over the shipped
    table (``cupipe.explain`` says which applies); ``torch.ops.cupipe.*`` uses the table only.
    """
    if mechanism == "auto":
        mechanism, stages, vec_bytes = _tuning.cached_config("stream_copy", x, mechanism, stages,
                                                             vec_bytes)
    return _ops.stream_copy(x, mechanism=mechanism, stages=stages, vec_bytes=vec_bytes)


def stencil1d(x: torch.Tensor, weights: torch.Tensor, *, dim: int = -1, boundary: str = "zero",
              mechanism: str = "auto", stages: int = 0) -> torch.Tensor:
    """1-D stencil (cross-correlation, like ``F.conv1d``) along ``dim``.

    ``out[i] = sum_k weights[k] * x[i + k - r]`` with ``weights`` of odd length ``2r+1``; indices
    outside the dim follow ``boundary`` (``zero``, ``replicate``, ``circular``, ``reflect`` =
    ``F.pad`` modes; ``reflect`` needs size > r). Accumulates in fp32 (fp64 for fp64 ``x``).
    Differentiable w.r.t. ``x`` and ``weights``. ``mechanism="auto"`` consults the tuning cache
    first, like ``stream_copy``.
    """
    if mechanism == "auto":
        mechanism, stages, _ = _tuning.cached_config("stencil1d", x, mechanism, stages,
                                                     weights=weights, dim=dim)
    return _ops.stencil1d(x, weights, dim=dim, boundary=boundary, mechanism=mechanism, stages=stages)


def stencil2d(x: torch.Tensor, weights: torch.Tensor, *, boundary: str = "zero",
              mechanism: str = "auto", stages: int = 0) -> torch.Tensor:
    """2-D stencil over the last two dims (any leading batch dims), ``weights`` of shape
    ``(2ry+1, 2rx+1)``. The zero boundary equals
    ``F.conv2d(x.reshape(-1, 1, H, W), weights[None, None], padding=(ry, rx))``.
    Differentiable w.r.t. ``x`` and ``weights``. ``mechanism="auto"`` consults the tuning cache
    first, like ``stream_copy``.
    """
    if mechanism == "auto":
        mechanism, stages, _ = _tuning.cached_config("stencil2d", x, mechanism, stages,
                                                     weights=weights)
    return _ops.stencil2d(x, weights, boundary=boundary, mechanism=mechanism, stages=stages)


def reduce(x: torch.Tensor, op: str = "sum", dim: Union[int, Sequence[int], None] = None,
           keepdim: bool = False, *, dtype: Optional[torch.dtype] = None, mechanism: str = "auto",
           stages: int = 0) -> torch.Tensor:
    """``getattr(torch, op)(x, dim, keepdim)`` for ``op`` in sum, mean, amax, amin.

    ``dim`` None (or ``[]``) reduces everything. fp16/bf16 accumulate in fp32. ``dtype`` (sum and
    mean only) sets the result dtype as in ``torch.sum``. Differentiable w.r.t. ``x``.
    ``mechanism="auto"`` consults the tuning cache first, like ``stream_copy``.
    """
    if isinstance(dim, int):
        dim = [dim]
    elif dim is not None:
        dim = list(dim)
    if mechanism == "auto":
        mechanism, stages, _ = _tuning.cached_config("reduce", x, mechanism, stages, dim=dim)
    return _ops.reduce(x, op, dim, keepdim, dtype=dtype, mechanism=mechanism, stages=stages)


# ----------------------------------------------------------------------------- fake kernels

@torch.library.register_fake("cupipe::stream_copy")
def _stream_copy_fake(x, *, mechanism="auto", stages=0, vec_bytes=0):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@torch.library.register_fake("cupipe::stencil1d")
def _stencil1d_fake(x, weights, *, dim=-1, boundary="zero", mechanism="auto", stages=0):
    torch._check(weights.dim() == 1, lambda: "cupipe.stencil1d: weights must be 1-D")
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@torch.library.register_fake("cupipe::stencil2d")
def _stencil2d_fake(x, weights, *, boundary="zero", mechanism="auto", stages=0):
    torch._check(weights.dim() == 2, lambda: "cupipe.stencil2d: weights must be 2-D")
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _reduced_dims(ndim: int, dim: Optional[List[int]]) -> List[int]:
    if dim is None or len(dim) == 0:
        return list(range(ndim))
    lim = max(ndim, 1)
    return sorted({(d + lim) % lim for d in dim}) if ndim > 0 else []


def _reduce_out_shape(shape, dims, keepdim):
    if keepdim:
        return [1 if i in dims else s for i, s in enumerate(shape)]
    return [s for i, s in enumerate(shape) if i not in dims]


@torch.library.register_fake("cupipe::reduce")
def _reduce_fake(x, op="sum", dim=None, keepdim=False, *, dtype=None, mechanism="auto", stages=0):
    dims = _reduced_dims(x.dim(), dim)
    shape = _reduce_out_shape(list(x.shape), dims, keepdim)
    return torch.empty(shape, dtype=dtype if dtype is not None else x.dtype, device=x.device)


# ----------------------------------------------------------------------------- autograd

# setup_context gets the positional inputs as `inputs` and the keyword-only ones as
# `keyword_only_inputs` (defaults filled in); backward returns one gradient per positional input.

def _stream_copy_setup(ctx, inputs, keyword_only_inputs, output):
    pass


def _stream_copy_backward(ctx, grad):
    return grad


torch.library.register_autograd("cupipe::stream_copy", _stream_copy_backward,
                                setup_context=_stream_copy_setup)


def _boundary_index(n: int, lo: int, hi: int, boundary: str, device) -> torch.Tensor:
    """Source index, for each padded position -lo .. n+hi-1, under ``boundary`` (-1 = zero)."""
    i = torch.arange(-lo, n + hi, device=device)
    inside = (i >= 0) & (i < n)
    if boundary == "zero":
        return torch.where(inside, i, torch.full_like(i, -1))
    if boundary == "replicate":
        return i.clamp(0, n - 1)
    if boundary == "circular":
        return torch.remainder(i, n)
    # reflect: mirror without repeating the edge
    if n == 1:
        return torch.zeros_like(i)
    period = 2 * (n - 1)
    m = torch.remainder(i, period)
    return torch.where(m < n, m, period - m)


def _source_index(i: int, n: int, boundary: str) -> int:
    """``_boundary_index`` for one out-of-range position ``i`` (boundary != zero)."""
    if boundary == "replicate":
        return 0 if i < 0 else n - 1
    if boundary == "circular":
        return i % n
    if n == 1:
        return 0
    period = 2 * (n - 1)
    m = i % period
    return m if m < n else period - m


def _pad_along(t: torch.Tensor, dim: int, r: int, boundary: str) -> torch.Tensor:
    """``t`` extended by ``r`` entries on both sides of ``dim`` as the boundary reads them."""
    if r == 0:
        return t
    n = t.shape[dim]
    idx = _boundary_index(n, r, r, boundary, t.device)
    if boundary == "zero":
        shape = list(t.shape)
        shape[dim] = r
        z = t.new_zeros(shape)
        return torch.cat([z, t, z], dim=dim)
    return t.index_select(dim, idx)


def _fold_along(gp: torch.Tensor, dim: int, n: int, r: int, boundary: str) -> torch.Tensor:
    """Adjoint of ``_pad_along``: fold the 2r padded entries of ``gp`` back onto the entries
    they were read from (in a fixed order, so it is deterministic)."""
    if r == 0:
        return gp
    out = gp.narrow(dim, r, n).clone()
    if boundary == "zero":
        return out
    # Source indices from Python ints (not a tensor's .tolist()), so that tracing under
    # torch.compile sees plain (or backed symbolic) sizes rather than data-dependent values.
    for p in list(range(r)) + list(range(n + r, n + 2 * r)):
        src = _source_index(p - r, n, boundary)
        out.narrow(dim, src, 1).add_(gp.narrow(dim, p, 1))
    return out


def _acc_dtype(t: torch.Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _empty_grads(ctx, grad, weights):
    """Gradients of a stencil whose input has no elements: an empty grad for x, zeros for the
    weights (no product contributed to the output)."""
    grad_x = grad.new_zeros(ctx.x_shape) if ctx.needs_input_grad[0] else None
    grad_w = torch.zeros_like(weights) if ctx.needs_input_grad[1] else None
    return grad_x, grad_w


def _stencil1d_setup(ctx, inputs, keyword_only_inputs, output):
    x, weights = inputs
    kw = keyword_only_inputs
    ctx.dim, ctx.boundary = kw["dim"], kw["boundary"]
    ctx.mechanism, ctx.stages = kw["mechanism"], kw["stages"]
    ctx.save_for_backward(x if ctx.needs_input_grad[1] else None, weights)
    ctx.x_shape = x.shape


def _stencil1d_backward(ctx, grad):
    x, weights = ctx.saved_tensors
    dim = ctx.dim % len(ctx.x_shape)
    r = (weights.shape[0] - 1) // 2
    n = ctx.x_shape[dim]
    grad_x = grad_w = None
    if _numel(ctx.x_shape) == 0:
        # Nothing was read: the boundary index maps below are undefined for a size-0 dim.
        return _empty_grads(ctx, grad, weights)
    if ctx.needs_input_grad[0]:
        # d/dx of a correlation is a correlation of the padded gradient with flipped weights,
        # folded back through the boundary's padding (its adjoint).
        gp = _pad_along(grad, dim, r, "zero")
        gp = stencil1d(gp, weights.flip(0), dim=dim, boundary="zero", mechanism=ctx.mechanism,
                       stages=ctx.stages)
        grad_x = _fold_along(gp, dim, n, r, ctx.boundary)
    if ctx.needs_input_grad[1]:
        acc = _acc_dtype(x)
        xp = _pad_along(x, dim, r, ctx.boundary).to(acc)
        g = grad.to(acc)
        grad_w = torch.stack([(g * xp.narrow(dim, k, n)).sum() for k in range(2 * r + 1)])
        grad_w = grad_w.to(weights.dtype)
    return grad_x, grad_w


torch.library.register_autograd("cupipe::stencil1d", _stencil1d_backward,
                                setup_context=_stencil1d_setup)


def _stencil2d_setup(ctx, inputs, keyword_only_inputs, output):
    x, weights = inputs
    kw = keyword_only_inputs
    ctx.boundary, ctx.mechanism, ctx.stages = kw["boundary"], kw["mechanism"], kw["stages"]
    ctx.save_for_backward(x if ctx.needs_input_grad[1] else None, weights)
    ctx.x_shape = x.shape


def _stencil2d_backward(ctx, grad):
    x, weights = ctx.saved_tensors
    ry, rx = (weights.shape[0] - 1) // 2, (weights.shape[1] - 1) // 2
    ny, nx = ctx.x_shape[-2], ctx.x_shape[-1]
    nd = len(ctx.x_shape)
    grad_x = grad_w = None
    if _numel(ctx.x_shape) == 0:
        return _empty_grads(ctx, grad, weights)
    if ctx.needs_input_grad[0]:
        gp = _pad_along(_pad_along(grad, nd - 2, ry, "zero"), nd - 1, rx, "zero")
        gp = stencil2d(gp, weights.flip(0, 1), boundary="zero", mechanism=ctx.mechanism,
                       stages=ctx.stages)
        grad_x = _fold_along(_fold_along(gp, nd - 2, ny, ry, ctx.boundary), nd - 1, nx, rx,
                             ctx.boundary)
    if ctx.needs_input_grad[1]:
        acc = _acc_dtype(x)
        xp = _pad_along(_pad_along(x, nd - 2, ry, ctx.boundary), nd - 1, rx, ctx.boundary).to(acc)
        g = grad.to(acc)
        rows = []
        for a in range(2 * ry + 1):
            xa = xp.narrow(nd - 2, a, ny)
            rows.append(torch.stack([(g * xa.narrow(nd - 1, c, nx)).sum()
                                     for c in range(2 * rx + 1)]))
        grad_w = torch.stack(rows).to(weights.dtype)
    return grad_x, grad_w


torch.library.register_autograd("cupipe::stencil2d", _stencil2d_backward,
                                setup_context=_stencil2d_setup)


def _reduce_setup(ctx, inputs, keyword_only_inputs, output):
    x, ctx.op, dim, ctx.keepdim = inputs
    ctx.dims = _reduced_dims(x.dim(), dim)
    ctx.x_shape = x.shape
    ctx.x_dtype = x.dtype
    if ctx.op in ("amax", "amin"):
        ctx.save_for_backward(x, output)
    else:
        ctx.save_for_backward()


def _reduce_backward(ctx, grad):
    g = grad
    if not ctx.keepdim:
        for d in ctx.dims:  # ascending, so each unsqueeze lands where the dim was
            g = g.unsqueeze(d)
    if ctx.op == "sum":
        gx = g.expand(ctx.x_shape)
    elif ctx.op == "mean":
        count = 1
        for d in ctx.dims:
            count *= ctx.x_shape[d]
        gx = g.expand(ctx.x_shape) / count
    else:
        x, out = ctx.saved_tensors
        if not ctx.keepdim:
            for d in ctx.dims:
                out = out.unsqueeze(d)
        # Like torch: the gradient is split evenly among the tied extrema.
        mask = (x == out).to(g.dtype)
        count = mask.sum(dim=ctx.dims, keepdim=True) if ctx.dims else mask
        gx = mask * (g / count)
    return gx.to(ctx.x_dtype).contiguous(), None, None, None


torch.library.register_autograd("cupipe::reduce", _reduce_backward, setup_context=_reduce_setup)
