"""The Python wrappers' direct path (cupipe/ops.py `_direct`, csrc/ops/direct_calls.cpp): when no
input needs a gradient and nothing traces or transforms the call they call the op through
cupipe._C.call_*, below the autograd key. The results must equal the op called through torch.ops,
carry no autograd history, the path must be taken exactly when it may be, and bad arguments must
raise what torch.ops raises."""
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
    """Counts the calls for which cupipe.ops._direct allowed the direct path."""

    def __init__(self, real):
        self.real, self.n = real, 0

    def __call__(self, *inputs):
        ok = self.real(*inputs)
        self.n += ok
        return ok


@pytest.mark.parametrize("name", list(CALLS))
def test_no_gradient_path(device, monkeypatch, name):
    wrapper, direct = CALLS[name]
    x = make_input((6, 37), device=device, seed=41)
    w = make_weights((3, 3), device=device, seed=42)
    expect = direct(x, w)
    spy = _Spy(cupipe.ops._direct)
    monkeypatch.setattr(cupipe.ops, "_direct", spy)

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
    spy = _Spy(cupipe.ops._direct)
    monkeypatch.setattr(cupipe.ops, "_direct", spy)
    y = cupipe.stencil2d(x, w)
    assert spy.n == 0 and y.requires_grad
    y.sum().backward()
    # d/dw of sum(stencil(x, w)) with the zero boundary: sums of x over shifted windows
    xp = torch.nn.functional.pad(x, (1, 1, 1, 1))
    ref = torch.stack([torch.stack([xp[a:a + 6, b:b + 37].sum() for b in range(3)]) for a in range(3)])
    torch.testing.assert_close(w.grad, ref, rtol=1e-5, atol=1e-4)


class _Sub(torch.Tensor):
    pass


def test_subclasses_and_modes_take_torch_ops(device, monkeypatch):
    """Tensor subclasses and __torch_function__ modes see the op through torch.ops."""
    spy = _Spy(cupipe.ops._direct)
    monkeypatch.setattr(cupipe.ops, "_direct", spy)
    x = make_input((5, 9), device=device, seed=45)
    expect = cupipe.reduce(x, "sum", -1)
    assert spy.n == 1
    got = cupipe.reduce(x.as_subclass(_Sub), "sum", -1)
    assert spy.n == 1
    torch.testing.assert_close(got.as_subclass(torch.Tensor), expect, rtol=0, atol=0)

    seen = []

    class Watch(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    with Watch():
        got = cupipe.stencil1d(x, torch.ones(3, device=device))
    assert spy.n == 1 and any("cupipe.stencil1d" in s for s in seen), seen
    torch.testing.assert_close(got, cupipe.stencil1d(x, torch.ones(3, device=device)))


def test_direct_path_errors_match_torch_ops(device):
    """Arguments pybind11 cannot convert fall back to torch.ops, whose errors users see; errors
    raised inside the op keep their type and message, without a C++ backtrace."""
    x = make_input((4, 8), device=device, seed=46)
    w = torch.ones(3, device=device)
    cases = [
        (lambda: cupipe.reduce(x, "median"), lambda: torch.ops.cupipe.reduce(x, "median")),
        (lambda: cupipe.reduce(x, "sum", stages="2"), lambda: torch.ops.cupipe.reduce(x, "sum", stages="2")),
        (lambda: cupipe.stream_copy(x, mechanism="warp"), lambda: torch.ops.cupipe.stream_copy(x, mechanism="warp")),
        (lambda: cupipe.stream_copy(x, vec_bytes=3), lambda: torch.ops.cupipe.stream_copy(x, vec_bytes=3)),
        (lambda: cupipe.stencil1d(x, w, boundary=None), lambda: torch.ops.cupipe.stencil1d(x, w, boundary=None)),
        (lambda: cupipe.stencil1d(x, w, dim=5), lambda: torch.ops.cupipe.stencil1d(x, w, dim=5)),
        (lambda: cupipe.stencil2d(x, w), lambda: torch.ops.cupipe.stencil2d(x, w)),
    ]
    for ours, theirs in cases:
        with pytest.raises(Exception) as ref:
            theirs()
        with pytest.raises(type(ref.value)) as got:
            ours()
        assert str(got.value) == str(ref.value)
        assert "frame #" not in str(got.value) and "Exception raised from" not in str(got.value)


def test_package_imports_have_no_cycle():
    """No import cycle among cupipe's modules, counting imports inside functions too: cupipe.ops
    imports cupipe.tuning (the cache lookup of its wrappers), never the other way round."""
    import ast
    from pathlib import Path

    pkg = Path(cupipe.__file__).parent
    mods = {p.stem: p for p in pkg.glob("*.py")}
    graph = {}
    for name, path in mods.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1:
                    targets = [node.module] if node.module else [a.name for a in node.names]
                elif node.level == 0 and node.module and node.module.startswith("cupipe"):
                    rest = node.module.split(".")[1:]
                    targets = rest[:1] or [a.name for a in node.names]
                else:
                    continue
                deps.update(t.split(".")[0] for t in targets)
            elif isinstance(node, ast.Import):
                deps.update(a.name.split(".")[1] if "." in a.name else "__init__"
                            for a in node.names if a.name.split(".")[0] == "cupipe")
        graph[name] = {d for d in deps if d in mods and d != name}

    def cycle_from(start):
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    return path + [start]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
        return None

    for name in graph:
        assert cycle_from(name) is None, f"import cycle: {' -> '.join(cycle_from(name))}"
    assert "tuning" in graph["ops"] and "ops" not in graph["tuning"]

