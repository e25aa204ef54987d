"""The engine on the GPU: every mechanism x stage count x copy width through stream_copy, the
stencils and the reductions, against eager PyTorch. Outputs come from poisoned memory, so an
element a kernel forgets to write shows up as a mismatch. Skipped without a CUDA device."""
import itertools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import cupipe
from cupipe import _kernel_cache as kernel_cache
from conftest import sass_functions, tma_supported

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not cupipe.cuda_available(), reason="needs a CUDA device")]

ASYNC = ["pipeline", "pipeline_thread", "primitives", "cg", "barrier", "specialized"]


def mechanisms():
    ms = ["sync"] + ASYNC
    if tma_supported():
        ms.append("tma")
    return ms


STAGES = [1, 2, 3, 4, 8]


def poison_allocator(nbytes: int):
    """Fill and free a block so the caching allocator hands poisoned memory to the next output."""
    t = torch.full((max(nbytes, 1) + 4096,), 0xA5, dtype=torch.uint8, device="cuda")
    del t


def rand(shape, dtype, seed, device="cuda"):
    g = torch.Generator(device="cpu").manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.float32).to(dtype).to(device)
    return torch.randint(-100, 100, shape, generator=g, dtype=torch.int64).to(dtype).to(device)


# ------------------------------------------------------------------------------------ stream copy

SIZES = [0, 1, 3, 17, 255, 4097, 100003, (1 << 18) + 5]
OFFSETS = [0, 1, 3]


@pytest.mark.parametrize("mechanism,stages", list(itertools.product(mechanisms(), STAGES)))
def test_stream_copy_matrix(mechanism, stages):
    seed = 0
    for vec, dtype, n, off in itertools.product([4, 8, 16], [torch.float32, torch.uint8, torch.float16, torch.float64],
                                                 SIZES, OFFSETS):
        seed += 1
        base = rand((n + off,), dtype, seed)
        x = base[off:]
        poison_allocator(x.numel() * x.element_size())
        y = cupipe.stream_copy(x, mechanism=mechanism, stages=stages, vec_bytes=vec)
        assert y.is_contiguous() and y.shape == x.shape and y.dtype == x.dtype
        assert torch.equal(y.view(torch.uint8), x.contiguous().view(torch.uint8)), (
            f"mismatch: mechanism={mechanism} stages={stages} vec={vec} dtype={dtype} n={n} offset={off}")


@pytest.mark.parametrize("mechanism", mechanisms())
def test_stream_copy_tiles_and_grids(mechanism):
    """Odd tile sizes, tiny grids (many tiles per block, deep wrap-around of the ring) and grids
    larger than the device holds at once (1000 blocks: several waves, or a block per tile)."""
    x = rand((123457,), torch.float32, 7)
    for tile, blocks, stages in itertools.product([16, 272, 4096, 16384], [1, 3, 0, 1000], [1, 3, 8]):
        poison_allocator(x.numel() * 4)
        y = torch.ops.cupipe._stream_copy_ex(x, mechanism, stages, 16, tile, blocks)
        assert torch.equal(y, x), f"tile={tile} blocks={blocks} stages={stages}"


def test_stream_copy_non_contiguous_and_dtypes():
    for dtype in [torch.bool, torch.int8, torch.int16, torch.int32, torch.int64, torch.complex64,
                  torch.bfloat16]:
        x = rand((37, 61), torch.float32, 3).to(dtype).t()
        y = cupipe.stream_copy(x)
        assert y.is_contiguous() and torch.equal(y, x)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("CUPIPE_SLOW") != "1", reason="set CUPIPE_SLOW=1")
def test_stream_copy_over_2_31_elements():
    n = (1 << 31) + 4099
    x = torch.randint(0, 255, (n,), dtype=torch.uint8, device="cuda")
    for mech in ["primitives", "sync"] + (["tma"] if "tma" in mechanisms() else []):
        poison_allocator(0)
        y = cupipe.stream_copy(x, mechanism=mech, stages=4)
        assert torch.equal(y, x), mech
        del y


def test_tma_error_or_supported():
    x = rand((100,), torch.float32, 1)
    if tma_supported():
        assert torch.equal(cupipe.stream_copy(x, mechanism="tma"), x)
    else:
        with pytest.raises(ValueError, match="tma"):
            cupipe.stream_copy(x, mechanism="tma")


