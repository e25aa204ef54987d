"""torch.vmap rules for the cupipe ops (``torch.library.register_vmap``).

Without a rule torch.vmap runs an op once per sample (its batching fallback, with a warning). Every
op here already takes leading batch dims, so a batched input only needs its vmapped dim moved to
the front and the op's dims shifted past it: one call for the whole batch. Per-sample stencil
weights (a batched ``weights``) have no such form and run one call per sample, as do the
weight-gradient ops under per-sample weight gradients (``vmap(grad(...))``): they sum over every
batch dim, and each sample needs its own sum.

An input whose per-sample (logical) shape the op rejects gets the op's own error: the op is called
on one sample (or on an empty tensor of the sample's shape).
"""
from __future__ import annotations

import torch

_ops = torch.ops.cupipe


def _front(t: torch.Tensor, bdim: int) -> torch.Tensor:
    return t if bdim == 0 else t.movedim(bdim, 0)


def _sample_shape(t: torch.Tensor, bdim: int):
    return t.shape[:bdim] + t.shape[bdim + 1:]


def _per_sample(info, in_dims, fn, *tensors):
    """``fn`` one sample at a time, stacked along dim 0."""
    samples = [fn(*(t if d is None else t.select(d, i) for t, d in zip(tensors, in_dims)))
               for i in range(info.batch_size)]
    if not samples:  # an empty batch: the shape of one sample's result, zero of them
        one = fn(*(t if d is None else t.new_empty(_sample_shape(t, d)) for t, d in zip(tensors, in_dims)))
        return one.new_empty((0, *one.shape)), 0
    return torch.stack(samples), 0


def _shift(d: int) -> int:
    """A sample's dim index in the batch-first tensor (negative dims count from the end: unchanged)."""
    return d + 1 if d >= 0 else d


@torch.library.register_vmap("cupipe::stream_copy")
def _stream_copy_vmap(info, in_dims, x, *, mechanism="auto", stages=0, vec_bytes=0):
    return _ops.stream_copy(_front(x, in_dims[0]), mechanism=mechanism, stages=stages, vec_bytes=vec_bytes), 0


@torch.library.register_vmap("cupipe::stencil1d")
def _stencil1d_vmap(info, in_dims, x, weights, *, dim=-1, boundary="zero", mechanism="auto", stages=0, steps=1):
    def one(xi, wi):
        return _ops.stencil1d(xi, wi, dim=dim, boundary=boundary, mechanism=mechanism, stages=stages, steps=steps)
    bx, bw = in_dims
    n = x.dim() - 1
    if bw is not None or bx is None or n < 1 or not -n <= dim < n:
        return _per_sample(info, in_dims, one, x, weights)  # per-sample weights; or the op's error
    return _ops.stencil1d(_front(x, bx), weights, dim=_shift(dim), boundary=boundary, mechanism=mechanism,
                          stages=stages, steps=steps), 0


def _register_plane_stencil_vmap(name: str, nd: int) -> None:
    """stencil2d's and stencil3d's rule: the op over the last nd dims, the vmapped dim in front."""
    op = getattr(_ops, name)

    @torch.library.register_vmap(f"cupipe::{name}")
    def rule(info, in_dims, x, weights, *, boundary="zero", mechanism="auto", stages=0, steps=1):
        kw = {"boundary": boundary, "mechanism": mechanism, "stages": stages, "steps": steps}
        bx, bw = in_dims
        if bw is not None or bx is None or x.dim() - 1 < nd:  # per-sample weights; or the op's error
            return _per_sample(info, in_dims, lambda xi, wi: op(xi, wi, **kw), x, weights)
        return op(_front(x, bx), weights, **kw), 0


_register_plane_stencil_vmap("stencil2d", 2)
_register_plane_stencil_vmap("stencil3d", 3)


@torch.library.register_vmap("cupipe::reduce")
def _reduce_vmap(info, in_dims, x, op="sum", dim=None, keepdim=False, *, dtype=None, correction=1.0, ord=2.0,
                 mechanism="auto", stages=0):
    bx = in_dims[0]
    n = x.dim() - 1
    lim = max(n, 1)  # a 0-d sample accepts dim 0 and -1, as torch.sum does
    dims = list(dim) if dim else []
    kw = dict(dtype=dtype, correction=correction, ord=ord, mechanism=mechanism, stages=stages)
    if any(not -lim <= d < lim for d in dims) or (op in ("argmax", "argmin") and len(dims) > 1):
        _ops.reduce(x.new_empty(_sample_shape(x, bx)), op, dim, keepdim, **kw)  # raises the op's error
    x = _front(x, bx)
    if op in ("argmax", "argmin") and not dims:  # the flat index of each sample
        out = _ops.reduce(x.reshape(x.shape[0], -1), op, [1], False, **kw)
        return out.reshape([x.shape[0]] + [1] * n if keepdim else [x.shape[0]]), 0
    if n == 0:  # each sample is one element: reduce a unit dim
        x, dims = x.unsqueeze(1), [1]
        keepdim = False
    else:
        dims = [_shift(d) for d in dims] if dims else list(range(1, n + 1))
    return _ops.reduce(x, op, dims, keepdim, **kw), 0


@torch.library.register_vmap("cupipe::_stencil1d_weight_grad")
def _stencil1d_weight_grad_vmap(info, in_dims, x, grad, weights, dim, boundary):
    return _per_sample(info, in_dims[:3], lambda a, g, w: _ops._stencil1d_weight_grad(a, g, w, dim, boundary),
                       x, grad, weights)


@torch.library.register_vmap("cupipe::_stencil2d_weight_grad")
def _stencil2d_weight_grad_vmap(info, in_dims, x, grad, weights, boundary):
    return _per_sample(info, in_dims[:3], lambda a, g, w: _ops._stencil2d_weight_grad(a, g, w, boundary),
                       x, grad, weights)
