"""The stencils' ``steps=k``: equal to k single calls (every boundary, every dtype), gradients
through the k steps against autograd through the loop, and the argument's error."""
from __future__ import annotations

import pytest
import torch

import cupipe
from conftest import BOUNDARIES, assert_close, make_input, make_weights, tol

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


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64], ids=str)
def test_steps_in_every_dtype_round_like_single_calls(device, dtype):
    x, w = make_input((2, 33, 35), dtype, device), make_weights((3, 3), device=device) * 0.2
    got = cupipe.stencil2d(x, w, boundary="reflect", steps=4)
    assert got.dtype == dtype
    torch.testing.assert_close(got, _loop("stencil2d", x, w, 4, boundary="reflect"), atol=0, rtol=0)


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
