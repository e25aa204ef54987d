"""The stencils' ``steps=k``: equal to k single calls (every boundary, every dtype), gradients
through the k steps against autograd through the loop, and the argument's error. On CUDA,
stencil1d and stencil2d run the fused kernel (stencil/steps.cuh): its radii, planes smaller
than a strip or than the window, several bands and chunks, k across several passes, every
mechanism and strided inputs, against the loop."""
from __future__ import annotations

import pytest
import torch

import cupipe
import cupipe._kernels as ks
from conftest import BOUNDARIES, HAS_CUDA, assert_close, make_input, make_weights, poison_allocator, tol

CASES = [  # (op, x shape, weights shape, extra kwargs)
    ("stencil1d", (3, 40), (5,), {"dim": -1}),
    ("stencil1d", (17, 6), (3,), {"dim": 0}),
    ("stencil2d", (2, 19, 23), (3, 3), {}),
    ("stencil2d", (30, 9), (5, 1), {}),
    ("stencil3d", (2, 7, 8, 9), (3, 3, 3), {}),
]


def _loop(op, x, w, k, **kw):
    for _ in range(k):
        x = getattr(cupipe, op)(x, w, **kw)
    return x


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{'x'.join(map(str, c[2]))}")
@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_steps_equal_a_loop_of_single_calls(device, case, boundary):
    op, shape, wshape, kw = case
    x, w = make_input(shape, device=device), make_weights(wshape, device=device) * 0.3
    for k in (1, 2, 5):
        got = getattr(cupipe, op)(x, w, boundary=boundary, steps=k, **kw)
        atol, rtol = tol(x.dtype, w.numel())
        assert_close(got, _loop(op, x, w, k, boundary=boundary, **kw), atol=atol, rtol=rtol,
                     what=f"{op} steps={k} {boundary}")


def _fused_tol(dtype, k):
    """The fused kernel against the loop: each step rounds to the dtype in both, their taps summed
    in other orders, so a step can round to a neighbouring value, and the steps carry it on (the
    tests' weights sum to at most 1 in magnitude: no step amplifies it)."""
    ulp = {torch.float64: 2.0 ** -52, torch.float32: 2.0 ** -23, torch.float16: 2.0 ** -10,
           torch.bfloat16: 2.0 ** -7}[dtype]
    return 4 * ulp * (k + 1), 4 * ulp * (k + 1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64], ids=str)
def test_steps_in_every_dtype_round_like_single_calls(device, dtype):
    x, w = make_input((2, 33, 35), dtype, device), make_weights((3, 3), device=device) * 0.2
    got = cupipe.stencil2d(x, w, boundary="reflect", steps=4)
    assert got.dtype == dtype
    # the CPU runs the loop itself; the fused CUDA kernel rounds each step as the loop does
    atol, rtol = (0, 0) if device == "cpu" else _fused_tol(dtype, 4)
    torch.testing.assert_close(got, _loop("stencil2d", x, w, 4, boundary="reflect"), atol=atol, rtol=rtol)


needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device and a CUDA build of cupipe")
FUSED = [  # (op, x shape, weights shape, kwargs)
    ("stencil2d", (1, 45, 37), (3, 3), {}),        # the 3x3 family: one strip
    ("stencil2d", (2, 130, 1000), (3, 3), {}),     # several bands and chunks
    ("stencil2d", (1, 700, 1500), (3, 3), {}),     # many chunks, the edge bands' shorter (launch_steps)
    ("stencil2d", (3, 1, 1), (3, 3), {}),          # a 1x1 plane
    ("stencil2d", (2, 5, 3), (5, 3), {}),          # a plane no larger than the window
    ("stencil2d", (1, 70, 90), (5, 5), {}),        # ry = 2: 4 steps a pass
    ("stencil2d", (1, 40, 50), (9, 9), {}),        # ry = rx = 4: weights in shared memory
    ("stencil2d", (1, 33, 700), (3, 9), {}),       # rx = 4: halos of 8 lanes
    ("stencil2d", (2, 64, 48), (7, 1), {}),        # rx = 0: no shuffles
    ("stencil1d", (5, 3000), (3,), {"dim": -1}),   # rows (ry = 0): 16 steps a pass
    ("stencil1d", (4000,), (9,), {"dim": -1}),
    ("stencil1d", (300, 20), (5,), {"dim": 0}),    # along the rows of a plane
    ("stencil1d", (3, 50, 30), (3,), {"dim": 1}),  # a middle dim
]


