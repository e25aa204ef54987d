"""stencil3d against an eager reference (the boundary as index maps, then a valid F.conv3d in
float64), its gradients against autograd through that reference, and its arguments' errors."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import cupipe
from conftest import BOUNDARIES, FLOAT_DTYPES, assert_close, make_input, make_weights, poison_allocator, tol

MECHANISMS = [m for m in cupipe.MECHANISMS if m != "auto"]


def _pad_index(n: int, r: int, boundary: str, device) -> torch.Tensor:
    """Source index of each of the n + 2r padded positions of a dim (-1: a zero)."""
    out = []
    for i in range(-r, n + r):
        if 0 <= i < n:
            out.append(i)
        elif boundary == "zero":
            out.append(-1)
        elif boundary == "replicate":
            out.append(0 if i < 0 else n - 1)
        elif boundary == "circular":
            out.append(i % n)
        else:  # reflect, without repeating the edge
            p = 2 * (n - 1)
            m = i % p if p else 0
            out.append(m if m < n else p - m)
    return torch.tensor(out, device=device)


def stencil3d_ref(x: torch.Tensor, w: torch.Tensor, boundary: str = "zero") -> torch.Tensor:
    """F.conv3d (valid) of x padded by the boundary along its last three dims, in x's dtype
    (float64 in, for a reference). Differentiable."""
    radii = [(k - 1) // 2 for k in w.shape]
    t = x
    for k, r in enumerate(radii):
        d = x.dim() - 3 + k
        idx = _pad_index(x.shape[d], r, boundary, x.device)
        t = t.index_select(d, idx.clamp(min=0))
        if (idx < 0).any():
            shape = [1] * t.dim()
            shape[d] = idx.numel()
            t = t * (idx >= 0).to(t.dtype).view(shape)
    D, H, W = x.shape[-3:]
    flat = t.reshape(-1, 1, *t.shape[-3:])
    return F.conv3d(flat, w.to(t.dtype)[None, None]).reshape(x.shape)


def _check(x, w, boundary="zero", what="", **kw):
    poison_allocator(x.numel() * x.element_size(), x.device)
    y = cupipe.stencil3d(x, w, boundary=boundary, **kw)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert y.stride() == torch.empty_like(x).stride()
    atol, rtol = tol(x.dtype, w.numel())
    assert_close(y, stencil3d_ref(x.double(), w.double(), boundary).to(x.dtype), atol=atol, rtol=rtol,
                 what=f"stencil3d {what} shape={tuple(x.shape)} w={tuple(w.shape)} {boundary} {x.dtype} {kw}")
    return y


WEIGHT_SHAPES = [(3, 3, 3), (1, 3, 3), (3, 1, 1), (5, 5, 5), (3, 5, 1), (9, 3, 3), (3, 9, 7), (7, 1, 5)]


def star_weights(shape, device, seed=1000):
    """Random weights whose taps off the three axes are zero (signed zeros among them): the star
    pair's star instance computes these."""
    w = make_weights(shape, device=device, seed=seed)
    kz, ky, kx = shape
    axes = torch.zeros(shape, dtype=torch.bool, device=device)
    axes[:, ky // 2, kx // 2] = axes[kz // 2, :, kx // 2] = axes[kz // 2, ky // 2, :] = True
    return w * axes


@pytest.mark.parametrize("wshape", [(3, 3, 3), (5, 5, 5), (3, 5, 1), (9, 3, 3), (3, 9, 7)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_star_weights(device, wshape, boundary):
    x = make_input((2, 13, 37, 75), device=device)
    _check(x, star_weights(wshape, device), boundary, "star")
    _check(x.to(torch.bfloat16), star_weights(wshape, device), boundary, "star bf16")
    _check(x.double(), star_weights(wshape, device).double(), boundary, "star fp64")


@pytest.mark.parametrize("boundary", ["zero", "circular"])
def test_star_weights_meet_inf_and_nan_as_conv_does(device, boundary):
    """A non-finite input reaches every output whose window holds it, the off-axis taps' too
    (0 x inf = NaN): the star instance hands such blocks to the general one. The values sit on
    and around tile edges (tiles are 16 work items of 2-4 x 4 outputs across)."""
    x = make_input((2, 20, 70, 140), device=device)
    spots = [((0, 0, 0, 0), "inf"), ((0, 5, 31, 63), "inf"), ((0, 9, 32, 64), "-inf"), ((1, 19, 69, 139), "nan"),
             ((1, 7, 27, 127), "nan"), ((1, 12, 56, 128), "inf"), ((0, 15, 55, 65), "-inf"), ((1, 3, 28, 1), "inf")]
    for idx, v in spots:
        x[idx] = float(v)
    bad = ~torch.isfinite(x)
    for wshape in [(3, 3, 3), (3, 5, 5), (5, 3, 3)]:
        w = star_weights(wshape, device)
        y = cupipe.stencil3d(x, w, boundary=boundary)
        ones = torch.ones(wshape, dtype=torch.float64, device=device)
        reach = stencil3d_ref(bad.double(), ones, boundary) > 0  # outputs whose window holds one
        assert torch.equal(~torch.isfinite(y), reach), (wshape, boundary)
        ref = stencil3d_ref(torch.where(bad, 0.0, x).double(), w.double(), boundary).float()
        atol, rtol = tol(torch.float32, w.numel())
        assert_close(y[~reach], ref[~reach], atol=atol, rtol=rtol, what=f"finite outputs {wshape} {boundary}")


@pytest.mark.parametrize("wshape", WEIGHT_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_every_boundary_and_radius(device, wshape, boundary):
    x = make_input((2, 11, 13, 70), device=device)
    _check(x, make_weights(wshape, device=device), boundary)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(9, 17, 33), (1, 1, 1), (4, 2, 3, 5), (2, 3, 40, 131), (6, 70, 9)])
def test_dtypes_and_odd_sizes(device, dtype, shape):
    x = make_input(shape, dtype, device)
    for wshape in [(3, 3, 3), (5, 5, 5)]:
        w = make_weights(wshape, device=device)
        _check(x, w, "zero")
        _check(x, w.to(dtype), "replicate", "weights in x's dtype")


def test_sizes_below_the_radius(device):
    """Dims shorter than their radius: every boundary but reflect (which needs size > radius)."""
    x = make_input((2, 1, 3), device=device)
    w = make_weights((5, 9, 9), device=device)
    for boundary in ("zero", "replicate", "circular"):
        _check(x, w, boundary)


def test_non_contiguous_inputs(device):
    base = make_input((3, 20, 24, 34), device=device)
    w = make_weights((3, 3, 5), device=device)
    _check(base.permute(0, 3, 1, 2), w, "reflect", "permuted")
    _check(base[:, 2:17:2, 1:, 3:30], w, "circular", "sliced")
    _check(base.to(memory_format=torch.channels_last), w, "zero", "channels_last")
    _check(make_input((24, 34), device=device).expand(5, 24, 34), w, "replicate", "expanded")


# (shape, dtype, stages, weights, boundary) of the mechanism test; the rows16 ones have rows of
# whole 16-byte multiples: tma's windows as tensor-map boxes (interior ones only for the boundaries
# other than zero). One test item each, so that their first-use compiles spread over the workers.
_ODD, _ROWS16 = (2, 37, 45, 150), (2, 21, 35, 128)
MECHANISM_CASES = (
    [(_ODD, torch.float32, st, ws, bd) for st, ws, bd in
     [(1, (3, 3, 3), "zero"), (2, (5, 3, 1), "reflect"), (4, (9, 5, 5), "circular"), (8, (3, 9, 9), "replicate")]]
    + [(_ODD, dt, 3, (3, 3, 3), "zero") for dt in (torch.float16, torch.bfloat16, torch.float64)]
    + [(_ROWS16, dt, st, ws, bd) for st, ws, bd in [(2, (3, 3, 3), "zero"), (3, (5, 5, 3), "reflect"),
                                                    (6, (3, 9, 9), "zero")]
       for dt in (torch.float32, torch.bfloat16)])


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("case", MECHANISM_CASES,
                         ids=lambda c: f"{'rows16' if c[0] == _ROWS16 else 'odd'}-{str(c[1])[6:]}-s{c[2]}-"
                                       f"{'x'.join(map(str, c[3]))}-{c[4]}")
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_every_mechanism_and_stage_count(mechanism, case):
    if mechanism == "tma" and not cupipe.tma_available():
        pytest.skip("tma needs sm_90")
    shape, dtype, stages, wshape, boundary = case
    x = make_input(shape, device="cuda").to(dtype)
    _check(x, make_weights(wshape, device="cuda"), boundary, "rows16" if shape == _ROWS16 else "",
           mechanism=mechanism, stages=stages)


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_gradients_match_autograd_through_the_reference(device, boundary):
    x = make_input((2, 5, 6, 7), torch.float64, device).requires_grad_()
    w = make_weights((3, 3, 5), torch.float64, device).requires_grad_()
    g = make_input((2, 5, 6, 7), torch.float64, device, seed=7)
    gx, gw = torch.autograd.grad(cupipe.stencil3d(x, w, boundary=boundary), (x, w), g)
    rx, rw = torch.autograd.grad(stencil3d_ref(x, w, boundary), (x, w), g)
    assert_close(gx, rx, atol=1e-10, rtol=1e-10, what=f"grad x {boundary}")
    assert_close(gw, rw, atol=1e-10, rtol=1e-10, what=f"grad w {boundary}")


def test_gradcheck(device):
    x = make_input((1, 4, 5, 6), torch.float64, device).requires_grad_()
    w = make_weights((3, 1, 3), torch.float64, device).requires_grad_()
    for boundary in ("zero", "reflect"):
        assert torch.autograd.gradcheck(lambda a, b: cupipe.stencil3d(a, b, boundary=boundary), (x, w))
        assert torch.autograd.gradgradcheck(lambda a, b: cupipe.stencil3d(a, b, boundary=boundary), (x, w))


def test_compile_and_vmap(device):
    x = make_input((3, 2, 6, 7, 9), device=device)
    w = make_weights((3, 3, 3), device=device)
    ref = cupipe.stencil3d(x, w, boundary="circular")
    got = torch.compile(lambda a, b: cupipe.stencil3d(a, b, boundary="circular"), fullgraph=True)(x, w)
    assert_close(got, ref, atol=1e-6, rtol=1e-6, what="torch.compile")
    got = torch.vmap(lambda a: cupipe.stencil3d(a, w, boundary="circular"), in_dims=1)(x)
    assert_close(got, ref.movedim(1, 0), atol=1e-6, rtol=1e-6, what="vmap")


def test_opcheck(device):
    x = make_input((2, 4, 5, 6), device=device)
    w = make_weights((3, 3, 3), device=device)
    torch.library.opcheck(torch.ops.cupipe.stencil3d.default, (x, w), {"boundary": "reflect"})


@pytest.mark.parametrize("args, match", [
    (((4, 5, 6), (3, 3)), "weights must be 3-D"),
    (((4, 5, 6), (3, 4, 3)), r"odd sizes 2r\+1 of at most 9"),
    (((4, 5, 6), (11, 3, 3)), r"odd sizes 2r\+1 of at most 9"),
    (((5, 6), (3, 3, 3)), "at least 3 dims"),
])
def test_bad_arguments_name_the_argument(device, args, match):
    (xs, ws) = args
    with pytest.raises(ValueError, match=match):
        cupipe.stencil3d(make_input(xs, device=device), make_weights(ws, device=device))


def test_reflect_needs_each_size_above_its_radius(device):
    with pytest.raises(ValueError, match=r"D \(dim -3\)"):
        cupipe.stencil3d(make_input((2, 5, 6), device=device), make_weights((5, 3, 3), device=device),
                         boundary="reflect")


def test_explain_names_the_plan(device):
    x = make_input((4, 6, 8, 10), device=device)
    e = cupipe.explain("stencil3d", x, make_weights((3, 3, 3), device=device))
    assert e.op == "stencil3d" and "in place" in e.layout
    flat = cupipe.explain("stencil3d", x.transpose(-1, -2), make_weights((1, 3, 3), device=device))
    assert "stencil2d over the (..., D) planes" in flat.layout
    if device == "cuda":
        sm90 = torch.cuda.get_device_capability()[0] >= 9
        assert (e.mechanism, e.stages) == (("tma", 3) if sm90 else ("primitives", 3))
        m = "Tma,3" if sm90 else "Primitives,3"
        # rows 40 bytes apart take the instance that moves each row at its own shift; 48 bytes, the box;
        # each the star pair: the star instance, then the general one
        pair = [f"stencil3d_kernel<engine::Mechanism::{m},float,1,1,{{}},{star}>" for star in ("true", "false")]
        assert [k[0] for k in e.kernels] == [k.format("true") for k in pair]
        even = cupipe.explain("stencil3d", make_input((4, 6, 8, 12), device=device),
                              make_weights((3, 3, 3), device=device))
        assert [k[0] for k in even.kernels] == [k.format("false") for k in pair]
        # no off-axis taps (3 x 1 x 1): the general instance alone
        column = cupipe.explain("stencil3d", x, make_weights((3, 1, 1), device=device))
        assert [k[0] for k in column.kernels] == [f"stencil3d_kernel<engine::Mechanism::{m},float,1,1,true,false>"]
    else:
        assert e.source == "cpu"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_graph_replays_after_precompile():
    x = make_input((2, 9, 20, 64), device="cuda")
    w = make_weights((5, 3, 3), device="cuda")
    cupipe.precompile("stencil3d", dtype=torch.float32, mechanism="barrier", stages=3, radius=(2, 1, 1))
    s, g = torch.cuda.Stream(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        y = cupipe.stencil3d(x, w, boundary="reflect", mechanism="barrier", stages=3)
    x.copy_(make_input((2, 9, 20, 64), device="cuda", seed=3))
    g.replay()
    torch.cuda.synchronize()
    _check(x, w, "reflect", "graph replay", mechanism="barrier", stages=3)
    ref = stencil3d_ref(x.double(), w.double(), "reflect").float()
    assert_close(y, ref, atol=1e-4, rtol=1e-4, what="graph replay")
    # the star pair reads the weights on the device: star weights, then general ones again, replay right
    for weights in (star_weights((5, 3, 3), "cuda", seed=5), make_weights((5, 3, 3), device="cuda", seed=6)):
        w.copy_(weights)
        g.replay()
        torch.cuda.synchronize()
        assert_close(y, stencil3d_ref(x.double(), w.double(), "reflect").float(), atol=1e-4, rtol=1e-4,
                     what="graph replay, new weights")
