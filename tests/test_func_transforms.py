"""torch.func over the cupipe ops: grad, second derivatives, vmap (the batching rules of
cupipe/batching.py, with no per-sample fallback) and per-sample gradients, each against plain
autograd or a loop over the samples on random inputs. fp64, so gradients compare at 1e-10."""
from __future__ import annotations

import warnings

import pytest
import torch

import cupipe
from conftest import make_input, make_weights

F64 = torch.float64
TOL = dict(rtol=1e-10, atol=1e-10)

# name: a scalar function of (x, w) through the op, x of shape (5, 7)
LOSSES = {
    "stream_copy": lambda x, w: cupipe.stream_copy(x).pow(3).sum(),
    "stencil1d_circular": lambda x, w: cupipe.stencil1d(x, w[1], dim=0, boundary="circular").pow(2).sum(),
    "stencil1d_reflect": lambda x, w: cupipe.stencil1d(x, w[0], boundary="reflect").pow(2).sum(),
    "stencil2d_zero": lambda x, w: cupipe.stencil2d(x, w).pow(2).sum(),
    "stencil2d_replicate": lambda x, w: cupipe.stencil2d(x, w, boundary="replicate").pow(2).sum(),
    "reduce_sum": lambda x, w: cupipe.reduce(x, "sum", -1).pow(2).sum(),
    "reduce_mean": lambda x, w: cupipe.reduce(x, "mean", [0, 1]) * 3,
    "reduce_amax": lambda x, w: cupipe.reduce(x, "amax", 0).pow(2).sum(),
    "reduce_amin_all": lambda x, w: cupipe.reduce(x, "amin") * 2,
    "reduce_var": lambda x, w: cupipe.reduce(x, "var", -1).pow(2).sum(),
    "reduce_std_all": lambda x, w: cupipe.reduce(x, "std", correction=0) * 2,
    "reduce_logsumexp": lambda x, w: cupipe.reduce(x, "logsumexp", 0).pow(2).sum(),
    "reduce_norm": lambda x, w: cupipe.reduce(x, "norm", [0, 1]) * 3,
    "reduce_norm_ord3": lambda x, w: cupipe.reduce(x, "norm", 1, ord=3).sum(),
}


def _inputs(device, seed):
    x = make_input((5, 7), dtype=F64, device=device, seed=seed)
    w = make_weights((3, 3), dtype=F64, device=device, seed=seed + 1)
    return x, w


def _autograd(f, x, w):
    xa, wa = x.clone().requires_grad_(), w.clone().requires_grad_()
    gx, gw = torch.autograd.grad(f(xa, wa), (xa, wa), allow_unused=True)
    return gx, (torch.zeros_like(w) if gw is None else gw)


@pytest.mark.parametrize("name", list(LOSSES))
def test_grad_matches_autograd(device, name):
    f = LOSSES[name]
    x, w = _inputs(device, 11)
    gx, gw = torch.func.grad(f, argnums=(0, 1))(x, w)
    ex, ew = _autograd(f, x, w)
    torch.testing.assert_close(gx, ex, **TOL)
    torch.testing.assert_close(gw, ew, **TOL)


@pytest.mark.parametrize("name", list(LOSSES))
def test_second_derivative_matches_autograd(device, name):
    """A Hessian-vector product through two levels of torch.func.grad, against double backward."""
    f = LOSSES[name]
    x, w = _inputs(device, 12)
    v = make_input((5, 7), dtype=F64, device=device, seed=13)
    hv = torch.func.grad(lambda t: (torch.func.grad(f)(t, w) * v).sum())(x)
    xa = x.clone().requires_grad_()
    (g,) = torch.autograd.grad(f(xa, w), xa, create_graph=True)
    expect = torch.autograd.grad((g * v).sum(), xa)[0] if g.requires_grad else torch.zeros_like(x)
    torch.testing.assert_close(hv, expect, **TOL)


@pytest.mark.parametrize("dims", [1, 2])
def test_per_sample_gradients(device, dims):
    """vmap(grad): per-sample gradients w.r.t. the input and the shared stencil weights."""
    x = make_input((4, 6, 9), dtype=F64, device=device, seed=14)
    w = make_weights((3, 5), dtype=F64, device=device, seed=15)

    def loss(xi, w):
        y = cupipe.stencil2d(xi, w, boundary="reflect") if dims == 2 else cupipe.stencil1d(xi, w[1], dim=0)
        return cupipe.reduce(y.pow(2), "mean")

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no per-sample batching fallback
        gx, gw = torch.func.vmap(torch.func.grad(loss, argnums=(0, 1)), in_dims=(0, None))(x, w)
    for i in range(x.shape[0]):
        ex, ew = _autograd(loss, x[i], w)
        torch.testing.assert_close(gx[i], ex, **TOL)
        torch.testing.assert_close(gw[i], ew, **TOL)


