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

# The reductions cupipe.reduce has, by their OpInfo names.
OPS = ["sum", "mean", "amax", "amin"]
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
TOL = {torch.float32: 1e-5, torch.float64: 1e-12, torch.float16: 1e-2, torch.bfloat16: 2e-2}


def _opinfo(name):
    found = [o for o in common.op_db if o.name == name and o.variant_test_name == ""]
    assert len(found) == 1, f"op_db has {len(found)} plain entries named {name}"
    return found[0]


def _compare(name, torch_op, x, kwargs, what):
    """cupipe.reduce against torch_op on one sample: the same result, or an error (with a message)
    where torch raises one. Returns whether torch raised."""
    try:
        expected = torch_op(x, **kwargs)
    except Exception as e:
        with pytest.raises((ValueError, RuntimeError, IndexError)) as got:
            cupipe.reduce(x, name, kwargs.get("dim"), kwargs.get("keepdim", False))
        assert str(got.value), f"{what}: cupipe raised without a message (torch: {e})"
        return True
    out = cupipe.reduce(x, name, kwargs.get("dim"), kwargs.get("keepdim", False))
    tol = TOL[x.dtype]
    assert_close(out, expected, atol=tol, rtol=tol, what=what, equal_nan=True)
    return False


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("name", OPS)
def test_opinfo_samples(device, name, dtype):
    info = _opinfo(name)
    samples = list(info.sample_inputs(device, dtype, requires_grad=False))
    assert samples, f"no sample inputs for {name}"
    for i, s in enumerate(samples):
        assert not s.args, f"{name} sample {i}: positional args {s.args} (only dim/keepdim kwargs are mapped)"
        unknown = set(s.kwargs) - {"dim", "keepdim"}
        assert not unknown, f"{name} sample {i}: unmapped kwargs {unknown}"
        _compare(name, info.op, s.input, s.kwargs,
                 f"{name} sample {i}: shape {tuple(s.input.shape)} {dtype} kwargs {s.kwargs}")


@pytest.mark.parametrize("name", OPS)
def test_empty_inputs_as_torch(device, name):
    """Empty reductions, which the OpInfo samples lack: sum 0 and mean NaN as in torch; amax and
    amin raise as torch does (over a non-empty dim they are fine)."""
    info = _opinfo(name)
    raised = [_compare(name, info.op, torch.empty(shape, device=device), kw, f"{name} {shape} {kw}")
              for shape, kw in (((0,), {}), ((0, 3), {}), ((0, 3), {"dim": 1}), ((0, 3), {"dim": 0}))]
    assert raised == ([True, True, False, True] if name in ("amax", "amin") else [False] * 4), raised
