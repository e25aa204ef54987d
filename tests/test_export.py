"""The ops under torch.export: a module that calls them exports to one graph with the ops as
nodes (their fake kernels give the shapes), the exported program runs and differentiates like the
eager module, takes other sizes when a dim is exported as dynamic, and survives
``torch.export.save`` / ``torch.export.load`` (importing cupipe registers the ops the loaded graph
names)."""
from __future__ import annotations

import io

import pytest
import torch

import cupipe  # noqa: F401  (registers torch.ops.cupipe.*, which a loaded program names)
from conftest import Smoother, assert_close, assert_runs_like_eager, make_input

export = pytest.importorskip("torch.export")


OPS = {"stencil2d", "stencil1d", "reduce", "stream_copy"}


def _cupipe_ops(ep) -> set:
    """The cupipe op names (``stencil2d``, ...) that the exported graph calls."""
    names = set()
    for node in ep.graph.nodes:
        if node.op == "call_function" and str(node.target).startswith("cupipe."):
            names.add(str(node.target).split(".")[1])
    return names


def _run_like_eager(mod, ep_module, x, what):
    """The exported program's module (its own copies of the weights) against the eager module."""
    params = dict(ep_module.named_parameters())
    assert_runs_like_eager(mod, ep_module, [params["w2"], params["w1"]], x, what,
                           fwd_tol=1e-5, grad_tol=1e-4)


def test_export_static(device):
    torch.manual_seed(0)
    mod = Smoother().to(device)
    x = make_input((2, 9, 12), torch.float32, device, seed=1)
    ep = export.export(mod, (x,))
    assert _cupipe_ops(ep) == OPS, f"exported graph calls {sorted(_cupipe_ops(ep))}"
    _run_like_eager(mod, ep.module(), make_input((2, 9, 12), torch.float32, device, seed=2), "static")


def test_export_dynamic_dims(device):
    """Batch, H and W exported as dynamic: one program, run at sizes other than the example's
    (the reflect boundary's size > r is the op's run-time check, not a guard of the graph)."""
    mod = Smoother().to(device)
    x = make_input((2, 9, 12), torch.float32, device, seed=3)
    b, h, w = export.Dim("b"), export.Dim("h", min=4), export.Dim("w", min=4)
    ep = export.export(mod, (x,), dynamic_shapes={"x": {0: b, 1: h, 2: w}})
    run = ep.module()
    for seed, shape in [(4, (3, 7, 10)), (5, (1, 16, 5)), (6, (2, 9, 12))]:
        _run_like_eager(mod, run, make_input(shape, torch.float32, device, seed), f"dynamic {shape}")


def test_export_save_load_roundtrip(device):
    mod = Smoother().to(device)
    x = make_input((2, 8, 11), torch.float32, device, seed=7)
    ep = export.export(mod, (x,))
    buf = io.BytesIO()
    export.save(ep, buf)
    buf.seek(0)
    loaded = export.load(buf)
    assert _cupipe_ops(loaded) == OPS
    with torch.no_grad():
        got, want = loaded.module()(x), mod(x)
    for g, w, name in zip(got, want, ("total", "peak")):
        assert_close(g, w, atol=1e-5, rtol=1e-5, what=f"loaded {name}")