def test_too_much_shared_memory_is_a_clear_error():
    x = rand((1 << 16,), torch.float32, 2)
    with pytest.raises(RuntimeError, match="shared memory"):
        torch.ops.cupipe._stream_copy_ex(x, "primitives", 8, 16, 1 << 20, 0)
    assert torch.equal(cupipe.stream_copy(x), x)  # the context is still usable


# ------------------------------------------------------------------------------------ stencils

def ref_stencil2d(x, w, boundary):
    ry, rx = (w.shape[0] - 1) // 2, (w.shape[1] - 1) // 2
    H, W = x.shape[-2:]
    xd = x.double().reshape(-1, 1, H, W)
    mode = "constant" if boundary == "zero" else boundary
    xp = F.pad(xd, (rx, rx, ry, ry), mode=mode) if (rx or ry) else xd
    return F.conv2d(xp, w.double()[None, None]).reshape(x.shape)


TOL = {torch.float32: (1e-4, 1e-5), torch.float64: (1e-10, 1e-12), torch.float16: (2e-2, 1e-2),
       torch.bfloat16: (6e-2, 2e-2)}


@pytest.mark.parametrize("mechanism", mechanisms())
def test_stencil2d_mechanisms(mechanism):
    seed = 100
    for stages, r, boundary in itertools.product([1, 2, 4, 8], [1, 2, 4], ["zero", "replicate", "circular", "reflect"]):
        seed += 1
        shape = (2, 37, 301) if r != 2 else (33, 150)
        x = rand(shape, torch.float32, seed)
        w = rand((2 * r + 1, 2 * r + 1), torch.float32, seed + 1000)
        poison_allocator(x.numel() * 4)
        y = cupipe.stencil2d(x, w, boundary=boundary, mechanism=mechanism, stages=stages)
        torch.testing.assert_close(y.double(), ref_stencil2d(x, w, boundary), rtol=1e-4, atol=1e-4,
                                   msg=lambda m: f"{mechanism} stages={stages} r={r} {boundary}: {m}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("mechanism", mechanisms())
def test_stencil_dtypes_odd_shapes(mechanism, dtype):
    seed = 500
    for shape, (ry, rx), boundary in itertools.product([(1, 257), (129, 1), (19, 23), (5, 3)], [(1, 1), (0, 3), (3, 0), (2, 1)],
                                                       ["zero", "reflect", "circular", "replicate"]):
        seed += 1
        if boundary == "reflect" and (shape[0] <= ry or shape[1] <= rx):
            continue
        if boundary == "circular" and (shape[0] < ry or shape[1] < rx):
            continue  # F.pad's circular needs size >= pad; cupipe wraps modularly (CPU tests cover it)
        x = rand(shape, dtype, seed)
        w = rand((2 * ry + 1, 2 * rx + 1), torch.float32, seed + 1)
        y = cupipe.stencil2d(x, w, boundary=boundary, mechanism=mechanism, stages=2)
        ref = ref_stencil2d(x.double(), w, boundary)
        rtol, atol = TOL[dtype]
        torch.testing.assert_close(y.double(), ref.to(dtype).double(), rtol=rtol, atol=atol * (2 * ry + 1) * (2 * rx + 1),
                                   msg=lambda m: f"{mechanism} {dtype} {shape} r=({ry},{rx}) {boundary}: {m}")


@pytest.mark.parametrize("mechanism", mechanisms())
def test_stencil1d_dims_mechanisms(mechanism):
    x = rand((6, 77, 40), torch.float32, 9)
    for dim, r, boundary in itertools.product([0, 1, 2, -1], [1, 4, 6], ["zero", "replicate", "circular", "reflect"]):
        if x.shape[dim] <= r:
            continue
        w = rand((2 * r + 1,), torch.float32, dim * 10 + r)
        y = cupipe.stencil1d(x, w, dim=dim, boundary=boundary, mechanism=mechanism, stages=3)
        xt = x.movedim(dim, -1).double()
        mode = "constant" if boundary == "zero" else boundary
        ref = F.conv1d(F.pad(xt.reshape(-1, 1, xt.shape[-1]), (r, r), mode=mode), w.double()[None, None])
        ref = ref.reshape(xt.shape).movedim(-1, dim)
        torch.testing.assert_close(y.double(), ref, rtol=1e-4, atol=1e-4,
                                   msg=lambda m: f"{mechanism} dim={dim} r={r} {boundary}: {m}")


# ------------------------------------------------------------------------------------ reductions

REDUCE_CASES = [((1 << 20) + 3, None), ((37, 1000), -1), ((4099, 64), 1), ((3, 70001), 1), ((1000, 37), 0),
                ((5, 300, 7), 1), ((4, 5, 6), [0, 2]), ((2049, 33), [0, 1]), ((7, 0), 1), ((8, 3), 1)]


def torch_reduce(x, op, dim):
    xa = x.double() if x.dtype == torch.float64 else x.float()
    if dim is None:
        return getattr(torch, op)(xa)
    return getattr(torch, op)(xa, dim)


@pytest.mark.parametrize("mechanism", mechanisms())
def test_reduce_mechanisms(mechanism):
    seed = 900
    for stages, (shape, dim), op, dtype in itertools.product([1, 2, 4, 8], REDUCE_CASES, ["sum", "mean", "amax", "amin"],
                                                             [torch.float32, torch.bfloat16]):
        seed += 1
        x = rand(shape, dtype, seed)
        numel_red = x.numel()
        if dim is not None:
            numel_red = 1
            for d in (dim if isinstance(dim, list) else [dim]):
                numel_red *= x.shape[d]
        if op in ("amax", "amin") and numel_red == 0:
            continue
        poison_allocator(x.numel() * 4)
        y = cupipe.reduce(x, op, dim, mechanism=mechanism, stages=stages)
        ref = torch_reduce(x, op, dim).to(dtype)
        n = max(numel_red, 1)
        tol = 1e-5 * n ** 0.5 if dtype == torch.float32 else 1e-2
        torch.testing.assert_close(y.double(), ref.double(), rtol=tol if op in ("sum", "mean") else 0,
                                   atol=tol if op in ("sum", "mean") else 0, equal_nan=True,
                                   msg=lambda m: f"{mechanism} stages={stages} {shape} dim={dim} {op} {dtype}: {m}")


@pytest.mark.parametrize("mechanism", mechanisms())
def test_reduce_deterministic(mechanism):
    x = rand((3, 1 << 20), torch.float32, 77)
    for dim in [None, 1, 0]:
        outs = [cupipe.reduce(x, "sum", dim, mechanism=mechanism) for _ in range(5)]
        for o in outs[1:]:
            assert torch.equal(o, outs[0]), f"{mechanism} dim={dim}: repeated runs differ"


def test_reduce_nan_propagates():
    x = rand((10, 5000), torch.float32, 5)
    x[3, 4321] = float("nan")
    for op in ["amax", "amin"]:
        y = cupipe.reduce(x, op, 1)
        assert torch.isnan(y[3]) and not torch.isnan(y[[0, 1, 2, 4]]).any()
        assert torch.isnan(cupipe.reduce(x, op))


# ------------------------------------------------------------------------------------ the SASS

@pytest.mark.skipif(shutil.which("cuobjdump") is None or kernel_cache.nvcc_path() is None
                    or not cupipe.build_info.get("kernel_flags"), reason="needs cuobjdump, nvcc and a CUDA build")
def test_sass_has_ldgsts_and_ublkcp(tmp_path, monkeypatch):
    """primitives kernels issue LDGSTS; tma kernels issue UBLKCP (the bulk copy); sync neither.
    Compiled for sm_90 as a first use compiles them (no GPU needed)."""
    monkeypatch.setenv("CUPIPE_CACHE_DIR", str(tmp_path))
    cupipe.precompile("stream_copy", mechanism=["sync", "primitives", "tma"], stages=3, arch="sm_90")
    copy = {}
    for cubin in tmp_path.rglob("*.cubin"):
        copy.update(sass_functions(cubin))
    prim = [v for k, v in copy.items() if "MechanismE3E" in k]   # Mechanism::Primitives == 3
    tma = [v for k, v in copy.items() if "MechanismE7E" in k]    # Mechanism::Tma == 7
    assert prim and all("LDGSTS" in v for v in prim)
    assert tma and all("UBLKCP" in v for v in tma)
    sync = [v for k, v in copy.items() if "MechanismE0E" in k]
    assert sync and not any("LDGSTS" in v or "UBLKCP" in v for v in sync)
