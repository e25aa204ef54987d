"""torch.library.opcheck on every op: schema, fake kernel, autograd registration and AOT dispatch
(static and dynamic shapes), on several sample inputs, with and without requires_grad."""
from __future__ import annotations

import pytest
import torch

import cupipe  # noqa: F401  (registers the ops)
from conftest import make_input

OPS = torch.ops.cupipe


def _samples(device):
    """(id, op, args, kwargs) with float64 where gradients are involved (tight comparisons)."""
    f32, f64, f16 = torch.float32, torch.float64, torch.float16
    x1 = lambda shape, dtype=f32, seed=0: make_input(shape, dtype, device, seed)  # noqa: E731
    s = []
    # stream_copy
    s += [
        ("copy-f32", OPS.stream_copy.default, (x1((7, 13)),), {}),
        ("copy-int64", OPS.stream_copy.default, (make_input((33,), torch.int64, device, 1),), {}),
        ("copy-noncontig", OPS.stream_copy.default, (x1((8, 6)).t(),),
         dict(mechanism="primitives", stages=3, vec_bytes=8)),
        ("copy-empty", OPS.stream_copy.default, (x1((0, 3)),), {}),
        ("copy-0d", OPS.stream_copy.default, (torch.tensor(2.5, device=device),), {}),
    ]
    # stencil1d
    s += [
        ("s1d-zero", OPS.stencil1d.default, (x1((5, 17), f64), x1((3,), f64, 1)), {}),
        ("s1d-reflect-dim0", OPS.stencil1d.default, (x1((9, 4), f64), x1((5,), f64, 1)),
         dict(dim=0, boundary="reflect")),
        ("s1d-circ-small", OPS.stencil1d.default, (x1((2, 3), f64), x1((9,), f64, 1)),
         dict(boundary="circular", mechanism="sync", stages=2)),
        ("s1d-replicate-3d", OPS.stencil1d.default, (x1((2, 6, 5), f64), x1((3,), f64, 1)),
         dict(dim=1, boundary="replicate")),
        ("s1d-f16", OPS.stencil1d.default, (x1((4, 10), f16), x1((3,), f32, 1)), {}),
        ("s1d-noncontig", OPS.stencil1d.default, (x1((10, 6), f64).t(), x1((5,), f64, 1)),
         dict(dim=0, boundary="circular")),
    ]
    # stencil2d
    s += [
        ("s2d-zero", OPS.stencil2d.default, (x1((6, 7), f64), x1((3, 3), f64, 1)), {}),
        ("s2d-rect-reflect", OPS.stencil2d.default, (x1((2, 6, 7), f64), x1((3, 5), f64, 1)),
         dict(boundary="reflect")),
        ("s2d-circular", OPS.stencil2d.default, (x1((5, 4), f64), x1((5, 3), f64, 1)),
         dict(boundary="circular", mechanism="cg", stages=4)),
        ("s2d-replicate-batch", OPS.stencil2d.default, (x1((2, 1, 4, 5), f64), x1((1, 3), f64, 1)),
         dict(boundary="replicate")),
        ("s2d-f32", OPS.stencil2d.default, (x1((8, 9)), x1((3, 3), f32, 1)), {}),
    ]
    # the stencils' weight gradients (what their autograd calls)
    s += [
        ("wg1d-reflect", OPS._stencil1d_weight_grad.default,
         (x1((5, 17), f64), x1((5, 17), f64, 2), x1((3,), f64, 1), -1, "reflect"), {}),
        ("wg1d-dim0-f32", OPS._stencil1d_weight_grad.default,
         (x1((9, 4)), x1((9, 4), f32, 2), x1((5,), f32, 1), 0, "zero"), {}),
        ("wg2d-circular", OPS._stencil2d_weight_grad.default,
         (x1((2, 6, 7), f64), x1((2, 6, 7), f64, 2), x1((3, 5), f64, 1), "circular"), {}),
        ("wg2d-f16", OPS._stencil2d_weight_grad.default,
         (x1((8, 9), f16), x1((8, 9), f16, 2), x1((3, 3), f32, 1), "replicate"), {}),
    ]
    # reduce
    perm = lambda shape: (torch.randperm(torch.Size(shape).numel(),  # noqa: E731
                                         generator=torch.Generator().manual_seed(3))
                          .double().reshape(shape) / 5).to(device)
    s += [
        ("red-sum-all", OPS.reduce.default, (x1((4, 5), f64),), {}),
        ("red-sum-dim", OPS.reduce.default, (x1((4, 5, 3), f64), "sum", [1], False), {}),
        ("red-mean-keep", OPS.reduce.default, (x1((4, 5, 3), f64), "mean", [0, 2], True), {}),
        ("red-amax", OPS.reduce.default, (perm((4, 6)), "amax", [-1], False), {}),
        ("red-amin-all-keep", OPS.reduce.default, (perm((3, 4)), "amin", None, True), {}),
        ("red-sum-dtype", OPS.reduce.default, (x1((6, 5), f32), "sum", [0], False),
         dict(dtype=f64)),
        ("red-mean-bf16", OPS.reduce.default, (x1((6, 5), torch.bfloat16), "mean", [1], False),
         dict(dtype=f32)),
        ("red-0d", OPS.reduce.default, (torch.tensor(1.5, dtype=f64, device=device), "sum"), {}),
        ("red-noncontig", OPS.reduce.default, (x1((6, 8), f64).t(), "sum", [0], False),
         dict(mechanism="barrier", stages=2)),
    ]
    return s


SAMPLE_IDS = [c[0] for c in _samples("cpu")]


def _with_grad(args, on):
    out = []
    for a in args:
        if isinstance(a, torch.Tensor) and on and (a.dtype.is_floating_point or a.is_complex()):
            a = a.detach().requires_grad_()
        out.append(a)
    return tuple(out)


@pytest.mark.parametrize("requires_grad", [False, True], ids=["nograd", "grad"])
@pytest.mark.parametrize("idx", range(len(SAMPLE_IDS)), ids=SAMPLE_IDS)
def test_opcheck(device, idx, requires_grad):
    name, op, args, kwargs = _samples(device)[idx]
    args = _with_grad(args, requires_grad)
    torch.library.opcheck(op, args, kwargs)


def test_fake_kernels_shapes():
    """The fake kernels agree with the real ones on shape, dtype and contiguity."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    cases = [
        (OPS.stream_copy.default, (make_input((3, 5)).t(),), {}),
        (OPS.stencil1d.default, (make_input((3, 5)), make_input((3,))), dict(dim=0)),
        (OPS.stencil2d.default, (make_input((2, 4, 5)).transpose(-1, -2), make_input((3, 3))), {}),
        (OPS.reduce.default, (make_input((3, 4, 5)), "mean", [0, 2], True), dict(dtype=torch.float64)),
        (OPS.reduce.default, (make_input((3, 4, 5)), "amax", [-1], False), {}),
        (OPS.reduce.default, (torch.tensor(1.0), "sum", [0], True), {}),
    ]
    for op, args, kwargs in cases:
        real = op(*args, **kwargs)
        with FakeTensorMode() as mode:
            fargs = tuple(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args)
            fake = op(*fargs, **kwargs)
        assert fake.shape == real.shape, op
        assert fake.dtype == real.dtype, op
        assert fake.stride() == real.stride(), op