def _contraction(wshape, device, dtype=torch.float32, seed=1000):
    """Weights whose magnitudes sum to 1: 64 steps stay finite and no step amplifies an error."""
    w = make_weights(wshape, torch.float64, device, seed=seed)
    return (w / w.abs().sum()).to(dtype)


def _fused_matches_loop(op, x, w, k, **kw):
    try:
        want = _loop(op, x, w, k, **kw)
    except (ValueError, RuntimeError) as e:  # a plane too small for the boundary: the same error
        with pytest.raises(type(e)):
            getattr(cupipe, op)(x, w, steps=k, **kw)
        return
    poison_allocator(2 * want.numel() * want.element_size(), x.device)
    got = getattr(cupipe, op)(x, w, steps=k, **kw)
    atol, rtol = _fused_tol(x.dtype, k)
    assert_close(got, want, atol=atol, rtol=rtol, what=f"{op} {tuple(x.shape)} steps={k} {kw}")


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("case", FUSED, ids=lambda c: f"{c[0]}-{'x'.join(map(str, c[1]))}-{'x'.join(map(str, c[2]))}")
@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_fused_steps_equal_the_loop(case, boundary):
    op, shape, wshape, kw = case
    x, w = make_input(shape, device="cuda"), _contraction(wshape, "cuda")
    for k in (2, 7, 17, 40):  # one pass, and several of unequal shares of the steps
        _fused_matches_loop(op, x, w, k, boundary=boundary, **kw)


def test_steps_per_pass_mirror_the_kernels():
    """ks.steps_per_pass is the kernel header's: 16 along rows, 4/4/2/2 by ry (fp64 4/2/1/1)."""
    assert [ks.steps_per_pass(ry, 4) for ry in range(5)] == [16, 4, 4, 2, 2]
    assert [ks.steps_per_pass(ry, 2) for ry in range(5)] == [16, 4, 4, 2, 2]
    assert [ks.steps_per_pass(ry, 8) for ry in range(5)] == [16, 4, 2, 1, 1]
    assert not ks.stencil_steps_instances("tma", 3, "float64", [(3, 1), (4, 4)])
    assert len(ks.stencil_steps_instances("tma", 3, "float32")) == 25 + 16  # a star instance where ry, rx > 0
    from cupipe._kernel_cache import instances_for
    got = instances_for("stencil_steps", dtype="float32", mechanism="tma", stages=3, radius=(0, 1, 1))
    assert [i.id for i in got] == [f"stencil_steps_kernel<engine::Mechanism::Tma,3,float,1,1,{star}>"
                                   for star in ("false", "true")]  # the star pair's two instances
    got = instances_for("stencil_steps", dtype="float32", mechanism="tma", stages=3, radius=(0, 0, 2))
    assert [i.id for i in got] == ["stencil_steps_kernel<engine::Mechanism::Tma,3,float,0,2,false>"]


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("mechanism, stages", [(m, 2) for m in cupipe.MECHANISMS if m != "auto"] +
                         [("tma", 1), ("tma", 4), ("primitives", 1)])
