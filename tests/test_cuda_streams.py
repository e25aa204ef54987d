"""CUDA-only: CUDA-graph capture of every op, and running on non-default streams / devices.
The whole module is skipped without a GPU (and a CUDA build of cupipe)."""
from __future__ import annotations

import pytest
import torch

import cupipe
from conftest import HAS_CUDA, assert_close, make_input, poison_allocator, tma_supported

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device and a CUDA build of cupipe"),
]


def _mechanisms():
    mechs = ["auto", "sync", "pipeline", "primitives", "specialized"]
    if tma_supported():
        mechs.append("tma")
    return mechs


def _ops(mechanism):
    """(name, fn(x, w1, w2)) for every op; x is (B, H, W) fp32."""
    return [
        ("stream_copy", lambda x, w1, w2: cupipe.stream_copy(x, mechanism=mechanism)),
        ("stencil1d", lambda x, w1, w2: cupipe.stencil1d(x, w1, dim=-1, boundary="circular",
                                                         mechanism=mechanism)),
        ("stencil1d-dim1", lambda x, w1, w2: cupipe.stencil1d(x, w1, dim=1, boundary="reflect",
                                                              mechanism=mechanism)),
        ("stencil2d", lambda x, w1, w2: cupipe.stencil2d(x, w2, boundary="replicate",
                                                         mechanism=mechanism)),
        ("reduce-sum-all", lambda x, w1, w2: cupipe.reduce(x, "sum", mechanism=mechanism)),
        ("reduce-amax-rows", lambda x, w1, w2: cupipe.reduce(x, "amax", -1, mechanism=mechanism)),
        ("reduce-mean-cols", lambda x, w1, w2: cupipe.reduce(x, "mean", 1, mechanism=mechanism)),
        ("reduce-sum-bf16", lambda x, w1, w2: cupipe.reduce(x.to(torch.bfloat16), "sum", [0, 2],
                                                            dtype=torch.float32,
                                                            mechanism=mechanism)),
    ]


OP_NAMES = [n for n, _ in _ops("auto")]


def _close(a, b, what):
    assert_close(a, b, atol=1e-4 * max(1.0, float(b.abs().max()) if b.numel() else 1.0),
                 rtol=1e-4, what=what)


@pytest.mark.parametrize("mechanism", _mechanisms())
@pytest.mark.parametrize("op_idx", range(len(OP_NAMES)), ids=OP_NAMES)
def test_cuda_graph_capture_replay(op_idx, mechanism):
    name, fn = _ops(mechanism)[op_idx]
    shape = (3, 129, 517)
    w1 = make_input((7,), torch.float32, "cuda", 1)
    w2 = make_input((5, 3), torch.float32, "cuda", 2)
    static_x = make_input(shape, torch.float32, "cuda", 3)

    # warm up on a side stream (lazy init, workspace sizes), as the CUDA-graph docs recommend
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn(static_x, w1, w2)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()

    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = fn(static_x, w1, w2)

    for seed in (10, 11, 12):
        new = make_input(shape, torch.float32, "cuda", seed)
        static_x.copy_(new)
        poison_allocator(static_out.numel() * static_out.element_size())
        g.replay()
        torch.cuda.synchronize()
        _close(static_out, fn(new, w1, w2), f"graph replay {name} {mechanism} seed={seed}")
        if name == "stream_copy":
            assert torch.equal(static_out, new)
    del g


@pytest.mark.parametrize("op_idx", range(len(OP_NAMES)), ids=OP_NAMES)
def test_side_stream(op_idx):
    """The op runs on the *current* stream: a side stream that first sleeps, then writes the
    input, then calls the op must see the new input (an op launched on the default stream
    would race and read the old one)."""
    name, fn = _ops("auto")[op_idx]
    shape = (4, 256, 1024)
    w1 = make_input((7,), torch.float32, "cuda", 1)
    w2 = make_input((5, 3), torch.float32, "cuda", 2)
    old = make_input(shape, torch.float32, "cuda", 3)
    new = make_input(shape, torch.float32, "cuda", 4)
    expected = fn(new, w1, w2)
    torch.cuda.synchronize()

    x = old.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)  # ~tens of ms: long enough to expose a wrong stream
        x.copy_(new)
        out = fn(x, w1, w2)
    torch.cuda.synchronize()
    _close(out, expected, f"side stream {name}")

    # and the plain case: inputs made on the default stream, op on a side stream
    s2 = torch.cuda.Stream()
    s2.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s2):
        out2 = fn(new, w1, w2)
    s2.synchronize()
    _close(out2, expected, f"side stream 2 {name}")


def test_many_streams_concurrently():
    xs = [make_input((2, 300, 301), torch.float32, "cuda", i) for i in range(4)]
    w = make_input((3, 3), torch.float32, "cuda", 9)
    expected = [cupipe.stencil2d(x, w, boundary="circular") for x in xs]
    torch.cuda.synchronize()
    streams = [torch.cuda.Stream() for _ in xs]
    outs = []
    for s, x in zip(streams, xs):
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            outs.append(cupipe.stencil2d(x, w, boundary="circular"))
    torch.cuda.synchronize()
    for o, e in zip(outs, expected):
        assert torch.equal(o, e)


@pytest.mark.skipif(not HAS_CUDA or torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_second_device():
    """Ops on cuda:1 while cuda:0 is current run on cuda:1 (device guard)."""
    with torch.cuda.device(0):
        x = make_input((5, 64, 65), torch.float32, "cuda:1", 1)
        w = make_input((3, 3), torch.float32, "cuda:1", 2)
        y = cupipe.stencil2d(x, w)
        assert y.device == x.device
        assert_close(y.cpu(), cupipe.stencil2d(x.cpu(), w.cpu()), atol=1e-5, rtol=1e-5,
                     what="cuda:1 stencil2d")
        s = cupipe.reduce(x, "sum", -1)
        assert_close(s.cpu(), cupipe.reduce(x.cpu(), "sum", -1), atol=1e-4, rtol=1e-5,
                     what="cuda:1 reduce")
        c = cupipe.stream_copy(x)
        assert c.device == x.device and torch.equal(c, x)
