"""The Python wrappers' no-gradient path (cupipe/ops.py `_call`): when no input needs a gradient
they call the op below the autograd key. The results must equal the op called through autograd,
carry no autograd history, and the path must be taken exactly when nothing needs a gradient."""
from __future__ import annotations

import pytest
import torch

import cupipe
from conftest import make_input, make_weights

CALLS = {  # name: (wrapper call, the op called directly, differentiable inputs)
    "stream_copy": (lambda x, w: cupipe.stream_copy(x),
                    lambda x, w: torch.ops.cupipe.stream_copy(x)),
    "stencil1d": (lambda x, w: cupipe.stencil1d(x, w[0], boundary="reflect"),
                  lambda x, w: torch.ops.cupipe.stencil1d(x, w[0], boundary="reflect")),
    "stencil2d": (lambda x, w: cupipe.stencil2d(x, w, boundary="circular"),
                  lambda x, w: torch.ops.cupipe.stencil2d(x, w, boundary="circular")),
    "reduce": (lambda x, w: cupipe.reduce(x, "amax", -1),
               lambda x, w: torch.ops.cupipe.reduce(x, "amax", [-1], False)),
}


class _Spy:
    """Counts the wrappers' entries into their no-gradient path (cupipe.ops._below_autograd; torch's
    own autograd kernels enter torch._C._AutoDispatchBelowAutograd too, so that is not counted)."""

    def __init__(self, real):
        self.real, self.n = real, 0

    def __call__(self):
        self.n += 1
        return self.real()


@pytest.mark.parametrize("name", list(CALLS))
def test_no_gradient_path(device, monkeypatch, name):
    wrapper, direct = CALLS[name]
    x = make_input((6, 37), device=device, seed=41)
    w = make_weights((3, 3), device=device, seed=42)
    expect = direct(x, w)
    spy = _Spy(cupipe.ops._below_autograd)
    monkeypatch.setattr(cupipe.ops, "_below_autograd", spy)

    got = wrapper(x, w)  # grad mode on, nothing requires grad
    assert spy.n == 1 and not got.requires_grad and got.grad_fn is None
    torch.testing.assert_close(got, expect, rtol=0, atol=0)

    xg = x.clone().requires_grad_(True)
    with torch.no_grad():  # an input requires grad, but grad mode is off
        got = wrapper(xg, w)
    assert spy.n == 2 and not got.requires_grad
    torch.testing.assert_close(got, expect, rtol=0, atol=0)
    with torch.inference_mode():
        got = wrapper(x, w)
    assert spy.n == 3 and not got.requires_grad
    torch.testing.assert_close(got, expect, rtol=0, atol=0)

    got = wrapper(xg, w)  # a gradient is needed: through the autograd kernel
    assert spy.n == 3 and got.requires_grad and got.grad_fn is not None
    torch.testing.assert_close(got.detach(), expect, rtol=0, atol=0)
    got.sum().backward()
    assert xg.grad is not None and xg.grad.shape == x.shape


def test_weights_needing_a_gradient_keep_autograd(device, monkeypatch):
    """The stencils' weights count as inputs: a Parameter keeps the autograd path."""
    x = make_input((6, 37), device=device, seed=43)
    w = torch.nn.Parameter(make_weights((3, 3), device=device, seed=44))
    spy = _Spy(cupipe.ops._below_autograd)
    monkeypatch.setattr(cupipe.ops, "_below_autograd", spy)
    y = cupipe.stencil2d(x, w)
    assert spy.n == 0 and y.requires_grad
    y.sum().backward()
    # d/dw of sum(stencil(x, w)) with the zero boundary: sums of x over shifted windows
    xp = torch.nn.functional.pad(x, (1, 1, 1, 1))
    ref = torch.stack([torch.stack([xp[a:a + 6, b:b + 37].sum() for b in range(3)]) for a in range(3)])
    torch.testing.assert_close(w.grad, ref, rtol=1e-5, atol=1e-4)