def _vmapped(fn, *args, in_dims=0):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch's per-sample batching fallback warns: a missing rule
        return torch.func.vmap(fn, in_dims=in_dims)(*args)


@pytest.mark.parametrize("bdim", [0, 1, 2])
def test_vmap_rules(device, bdim):
    x = make_input((4, 6, 9), dtype=F64, device=device, seed=16)
    w = make_weights((3, 5), dtype=F64, device=device, seed=17)
    xb = x.movedim(0, bdim)

    def check(fn, tol=0.0):
        got = _vmapped(fn, xb, in_dims=bdim)
        torch.testing.assert_close(got, torch.stack([fn(t) for t in x]), rtol=tol, atol=tol)

    check(lambda t: cupipe.stream_copy(t))
    check(lambda t: cupipe.stencil2d(t, w, boundary="reflect"))
    for dim in (0, 1, -1, -2):
        check(lambda t: cupipe.stencil1d(t, w[1], dim=dim, boundary="circular"))
    for op in ("sum", "mean", "amax", "amin"):
        for dim in (None, [], 0, [1], [-1, 0], -2):
            for keepdim in (False, True):
                # The batched call is one reduction over rows while each sample's is a
                # whole-tensor (or smaller) one: a different plan adds in a different order, so
                # sums and means agree to fp64 rounding of at most 54 terms (~1e-14 here), not
                # bit for bit; amax and amin do not round and stay exact.
                check(lambda t: cupipe.reduce(t, op, dim, keepdim), tol=1e-13 if op in ("sum", "mean") else 0.0)
    check(lambda t: cupipe.reduce(t, "sum", 1, dtype=torch.float32), tol=1e-6)
    for op in ("var", "std", "argmax", "argmin", "logsumexp", "norm"):
        for dim in (None, 0, -1) if op.startswith("arg") else (None, [1], [-1, 0]):
            check(lambda t: cupipe.reduce(t, op, dim), tol=0.0 if op.startswith("arg") else 1e-13)


def test_vmap_of_scalar_samples_and_per_sample_weights(device):
    v = make_input((5,), dtype=F64, device=device, seed=18)
    for dim in (None, 0, -1):
        got = _vmapped(lambda t: cupipe.reduce(t, "sum", dim, True, dtype=torch.float32), v)
        torch.testing.assert_close(got, v.float(), rtol=0, atol=0)
    # per-sample weights: one call per sample (no fallback warning either)
    x = make_input((3, 6, 9), dtype=F64, device=device, seed=19)
    ws = make_input((3, 3, 3), dtype=F64, device=device, seed=20)
    got = _vmapped(lambda t, wt: cupipe.stencil2d(t, wt, boundary="circular"), x, ws)
    expect = torch.stack([cupipe.stencil2d(x[i], ws[i], boundary="circular") for i in range(3)])
    torch.testing.assert_close(got, expect, rtol=0, atol=0)
    got = _vmapped(lambda wt: cupipe.stencil1d(x[0], wt[0]), ws, in_dims=0)
    torch.testing.assert_close(got, torch.stack([cupipe.stencil1d(x[0], wt[0]) for wt in ws]), rtol=0, atol=0)


def test_vmap_keeps_the_ops_errors(device):
    """A per-sample shape the op rejects raises the op's own error, with the sample's dims."""
    x = make_input((4, 6, 9), dtype=F64, device=device, seed=21)
    w = make_weights((3, 3), dtype=F64, device=device, seed=22)
    with pytest.raises(IndexError, match="dim 2 is out of range for x with 2 dims"):
        torch.func.vmap(lambda t: cupipe.reduce(t, "sum", 2))(x)
    with pytest.raises(IndexError, match="dim -3 is out of range for x with 2 dims"):
        torch.func.vmap(lambda t: cupipe.reduce(t, "sum", -3))(x)
    with pytest.raises(IndexError, match="dim 2 is out of range for x with 2 dims"):
        torch.func.vmap(lambda t: cupipe.stencil1d(t, w[0], dim=2))(x)
    with pytest.raises(ValueError, match="at least 2 dims"):
        torch.func.vmap(lambda t: cupipe.stencil2d(t, w))(x[:, 0])
