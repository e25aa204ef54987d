"""torch's own test inputs for the reductions (the OpInfo sample inputs of
``torch.testing._internal.common_methods_invocations.op_db``) through ``cupipe.reduce``, compared
with the torch op on the same sample: values, shape and dtype, or an error where torch raises one.
Needs ``expecttest`` (the test extra installs it), which torch's test module imports."""
from __future__ import annotations

import pytest
import torch

import cupipe
from conftest import assert_close

common = pytest.importorskip("torch.testing._internal.common_methods_invocations",
                             reason="torch's OpInfo database needs expecttest (pip install expecttest)")

# The reductions cupipe.reduce has, by their OpInfo names (cupipe's op name where it differs).
OPS = ["sum", "mean", "amax", "amin", "var", "std", "argmax", "argmin", "logsumexp", "linalg.vector_norm"]
CUPIPE_NAME = {"linalg.vector_norm": "norm"}
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
TOL = {torch.float32: 1e-5, torch.float64: 1e-12, torch.float16: 1e-2, torch.bfloat16: 2e-2}


def _opinfo(name):
    found = [o for o in common.op_db if o.name == name and o.variant_test_name == ""]
    assert len(found) == 1, f"op_db has {len(found)} plain entries named {name}"
    return found[0]


def _cupipe_kwargs(name, args, kwargs):
    """A sample's arguments (positional ones as torch's signature names them) as cupipe.reduce's."""
    kw = dict(kwargs)
    if name == "logsumexp":  # logsumexp(input, dim, keepdim)
        kw.update(zip(("dim", "keepdim"), args))
    else:
        assert not args, f"positional args {args} (only logsumexp's are mapped)"
    if "unbiased" in kw:
        kw["correction"] = int(kw.pop("unbiased"))
    unknown = set(kw) - {"dim", "keepdim", "correction", "ord", "dtype"}
    assert not unknown, f"unmapped kwargs {unknown}"
    return kw


def _compare(name, torch_op, x, args, kwargs, what):
    """cupipe.reduce against torch_op on one sample: the same result, or an error (with a message)
    where torch raises one. Returns whether torch raised."""
    kw = _cupipe_kwargs(name, args, kwargs)
    dim, keepdim = kw.pop("dim", None), kw.pop("keepdim", False)
    op = CUPIPE_NAME.get(name, name)
    try:
        expected = torch_op(x, *args, **kwargs)
    except Exception as e:
        with pytest.raises((ValueError, RuntimeError, IndexError)) as got:
            cupipe.reduce(x, op, dim, keepdim, **kw)
        assert str(got.value), f"{what}: cupipe raised without a message (torch: {e})"
        return True
    out = cupipe.reduce(x, op, dim, keepdim, **kw)
    tol = TOL[x.dtype]
    if name == "linalg.vector_norm" and x.dtype in (torch.float16, torch.bfloat16):
        tol = 2 * tol  # a p-th power and its root, each rounded to the 8-11 bit mantissa
    assert_close(out, expected, atol=tol, rtol=tol, what=what, equal_nan=True)
    return False


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("name", OPS)
def test_opinfo_samples(device, name, dtype):
    info = _opinfo(name)
    samples = list(info.sample_inputs(device, dtype, requires_grad=False))
    assert samples, f"no sample inputs for {name}"
    for i, s in enumerate(samples):
        _compare(name, info.op, s.input, s.args, s.kwargs,
                 f"{name} sample {i}: shape {tuple(s.input.shape)} {dtype} args {s.args} kwargs {s.kwargs}")


@pytest.mark.parametrize("name", OPS)
def test_empty_inputs_as_torch(device, name):
    """Empty reductions, which the OpInfo samples lack: sum 0, mean and var NaN, logsumexp -inf and
    finite norms 0 as in torch; amax, amin, argmax and argmin raise as torch does (over a non-empty
    dim they are fine)."""
    info = _opinfo(name)
    cases = [((0,), {}), ((0, 3), {}), ((0, 3), {"dim": 1}), ((0, 3), {"dim": 0})]
    args = {"logsumexp": lambda kw: ((kw.get("dim", (0, 1) if len(shape) > 1 else 0),), {})}
    raised = []
    for shape, kw in cases:
        a, k = args[name](kw) if name in args else ((), kw)
        raised.append(_compare(name, info.op, torch.empty(shape, device=device), a, k, f"{name} {shape} {kw}"))
    no_identity = name in ("amax", "amin", "argmax", "argmin")
    assert raised == ([True, True, False, True] if no_identity else [False] * 4), raised
