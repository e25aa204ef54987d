"""The ops under torch.compile(fullgraph=True): a small module using every op (conftest.Smoother),
forward and backward, equal to the eager module."""
from __future__ import annotations

import functools
import shutil

import pytest
import torch

import cupipe
from conftest import Smoother, assert_close, assert_runs_like_eager, make_input


@functools.lru_cache(maxsize=None)
def _inductor_cpu_usable():
    """Whether inductor can compile C++ for the CPU here; returns (ok, reason)."""
    if shutil.which("g++") is None and shutil.which("c++") is None and shutil.which("clang++") is None:
        return False, "no C++ compiler found for inductor's CPU backend"
    try:
        torch._dynamo.reset()
        f = torch.compile(lambda t: (t * 2 + 1).sin(), backend="inductor", fullgraph=True)
        t = torch.arange(8.0)
        ok = torch.allclose(f(t), (t * 2 + 1).sin())
        torch._dynamo.reset()
        return bool(ok), "inductor's CPU backend produced a wrong result for a trivial function"
    except Exception as e:  # pragma: no cover - depends on the machine's toolchain
        torch._dynamo.reset()
        return False, f"inductor cannot compile C++ here: {type(e).__name__}: {str(e)[:200]}"


BACKENDS = ["eager", "aot_eager", "inductor"]


def _maybe_skip(backend, device):
    if backend == "inductor" and torch.device(device).type == "cpu":
        ok, reason = _inductor_cpu_usable()
        if not ok:
            pytest.skip(reason)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_module_forward_backward(device, backend, dynamic):
    _maybe_skip(backend, device)
    torch._dynamo.reset()
    torch.manual_seed(0)
    eager = Smoother().to(device)
    compiled_mod = Smoother().to(device)
    compiled_mod.load_state_dict(eager.state_dict())
    compiled = torch.compile(compiled_mod, backend=backend, fullgraph=True, dynamic=dynamic)

    for seed, shape in [(1, (2, 9, 12)), (2, (3, 7, 10))]:  # second shape: recompile / dynamic
        assert_runs_like_eager(eager, compiled, [compiled_mod.w2, compiled_mod.w1],
                               make_input(shape, torch.float32, device, seed), backend,
                               fwd_tol=1e-4, grad_tol=1e-4)
    torch._dynamo.reset()


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_each_op(device, backend):
    """Each op alone in a fullgraph-compiled function (no graph breaks), with its knobs."""
    _maybe_skip(backend, device)
    torch._dynamo.reset()
    x = make_input((5, 11), torch.float32, device, 3)
    w1 = make_input((3,), torch.float32, device, 4)
    w2 = make_input((3, 3), torch.float32, device, 5)

    def f(x, w1, w2):
        return (
            cupipe.stream_copy(x.t(), mechanism="sync", stages=2, vec_bytes=4),
            cupipe.stencil1d(x, w1, dim=0, boundary="replicate", stages=1),
            cupipe.stencil2d(x, w2, boundary="zero", mechanism="pipeline"),
            cupipe.reduce(x, "sum", [0], dtype=torch.float64),
            cupipe.reduce(x, "amin", None, True),
        )

    got = torch.compile(f, backend=backend, fullgraph=True)(x, w1, w2)
    want = f(x, w1, w2)
    for g, w in zip(got, want):
        assert_close(g, w, atol=1e-5, rtol=1e-5, what=backend)
    torch._dynamo.reset()


def test_compile_errors_surface(device):
    """A bad argument inside a compiled function raises the op's own exception type."""
    torch._dynamo.reset()
    f = torch.compile(lambda x: cupipe.reduce(x, "sum", [0, 0]), backend="aot_eager",
                      fullgraph=True)
    with pytest.raises(Exception, match="appears more than once"):
        f(make_input((3, 4), torch.float32, device))
    torch._dynamo.reset()