def test_fused_steps_every_mechanism(mechanism, stages):
    if mechanism == "tma" and not cupipe.tma_available():
        pytest.skip("tma needs sm_90")
    x, w = make_input((2, 45, 300), device="cuda"), _contraction((3, 3), "cuda")
    for boundary in ("zero", "reflect"):
        _fused_matches_loop("stencil2d", x, w, 9, boundary=boundary, mechanism=mechanism, stages=stages)


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64], ids=str)
def test_fused_steps_strided_inputs_and_dtypes(dtype):
    base = make_input((2, 60, 80), dtype, "cuda")
    w = _contraction((3, 5), "cuda", dtype)
    for x in (base.transpose(1, 2), base[:, 3:-2, 5:-1], base[:, ::2]):
        for boundary in ("replicate", "circular"):
            _fused_matches_loop("stencil2d", x, w, 6, boundary=boundary)
    _fused_matches_loop("stencil1d", base, _contraction((5,), "cuda", dtype), 20, dim=1, boundary="reflect")


def _star(wshape, device, dtype=torch.float32, seed=1000):
    """_contraction's weights with every tap off the two axes zero: the star pair's star instance."""
    w = make_weights(wshape, torch.float64, device, seed=seed)
    ky, kx = wshape
    axes = torch.zeros(wshape, dtype=torch.bool, device=device)
    axes[ky // 2, :] = axes[:, kx // 2] = True
    w = w * axes
    return (w / w.abs().sum()).to(dtype)


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("shape, wshape", [((1, 45, 37), (3, 3)), ((2, 130, 1000), (3, 3)), ((1, 700, 1500), (3, 3)),
                                           ((1, 70, 90), (5, 5)), ((1, 40, 50), (9, 9)), ((1, 33, 700), (3, 9))],
                         ids=lambda v: "x".join(map(str, v)))
@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_fused_star_steps_equal_the_loop(shape, wshape, boundary):
    x = make_input(shape, device="cuda")
    for k in (2, 9):
        _fused_matches_loop("stencil2d", x, _star(wshape, "cuda"), k, boundary=boundary)
    _fused_matches_loop("stencil2d", x.to(torch.bfloat16), _star(wshape, "cuda", torch.bfloat16), 4, boundary=boundary)


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("boundary", ["zero", "reflect", "circular"])
def test_fused_star_steps_meet_inf_and_nan_as_the_loop_does(boundary):
    """The loop's single steps multiply every tap (0 x inf = NaN off the axes): the fused star
    instance hands a block whose rows meet a non-finite value to the general one, so NaN and
    inf land where the loop puts them. Spots on plane edges and scattered over chunks and bands."""
    x = make_input((2, 700, 1500), device="cuda")
    gen = torch.Generator(device="cpu").manual_seed(7)
    spots = [(0, 0, 0), (1, 699, 1499), (0, 350, 0), (1, 0, 777)] + [
        (int(torch.randint(2, (1,), generator=gen)), int(torch.randint(700, (1,), generator=gen)),
         int(torch.randint(1500, (1,), generator=gen))) for _ in range(8)]
    for n, idx in enumerate(spots):
        x[idx] = (float("inf"), float("-inf"), float("nan"))[n % 3]
    for wshape, k in [((3, 3), 4), ((3, 3), 8), ((5, 3), 4)]:
        w = _star(wshape, "cuda")
        got, want = cupipe.stencil2d(x, w, boundary=boundary, steps=k), _loop("stencil2d", x, w, k, boundary=boundary)
        assert torch.equal(torch.isnan(got), torch.isnan(want)), (wshape, k)
        assert torch.equal(torch.isinf(got), torch.isinf(want)), (wshape, k)
        assert bool(torch.isnan(want).any()), (wshape, k)
        fin = torch.isfinite(want)
        atol, rtol = _fused_tol(x.dtype, k)
        assert_close(got[fin], want[fin], atol=atol, rtol=rtol, what=f"finite outputs {wshape} steps={k}")


@pytest.mark.cuda
@needs_cuda
def test_a_cuda_graph_of_fused_steps_follows_the_weights():
    """The star pair reads the weights on the device: a replay after star weights replaced general
    ones (and back) is right."""
    x, w = make_input((2, 300, 500), device="cuda"), _contraction((3, 3), "cuda")
    cupipe.stencil2d(x, w, steps=8)  # compile first
    s, g = torch.cuda.Stream(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        y = cupipe.stencil2d(x, w, steps=8)
    for weights in (_star((3, 3), "cuda", seed=5), _contraction((3, 3), "cuda", seed=6)):
        w.copy_(weights)
        g.replay()
        torch.cuda.synchronize()
        atol, rtol = _fused_tol(x.dtype, 8)
        assert_close(y, _loop("stencil2d", x, w, 8), atol=atol, rtol=rtol, what="graph replay, new weights")


@pytest.mark.cuda
@needs_cuda
def test_fused_steps_large_plane():
    """Chunks of rows with the pipeline's fill rows between them, bands of several blocks."""
    x, w = make_input((1, 1500, 2100), device="cuda"), _contraction((3, 3), "cuda")
    for boundary in ("zero", "reflect"):
        _fused_matches_loop("stencil2d", x, w, 8, boundary=boundary)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{'x'.join(map(str, c[2]))}")
@pytest.mark.parametrize("k", [1, 3, 7])
def test_gradients_through_the_steps(device, case, k):
    op, shape, wshape, kw = case
    x = make_input(shape, torch.float64, device).requires_grad_()
    w = (make_weights(wshape, torch.float64, device) * 0.3).requires_grad_()
    g = make_input(shape, torch.float64, device, seed=5)
    boundary = "reflect" if k == 3 else "circular"
    got = torch.autograd.grad(getattr(cupipe, op)(x, w, boundary=boundary, steps=k, **kw), (x, w), g)
    ref = torch.autograd.grad(_loop(op, x, w, k, boundary=boundary, **kw), (x, w), g)
    for a, b, name in zip(got, ref, ("x", "weights")):
        assert_close(a, b, atol=1e-10, rtol=1e-10, what=f"{op} grad {name} steps={k}")
    # only the weights, and only x
    gw, = torch.autograd.grad(getattr(cupipe, op)(x.detach(), w, boundary=boundary, steps=k, **kw), (w,), g)
    assert_close(gw, ref[1], atol=1e-10, rtol=1e-10, what="weights only")
    gx, = torch.autograd.grad(getattr(cupipe, op)(x, w.detach(), boundary=boundary, steps=k, **kw), (x,), g)
    assert_close(gx, ref[0], atol=1e-10, rtol=1e-10, what="x only")


def test_gradcheck_through_steps(device):
    x = make_input((9, 10), torch.float64, device).requires_grad_()
    w = (make_weights((3, 3), torch.float64, device) * 0.3).requires_grad_()
    for k, check in ((4, torch.autograd.gradcheck), (3, torch.autograd.gradgradcheck)):
        assert check(lambda a, b, k=k: cupipe.stencil2d(a, b, boundary="replicate", steps=k), (x, w))


def test_compile_vmap_and_opcheck_take_steps(device):
    x, w = make_input((3, 12, 14), device=device), make_weights((3, 3), device=device) * 0.3
    ref = cupipe.stencil2d(x, w, steps=3)
    got = torch.compile(lambda a: cupipe.stencil2d(a, w, steps=3), fullgraph=True)(x)
    assert_close(got, ref, atol=1e-5, rtol=1e-5, what="compile")
    got = torch.vmap(lambda a: cupipe.stencil2d(a, w, steps=3))(x)
    assert_close(got, ref, atol=1e-5, rtol=1e-5, what="vmap")
    torch.library.opcheck(torch.ops.cupipe.stencil2d.default, (x, w), {"steps": 3})


@pytest.mark.parametrize("op, wshape", [("stencil1d", (3,)), ("stencil2d", (3, 3)), ("stencil3d", (3, 3, 3))])
def test_steps_below_one_name_the_argument(device, op, wshape):
    x = make_input((4, 5, 6), device=device)
    with pytest.raises(ValueError, match=f"cupipe.{op}: steps must be >= 1, got 0"):
        getattr(cupipe, op)(x, make_weights(wshape, device=device), steps=0)
