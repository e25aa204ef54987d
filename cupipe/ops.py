"""Python wrappers, fake (meta) kernels and autograd for ``torch.ops.cupipe.*``.

Each public function has exactly the signature of its op (README.md's API table) and calls
it; the op itself does all argument checking, in C++, on every backend. With ``mechanism="auto"``
the wrappers first consult the tuning cache (``cupipe.tuning``, a lower module that never imports
this one).
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Union

import torch

from . import _C
from . import tuning as _tuning

# The names the ops accept, as the C++ side defines them (csrc/ops/args.cpp).
MECHANISMS = tuple(_C.MECHANISMS)
BOUNDARIES = tuple(_C.BOUNDARIES)
REDUCE_OPS = tuple(_C.REDUCE_OPS)

_ops = torch.ops.cupipe

_peek_functorch = getattr(getattr(torch._C, "_functorch", None), "peek_interpreter_stack", None)
_torch_function_mode = getattr(torch._C, "_is_torch_function_mode_enabled", lambda: False)


def _direct(*inputs) -> bool:
    """Whether a wrapper may call its op through ``cupipe._C.call_*`` (direct_calls.cpp): typed
    arguments and the dispatcher below the autograd key, which saves most of the host time of a
    call through ``torch.ops`` and its Python-registered autograd kernel (figures in
    docs/design.md).

    Only when the autograd kernel would have redispatched anyway: no input that needs a gradient
    (or grad mode off). And only for plain tensors with nothing above the dispatcher watching: not
    while torch.compile traces (it must see the op), not inside torch.func transforms (whose levels
    decide what needs a gradient), not under a __torch_function__ mode or with tensor subclasses
    (torch.ops honours those). Python dispatch modes and fake tensors still apply: they sit below
    the autograd key.
    """
    grad = torch.is_grad_enabled()
    for t in inputs:
        if type(t) is not torch.Tensor or (grad and t.requires_grad):
            return False
    return not (torch.compiler.is_compiling() or _torch_function_mode()
                or (_peek_functorch is not None and _peek_functorch() is not None))


def _op(name, *args, **kwargs):
    """``torch.ops.cupipe.<name>(*args, **kwargs)``; inside torch.func transforms the same op
    through an autograd.Function with the same formulas (`_TRANSFORMABLE`), since torch.func cannot
    differentiate the autograd that torch.library.register_autograd generates. Never while
    torch.compile traces: it sees the op."""
    if (_peek_functorch is not None and not torch.compiler.is_compiling()
            and _peek_functorch() is not None):
        fn, kw_names = _TRANSFORMABLE[name]
        return fn.apply(*args, *(kwargs[k] for k in kw_names))
    return getattr(_ops, name)(*args, **kwargs)


def _call(direct, op, *args, **kwargs):
    """``direct(*args, **kwargs)`` (a ``cupipe._C.call_*``, whose arguments carry the op's names), or
    ``op(*args, **kwargs)`` when pybind11 cannot convert an argument: torch.ops then raises its
    usual error for it."""
    try:
        return direct(*args, **kwargs)
    except TypeError as e:
        if "incompatible function arguments" not in str(e):
            raise
    return op(*args, **kwargs)


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
    if _direct(x):
        return _call(_C.call_stream_copy, _ops.stream_copy, x, mechanism=mechanism, stages=stages,
                     vec_bytes=vec_bytes)
    return _op("stream_copy", x, mechanism=mechanism, stages=stages, vec_bytes=vec_bytes)


def stencil1d(x: torch.Tensor, weights: torch.Tensor, *, dim: int = -1, boundary: str = "zero",
              mechanism: str = "auto", stages: int = 0, steps: int = 1) -> torch.Tensor:
    """1-D stencil (cross-correlation, like ``F.conv1d``) along ``dim``.

    ``out[i] = sum_k weights[k] * x[i + k - r]`` with ``weights`` of odd length ``2r+1``; indices
    outside the dim follow ``boundary`` (``zero``, ``replicate``, ``circular``, ``reflect`` =
    ``F.pad`` modes; ``reflect`` needs size > r). Accumulates in fp32 (fp64 for fp64 ``x``).
    Differentiable w.r.t. ``x`` and ``weights``. ``mechanism="auto"`` consults the tuning cache
    first, like ``stream_copy``. ``steps=k`` applies the stencil k times (see ``stencil2d``).
    """
    if mechanism == "auto":
        mechanism, stages, _ = _tuning.cached_config("stencil1d", x, mechanism, stages,
                                                     weights=weights, dim=dim, steps=steps)
    if _direct(x, weights):
        return _call(_C.call_stencil1d, _ops.stencil1d, x, weights, dim=dim, boundary=boundary,
                     mechanism=mechanism, stages=stages, steps=steps)
    return _op("stencil1d", x, weights, dim=dim, boundary=boundary, mechanism=mechanism, stages=stages,
               steps=steps)


def stencil2d(x: torch.Tensor, weights: torch.Tensor, *, boundary: str = "zero",
              mechanism: str = "auto", stages: int = 0, steps: int = 1) -> torch.Tensor:
    """2-D stencil over the last two dims (any leading batch dims), ``weights`` of shape
    ``(2ry+1, 2rx+1)``. The zero boundary equals
    ``F.conv2d(x.reshape(-1, 1, H, W), weights[None, None], padding=(ry, rx))``.
    Differentiable w.r.t. ``x`` and ``weights``. ``mechanism="auto"`` consults the tuning cache
    first, like ``stream_copy``. ``steps=k`` applies the stencil k times, the boundary at every
    step: equal to k calls, each step rounded to x's dtype. On CUDA one pass over memory applies
    up to 4 steps of a 3x3 or 5x5 stencil (16 along rows; fewer for taller windows, and a loop of
    single calls for channels_last, whose taps lie C apart); the taps are summed in another
    order than the single call's, so results agree within rounding. Its gradient recomputes the
    states in segments of about sqrt(k) steps.
    """
    if mechanism == "auto":
        mechanism, stages, _ = _tuning.cached_config("stencil2d", x, mechanism, stages,
                                                     weights=weights, steps=steps)
    if _direct(x, weights):
        return _call(_C.call_stencil2d, _ops.stencil2d, x, weights, boundary=boundary,
                     mechanism=mechanism, stages=stages, steps=steps)
    return _op("stencil2d", x, weights, boundary=boundary, mechanism=mechanism, stages=stages, steps=steps)


def stencil3d(x: torch.Tensor, weights: torch.Tensor, *, boundary: str = "zero",
              mechanism: str = "auto", stages: int = 0, steps: int = 1) -> torch.Tensor:
    """3-D stencil over the last three dims (any leading batch dims), ``weights`` of shape
    ``(2rz+1, 2ry+1, 2rx+1)``, each radius 0..4. The zero boundary equals
    ``F.conv3d(x.reshape(-1, 1, D, H, W), weights[None, None], padding=(rz, ry, rx))``; the others
    pad like ``F.pad`` (``reflect`` needs each size > its radius). Accumulates in fp32 (fp64 for fp64
    ``x``). Differentiable w.r.t. ``x`` and ``weights``. ``mechanism="auto"`` consults the tuning
    cache first, like ``stream_copy``. ``steps=k`` applies the stencil k times (see ``stencil2d``).
    """
    if mechanism == "auto":
        mechanism, stages, _ = _tuning.cached_config("stencil3d", x, mechanism, stages, weights=weights)
    if _direct(x, weights):
        return _call(_C.call_stencil3d, _ops.stencil3d, x, weights, boundary=boundary,
                     mechanism=mechanism, stages=stages, steps=steps)
    return _op("stencil3d", x, weights, boundary=boundary, mechanism=mechanism, stages=stages, steps=steps)


def reduce(x: torch.Tensor, op: str = "sum", dim: Union[int, Sequence[int], None] = None,
           keepdim: bool = False, *, dtype: Optional[torch.dtype] = None, correction: Optional[float] = 1,
           ord: float = 2, mechanism: str = "auto", stages: int = 0) -> torch.Tensor:
    """The torch reduction named ``op`` over ``dim`` (None or ``[]``: every dim):

    - ``sum``, ``mean``, ``amax``, ``amin``: ``getattr(torch, op)(x, dim, keepdim)``;
    - ``var``, ``std``: ``torch.var/std(x, dim, correction=correction, keepdim=keepdim)``, one pass
      (Welford's update, Chan's merge);
    - ``argmax``, ``argmin``: ``torch.argmax/argmin(x, dim, keepdim)``, ``dim`` None or one dim,
      int64 indices, the first among ties, NaN counting as the extreme;
    - ``logsumexp``: ``torch.logsumexp(x, dim, keepdim)``, max-shifted;
    - ``norm``: ``torch.linalg.vector_norm(x, ord, dim, keepdim)``, any ``ord`` (0 counts nonzeros,
      inf and -inf take the extreme ``|x|``).

    fp16/bf16 accumulate in fp32. ``dtype`` (sum, mean and norm) sets the result dtype as in
    ``torch.sum``. Deterministic: bit-identical on repeat. Differentiable w.r.t. ``x`` (argmax and
    argmin return indices). ``mechanism="auto"`` consults the tuning cache first (sum, mean, amax,
    amin; the state ops by their state kind), like ``stream_copy``.
    """
    if isinstance(dim, int):
        dim = [dim]
    elif dim is not None:
        dim = list(dim)
    if correction is None:  # as torch.var's
        correction = 1
    if mechanism == "auto":
        mechanism, stages, _ = _tuning.cached_config("reduce", x, mechanism, stages, dim=dim, reduce_op=op)
    if _direct(x):
        return _call(_C.call_reduce, _ops.reduce, x, op, dim, keepdim, dtype=dtype, correction=correction,
                     ord=ord, mechanism=mechanism, stages=stages)
    return _op("reduce", x, op, dim, keepdim, dtype=dtype, correction=correction, ord=ord, mechanism=mechanism,
               stages=stages)


# ----------------------------------------------------------------------------- fake kernels

@torch.library.register_fake("cupipe::stream_copy")
def _stream_copy_fake(x, *, mechanism="auto", stages=0, vec_bytes=0):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


# The stencils' results have x's layout when x is dense (the kernels write them in the order they
# read x), as torch.empty_like gives it.
@torch.library.register_fake("cupipe::stencil1d")
def _stencil1d_fake(x, weights, *, dim=-1, boundary="zero", mechanism="auto", stages=0, steps=1):
    torch._check(weights.dim() == 1, lambda: "cupipe.stencil1d: weights must be 1-D")
    return torch.empty_like(x)


@torch.library.register_fake("cupipe::stencil2d")
def _stencil2d_fake(x, weights, *, boundary="zero", mechanism="auto", stages=0, steps=1):
    torch._check(weights.dim() == 2, lambda: "cupipe.stencil2d: weights must be 2-D")
    return torch.empty_like(x)


@torch.library.register_fake("cupipe::stencil3d")
def _stencil3d_fake(x, weights, *, boundary="zero", mechanism="auto", stages=0, steps=1):
    torch._check(weights.dim() == 3, lambda: "cupipe.stencil3d: weights must be 3-D")
    return torch.empty_like(x)


def _wgrad_fake(x, grad, weights):
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    return torch.empty(weights.shape, dtype=acc, device=x.device)


@torch.library.register_fake("cupipe::_stencil1d_weight_grad")
def _stencil1d_weight_grad_fake(x, grad, weights, dim, boundary):
    return _wgrad_fake(x, grad, weights)


@torch.library.register_fake("cupipe::_stencil2d_weight_grad")
def _stencil2d_weight_grad_fake(x, grad, weights, boundary):
    return _wgrad_fake(x, grad, weights)


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
def _reduce_fake(x, op="sum", dim=None, keepdim=False, *, dtype=None, correction=1.0, ord=2.0, mechanism="auto",
                 stages=0):
    dims = _reduced_dims(x.dim(), dim)
    shape = _reduce_out_shape(list(x.shape), dims, keepdim)
    out_dtype = torch.int64 if op in ("argmax", "argmin") else dtype if dtype is not None else x.dtype
    return torch.empty(shape, dtype=out_dtype, device=x.device)


# ----------------------------------------------------------------------------- autograd

# setup_context gets the positional inputs as `inputs` and the keyword-only ones as
# `keyword_only_inputs` (defaults filled in); backward returns one gradient per positional input.

def _stream_copy_setup(ctx, inputs, keyword_only_inputs, output):
    pass


def _stream_copy_backward(ctx, grad):
    return grad


torch.library.register_autograd("cupipe::stream_copy", _stream_copy_backward,
                                setup_context=_stream_copy_setup)


def _source_index(i: int, n: int, boundary: str) -> int:
    """The source index of an out-of-range position ``i`` of a dim of size ``n`` under
    ``boundary`` (not zero): F.pad's modes, reflect without repeating the edge."""
    if boundary == "replicate":
        return 0 if i < 0 else n - 1
    if boundary == "circular":
        return i % n
    if n == 1:
        return 0
    period = 2 * (n - 1)
    m = i % period
    return m if m < n else period - m


def _zero_pad(t: torch.Tensor, dim: int, r: int) -> torch.Tensor:
    """``t`` with ``r`` zeros on both sides of ``dim``."""
    if r == 0:
        return t
    shape = list(t.shape)
    shape[dim] = r
    z = t.new_zeros(shape)
    return torch.cat([z, t, z], dim=dim)


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


# The stencils' gradients. With A the stencil's matrix for weights w under the boundary:
#   grad_x = A^T g: the zero-boundary stencil of g with flipped weights (the adjoint of reading
#            inside the plane), plus, for the other boundaries, what the outputs near the edges
#            read from positions outside the plane, folded back onto the entries those positions
#            map to. Those contributions come from thin strips of g (r rows/columns at each edge),
#            so the whole gradient costs one full-size stencil pass.
#   grad_w = the weight-gradient op (one pass over x and g on CUDA).
# Both are written with differentiable ops, so double backward works.

def _ext1d(strip, wf, dim, r, mechanism, stages):
    """Full correlation of ``strip`` with ``wf`` on its zero-padded extension (r each side)."""
    return stencil1d(_zero_pad(strip, dim, r), wf, dim=dim, boundary="zero",
                     mechanism=mechanism, stages=stages)


def _stencil1d_input_grad(g, weights, dim, boundary, mechanism="auto", stages=0):
    r = (weights.shape[0] - 1) // 2
    wf = weights.flip(0)
    gx = stencil1d(g, wf, dim=dim, boundary="zero", mechanism=mechanism, stages=stages)
    if boundary == "zero" or r == 0:
        return gx
    n = g.shape[dim]
    k = min(n, r)  # positions outside the dim read only the first/last r entries
    lo = _ext1d(g.narrow(dim, 0, k), wf, dim, r, mechanism, stages).narrow(dim, 0, r)
    hi = _ext1d(g.narrow(dim, n - k, k), wf, dim, r, mechanism, stages).narrow(dim, k + r, r)
    for p in range(r):
        gx.narrow(dim, _source_index(p - r, n, boundary), 1).add_(lo.narrow(dim, p, 1))
        gx.narrow(dim, _source_index(n + p, n, boundary), 1).add_(hi.narrow(dim, p, 1))
    return gx


def _ext2d(strip, wf, ry, rx, mechanism, stages):
    nd = strip.dim()
    sp = _zero_pad(_zero_pad(strip, nd - 2, ry), nd - 1, rx)
    return stencil2d(sp, wf, boundary="zero", mechanism=mechanism, stages=stages)


def _stencil2d_input_grad(g, weights, boundary, mechanism="auto", stages=0):
    ry, rx = (weights.shape[0] - 1) // 2, (weights.shape[1] - 1) // 2
    wf = weights.flip(0, 1)
    gx = stencil2d(g, wf, boundary="zero", mechanism=mechanism, stages=stages)
    if boundary == "zero" or (ry == 0 and rx == 0):
        return gx
    nd = g.dim()
    H, W = nd - 2, nd - 1
    ny, nx = g.shape[H], g.shape[W]
    # The gradient at the positions outside the plane: left/right columns for the plane's rows,
    # and top/bottom rows over the extended width (corners included).
    left = right = None
    if rx > 0:
        k = min(nx, rx)
        left = _ext2d(g.narrow(W, 0, k), wf, ry, rx, mechanism, stages)
        left = left.narrow(H, ry, ny).narrow(W, 0, rx)
        right = _ext2d(g.narrow(W, nx - k, k), wf, ry, rx, mechanism, stages)
        right = right.narrow(H, ry, ny).narrow(W, k + rx, rx)
    if ry > 0:
        k = min(ny, ry)
        top = _ext2d(g.narrow(H, 0, k), wf, ry, rx, mechanism, stages).narrow(H, 0, ry)
        bot = _ext2d(g.narrow(H, ny - k, k), wf, ry, rx, mechanism, stages).narrow(H, k + ry, ry)
        # Fold the outside rows onto their source rows: the middle onto gx, the ends onto the
        # outside columns (folded in turn below).
        for p in range(ry):
            for row, pos in ((top.narrow(H, p, 1), p - ry), (bot.narrow(H, p, 1), ny + p)):
                src = _source_index(pos, ny, boundary)
                gx.narrow(H, src, 1).add_(row.narrow(W, rx, nx))
                if rx > 0:
                    left.narrow(H, src, 1).add_(row.narrow(W, 0, rx))
                    right.narrow(H, src, 1).add_(row.narrow(W, rx + nx, rx))
    for q in range(rx):
        gx.narrow(W, _source_index(q - rx, nx, boundary), 1).add_(left.narrow(W, q, 1))
        gx.narrow(W, _source_index(nx + q, nx, boundary), 1).add_(right.narrow(W, q, 1))
    return gx


def _stencil_setup(ctx, inputs, keyword_only_inputs, output):
    """The three stencils' autograd context: their knobs (and stencil1d's dim), the weights, and x
    where the weights' gradient needs it."""
    x, weights = inputs
    kw = keyword_only_inputs
    ctx.dim, ctx.boundary, ctx.steps = kw.get("dim"), kw["boundary"], kw.get("steps", 1)
    ctx.mechanism, ctx.stages = kw["mechanism"], kw["stages"]
    ctx.save_for_backward(x if ctx.needs_input_grad[1] else None, weights)
    ctx.x_shape = x.shape


def _steps_backward(ctx, grad, step, input_grad, weight_grad):
    """(grad_x, grad_w) of ``ctx.steps`` applications of one stencil step, given as functions of
    the weights w: ``step(w, u)`` the next state, ``input_grad(w, g)`` one step's adjoint,
    ``weight_grad(w, u, g)`` one step's weight gradient at state u. The input gradient needs no
    states (each step is linear in u); the weights' needs every state, recomputed from x in
    segments of about sqrt(steps): sqrt(steps) states held at a time, one extra forward pass."""
    x, weights = ctx.saved_tensors
    if _numel(ctx.x_shape) == 0:
        # Nothing was read: the boundary index maps are undefined for a size-0 dim.
        return _empty_grads(ctx, grad, weights)
    w = weights
    k = ctx.steps
    need_x, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    if not need_w:
        g = grad
        for _ in range(k):
            g = input_grad(w, g)
        return g if need_x else None, None
    seg = max(1, math.isqrt(k - 1) + 1) if k > 1 else 1
    marks = [x]  # the states at the start of each segment
    u = x
    for t in range(1, k):
        u = step(w, u)
        if t % seg == 0:
            marks.append(u)
    g, gw = grad, None
    for j in range(len(marks) - 1, -1, -1):
        states = [marks[j]]
        for _ in range(j * seg + 1, min((j + 1) * seg, k)):
            states.append(step(w, states[-1]))
        for u in reversed(states):
            part = weight_grad(w, u, g)
            gw = part if gw is None else gw + part
            if need_x or u is not x:
                g = input_grad(w, g)
    return g if need_x else None, gw.to(weights.dtype)


def _stencil1d_backward(ctx, grad):
    dim = ctx.dim % len(ctx.x_shape)
    b, m, st = ctx.boundary, ctx.mechanism, ctx.stages
    return _steps_backward(
        ctx, grad,
        lambda w, u: stencil1d(u, w, dim=dim, boundary=b, mechanism=m, stages=st),
        lambda w, g: _stencil1d_input_grad(g, w, dim, b, m, st),
        lambda w, u, g: _op("_stencil1d_weight_grad", u, g.to(u.dtype), w, dim, b))


torch.library.register_autograd("cupipe::stencil1d", _stencil1d_backward,
                                setup_context=_stencil_setup)


def _stencil2d_backward(ctx, grad):
    b, m, st = ctx.boundary, ctx.mechanism, ctx.stages
    return _steps_backward(
        ctx, grad,
        lambda w, u: stencil2d(u, w, boundary=b, mechanism=m, stages=st),
        lambda w, g: _stencil2d_input_grad(g, w, b, m, st),
        lambda w, u, g: _op("_stencil2d_weight_grad", u, g.to(u.dtype), w, b))


torch.library.register_autograd("cupipe::stencil2d", _stencil2d_backward,
                                setup_context=_stencil_setup)


def _stencil3d_input_grad(g, weights, boundary, mechanism="auto", stages=0):
    radii = [(k - 1) // 2 for k in weights.shape]
    wf = weights.flip(0, 1, 2)
    if boundary == "zero" or not any(radii):
        return stencil3d(g, wf, boundary="zero", mechanism=mechanism, stages=stages)
    # The full correlation of g (zero-padded by the radii) with the flipped weights, then each dim's
    # margins folded back onto the entries the boundary read them from. One stencil over a slightly
    # larger volume: simpler than 2-D's strips, and the zero boundary (the common case) skips it.
    nd = g.dim()
    ext = g
    for k, r in enumerate(radii):
        ext = _zero_pad(ext, nd - 3 + k, r)
    ext = stencil3d(ext, wf, boundary="zero", mechanism=mechanism, stages=stages)
    for k, r in enumerate(radii):
        if r == 0:
            continue
        d, n = nd - 3 + k, g.shape[nd - 3 + k]
        lo = torch.tensor([_source_index(p - r, n, boundary) for p in range(r)], device=g.device)
        hi = torch.tensor([_source_index(n + p, n, boundary) for p in range(r)], device=g.device)
        ext = (ext.narrow(d, r, n).index_add(d, lo, ext.narrow(d, 0, r))
               .index_add(d, hi, ext.narrow(d, r + n, r)))
    return ext


def _stencil3d_weight_grad(x, grad, weights, boundary):
    """The weights' gradient (accumulation dtype) as 2-D weight gradients, one per depth tap: tap a
    pairs output plane z with input plane z + a - rz, inside the volume as two shifted views, and
    the boundary's planes outside it one by one."""
    rz, D = (weights.shape[0] - 1) // 2, x.shape[-3]
    parts = []
    for a in range(2 * rz + 1):
        s = a - rz  # output plane z reads input plane z + s
        lo = min(max(0, -s), D)
        hi = max(min(D, D - s), lo)
        w2 = weights[a]
        part = _op("_stencil2d_weight_grad", x.narrow(-3, lo + s, hi - lo), grad.narrow(-3, lo, hi - lo),
                   w2, boundary)
        if boundary != "zero":
            for z in [*range(lo), *range(hi, D)]:
                src = _source_index(z + s, D, boundary)
                part = part + _op("_stencil2d_weight_grad", x.select(-3, src), grad.select(-3, z), w2,
                                  boundary)
        parts.append(part)
    return torch.stack(parts)


def _stencil3d_backward(ctx, grad):
    b, m, st = ctx.boundary, ctx.mechanism, ctx.stages
    return _steps_backward(
        ctx, grad,
        lambda w, u: stencil3d(u, w, boundary=b, mechanism=m, stages=st),
        lambda w, g: _stencil3d_input_grad(g, w, b, m, st),
        lambda w, u, g: _stencil3d_weight_grad(u, g.to(u.dtype), w, b))


torch.library.register_autograd("cupipe::stencil3d", _stencil3d_backward,
                                setup_context=_stencil_setup)


# The weight-gradient ops are bilinear in (x, grad): with upstream gw (weights-shaped),
#   d/dgrad = stencil(x, gw) under the boundary, d/dx = the stencil's input gradient of grad.

def _wgrad1d_setup(ctx, inputs, output):
    x, grad, weights, ctx.dim, ctx.boundary = inputs
    ctx.save_for_backward(x, grad)


def _wgrad1d_backward(ctx, gw):
    x, grad = ctx.saved_tensors
    dx = dg = None
    if ctx.needs_input_grad[0]:
        dx = _stencil1d_input_grad(grad, gw.to(x.dtype), ctx.dim, ctx.boundary)
    if ctx.needs_input_grad[1]:
        dg = stencil1d(x, gw, dim=ctx.dim, boundary=ctx.boundary)
    return dx, dg, None, None, None


torch.library.register_autograd("cupipe::_stencil1d_weight_grad", _wgrad1d_backward,
                                setup_context=_wgrad1d_setup)


def _wgrad2d_setup(ctx, inputs, output):
    x, grad, weights, ctx.boundary = inputs
    ctx.save_for_backward(x, grad)


def _wgrad2d_backward(ctx, gw):
    x, grad = ctx.saved_tensors
    dx = dg = None
    if ctx.needs_input_grad[0]:
        dx = _stencil2d_input_grad(grad, gw.to(x.dtype), ctx.boundary)
    if ctx.needs_input_grad[1]:
        dg = stencil2d(x, gw, boundary=ctx.boundary)
    return dx, dg, None, None


torch.library.register_autograd("cupipe::_stencil2d_weight_grad", _wgrad2d_backward,
                                setup_context=_wgrad2d_setup)


def _reduce_setup(ctx, inputs, keyword_only_inputs, output):
    x, ctx.op, dim, ctx.keepdim = inputs
    ctx.dims = _reduced_dims(x.dim(), dim)
    ctx.x_shape = x.shape
    ctx.x_dtype = x.dtype
    ctx.correction = keyword_only_inputs.get("correction", 1.0)
    ctx.ord = keyword_only_inputs.get("ord", 2.0)
    if ctx.op in ("sum", "mean", "argmax", "argmin"):
        ctx.save_for_backward()
    elif ctx.op in ("var", "std"):
        ctx.save_for_backward(x, output if ctx.op == "std" else None)
    else:
        ctx.save_for_backward(x, output)


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
    elif ctx.op in ("argmax", "argmin"):
        return None, None, None, None  # indices: no gradient (autograd never asks)
    else:
        x, out = ctx.saved_tensors
        if out is not None and not ctx.keepdim:
            for d in ctx.dims:
                out = out.unsqueeze(d)
        gx = _state_reduce_grad(ctx, g, x, out)
    return gx.to(ctx.x_dtype).contiguous(), None, None, None


def _state_reduce_grad(ctx, g, x, out):
    """The input gradient of var, std, logsumexp, norm and amax/amin (g and out with the reduced
    dims kept as 1), with torch's formulas: ties of amax/amin (and of the inf norms) share the
    gradient evenly; a zero 2-norm gets a zero gradient."""
    dims = ctx.dims
    if ctx.op in ("var", "std"):
        count = 1
        for d in dims:
            count *= ctx.x_shape[d]
        acc = torch.promote_types(x.dtype, torch.float32)
        xf, g = x.to(acc), g.to(acc)
        centred = xf - xf.mean(dim=dims, keepdim=True) if dims else xf - xf
        dof = max(count - ctx.correction, 0)
        gv = g / (2 * out.to(acc)) if ctx.op == "std" else g
        return gv * centred * (2 / dof if dof > 0 else float("inf"))
    if ctx.op == "logsumexp":
        return g * torch.exp(x - out)
    if ctx.op == "norm" and ctx.ord == 0:  # a count: no gradient
        return torch.zeros_like(x) * g
    if ctx.op == "norm" and math.isfinite(ctx.ord):  # |x|^(p-1) sgn(x) / |x|_p^(p-1); 0 where the norm is 0
        p = ctx.ord
        return g * torch.sgn(x) * x.abs().pow(p - 1) / out.masked_fill(out == 0, float("inf")).pow(p - 1)
    # amax, amin, and the inf norms (the extremes of |x|, signed)
    v = x.abs() if ctx.op == "norm" else x
    mask = (v == out).to(g.dtype)
    count = mask.sum(dim=dims, keepdim=True) if dims else mask
    gx = mask * (g / count)
    return gx * torch.sgn(x) if ctx.op == "norm" else gx


torch.library.register_autograd("cupipe::reduce", _reduce_backward, setup_context=_reduce_setup)


# ----------------------------------------------------------------------------- torch.func

def _transformable(name, setup, backward):
    """An autograd.Function computing torch.ops.cupipe.<name> with the op's registered formulas,
    usable under torch.func (grad, vjp, jacrev, vmap and their compositions): the wrappers call it
    only inside those transforms. Its inputs are the op's positional arguments followed by its
    keyword-only ones, in schema order. Forward-mode AD (jvp, jacfwd) has no formula."""
    schema = getattr(_ops, name).default._schema
    kw_names = [a.name for a in schema.arguments if a.kwarg_only]
    n_pos = len(schema.arguments) - len(kw_names)

    def forward(*args):
        return getattr(_ops, name)(*args[:n_pos], **dict(zip(kw_names, args[n_pos:])))

    def setup_context(ctx, inputs, output):
        if kw_names:
            setup(ctx, inputs[:n_pos], dict(zip(kw_names, inputs[n_pos:])), output)
        else:
            setup(ctx, inputs, output)

    def backward_(ctx, *grads):
        got = backward(ctx, *grads)
        got = got if isinstance(got, tuple) else (got,)
        return (*got, *([None] * (n_pos + len(kw_names) - len(got))))

    cls = type(f"_{name.strip('_')}_function", (torch.autograd.Function,),
               {"forward": staticmethod(forward), "setup_context": staticmethod(setup_context),
                "backward": staticmethod(backward_), "generate_vmap_rule": True})
    return cls, kw_names


_TRANSFORMABLE = {
    "stream_copy": _transformable("stream_copy", _stream_copy_setup, _stream_copy_backward),
    "stencil1d": _transformable("stencil1d", _stencil_setup, _stencil1d_backward),
    "stencil2d": _transformable("stencil2d", _stencil_setup, _stencil2d_backward),
    "stencil3d": _transformable("stencil3d", _stencil_setup, _stencil3d_backward),
    "_stencil1d_weight_grad": _transformable("_stencil1d_weight_grad", _wgrad1d_setup, _wgrad1d_backward),
    "_stencil2d_weight_grad": _transformable("_stencil2d_weight_grad", _wgrad2d_setup, _wgrad2d_backward),
    "reduce": _transformable("reduce", _reduce_setup, _reduce_backward),
}

from . import batching  # noqa: E402,F401  (torch.vmap rules for the ops)
