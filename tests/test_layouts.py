"""The layout planner (csrc/ops/layout.cpp): every op reads a dense input's memory in place, in
memory order, whatever its logical dim order (transposed, permuted, channels_last), and reads a
contiguous copy only of inputs with gaps, overlaps or zero strides. Results against eager PyTorch
on random inputs (CPU always, CUDA with poisoned outputs), the plans through cupipe.explain's
words (``_C.layout_plan``), and the stencils' results in x's layout (as torch.empty_like)."""
import itertools

import pytest
import torch

import cupipe
from conftest import (HAS_CUDA, assert_close, make_input, make_weights, poison_allocator, reduce_ref,
                      stencil1d_ref, stencil2d_ref, tma_supported, tol)

REDUCE_OPS = ["sum", "mean", "amax", "amin"]
IN_PLACE = "read x's memory in place"
COPY = "contiguous copy"


def _plan(op, x, **kw):
    return cupipe._C.layout_plan(op, x, **kw)


def _red_tol(op, dtype, n):
    if op in ("amax", "amin"):
        return 0.0, 0.0
    atol, rtol = tol(dtype, 1)
    if dtype == torch.float32:
        atol = max(atol, 4 * n * 1e-7)
    return atol, rtol


def _poison(device, x):
    poison_allocator(4 * x.numel() * x.element_size() + 4096, device)


# ----------------------------------------------------------------------------- plans (metadata only)

def test_reduce_plans_read_dense_layouts_in_place():
    x = torch.empty(6, 7, 8)
    # a transposed input reduced over its contiguous dim: rows of its memory
    t = torch.empty(6, 8).t()  # logical (8, 6), memory (6, 8)
    p = _plan("reduce", t, dim=0)  # dim 0 has stride 1
    assert IN_PLACE in p and "rows (outer, r, inner) = (6, 8, 1)" in p and "permuted" not in p
    p = _plan("reduce", t, dim=1)
    assert IN_PLACE in p and "columns (outer, r, inner) = (1, 6, 8)" in p
    # channels_last global average pooling: (N, H*W, C) columns, one step, no copy
    cl = torch.empty(2, 16, 5, 7).contiguous(memory_format=torch.channels_last)
    p = _plan("reduce", cl, dim=(2, 3), reduce_op="mean")
    assert IN_PLACE in p and "columns (outer, r, inner) = (2, 35, 16)" in p and "then" not in p
    # a permutation whose kept dims lie in another order: one step, the output permuted into place
    p = _plan("reduce", x.permute(2, 0, 1), dim=1)
    assert IN_PLACE in p and "permuted into place" in p
    # two runs of reduced dims: two steps, the innermost first
    p = _plan("reduce", x, dim=(0, 2))
    assert "rows (outer, r, inner) = (42, 8, 1), then columns (outer, r, inner) = (1, 6, 7)" in p
    # gaps (a step slice) or zero strides (expand): a contiguous copy
    assert COPY in _plan("reduce", x[:, ::2], dim=1)
    assert COPY in _plan("reduce", torch.empty(1, 8).expand(5, 8), dim=0)
    # size-1 dims do not matter
    assert IN_PLACE in _plan("reduce", torch.empty(4, 1, 6).transpose(0, 2), dim=0)


def test_stencil_plans_read_dense_layouts_in_place():
    w, w1 = torch.empty(3, 5), torch.empty(5)
    img = torch.empty(3, 10, 16)
    assert IN_PLACE + ";" in _plan("stencil2d", img, weights=w)
    assert "transposed" in _plan("stencil2d", img.transpose(1, 2), weights=w)
    assert IN_PLACE + ";" in _plan("stencil2d", torch.empty(2, 3, 10, 16).permute(1, 0, 2, 3), weights=w)
    assert "between the plane's dims" in _plan("stencil2d", img.permute(1, 0, 2), weights=w)  # H (3) outside a batch dim
    # channels_last: C (4) is a step within rows of W * C elements, read in place; a C of more than
    # 1 KiB a point, or C between H and W, is copied
    cl = torch.empty(2, 4, 10, 16).contiguous(memory_format=torch.channels_last)
    p = _plan("stencil2d", cl, weights=w)
    assert IN_PLACE in p and "(batch, ny, nx) = (2, 10, 64), window (3, 5), taps 4 elements apart" in p
    assert "taps 4 elements apart" in _plan("stencil2d", cl.transpose(2, 3), weights=w)
    assert "row stride 64" in _plan("stencil2d", cl[:, :, 1:-1, 2:-2], weights=w)
    assert COPY in _plan("stencil2d", torch.empty(1, 257, 6, 6).contiguous(memory_format=torch.channels_last),
                         weights=w)
    assert COPY in _plan("stencil2d", torch.empty(2, 4, 10, 16).permute(0, 2, 1, 3), weights=w)
    # crops and row steps: the planes read in place, their rows a pitch apart; a column step is copied
    p = _plan("stencil2d", img[:, 1:-1, 2:-2], weights=w)
    assert IN_PLACE in p and "(batch, ny, nx) = (3, 8, 12)" in p and "row stride 16, plane stride 160" in p
    assert "row stride 32" in _plan("stencil2d", img[:, ::2], weights=w)
    assert "transposed" in _plan("stencil2d", img[:, 1:-1, 2:-2].transpose(1, 2), weights=w)
    assert COPY in _plan("stencil2d", img[..., ::2], weights=w)
    assert "row stride 16" in _plan("stencil1d", img[:, :, 1:-1], weights=w1, dim=2)
    x = torch.empty(4, 6, 32).permute(2, 0, 1)  # logical (32, 4, 6)
    for d in range(3):
        assert IN_PLACE in _plan("stencil1d", x, weights=w1, dim=d)
    # memory (4, 6, 32): dim 0 (size 32) is the contiguous one: 24 rows filtered along x
    assert "(batch, ny, nx) = (1, 24, 32), window (1, 5)" in _plan("stencil1d", x, weights=w1, dim=0)
    # along dim 2 (memory 6, inner 32 fp32 = 128 bytes): rows of 6 x 32 elements, taps 32 apart
    assert "(batch, ny, nx) = (1, 4, 192), window (1, 5), taps 32 elements apart" in _plan("stencil1d", x,
                                                                                         weights=w1, dim=2)
    # planes of 8 fp32 (32 bytes; under 512) across are too narrow: rows of 6 x 8 elements, taps 8 apart
    p = _plan("stencil1d", torch.empty(4, 6, 8), weights=w1, dim=1)
    assert IN_PLACE in p and "(batch, ny, nx) = (1, 4, 48), window (1, 5), taps 8 elements apart" in p
    assert "row stride 72" in _plan("stencil1d", torch.empty(4, 9, 8)[:, 1:7], weights=w1, dim=1)
    assert "apart" not in _plan("stencil1d", torch.empty(4, 6, 64, dtype=torch.float64), weights=w1, dim=1)
    # transposed: the kernels' y is W (10), x is H (16); a (3, 5) window turns (5, 3)
    assert "(batch, ny, nx) = (3, 10, 16), window (5, 3)" in _plan("stencil2d", img.transpose(1, 2), weights=w)


def test_explain_prints_the_layout():
    e = cupipe.explain("reduce", torch.empty(8, 6).t(), "sum", 0)
    assert "rows (outer, r, inner) = (8, 6, 1)" in e.layout and "layout:" in str(e)


# ----------------------------------------------------------------------------- reductions

def _reduce_layouts(device, dtype):
    b = make_input((6, 5, 7, 4), dtype, device, seed=60)
    m = make_input((12, 18), dtype, device, seed=61)
    return [
        ("contiguous", b),
        ("transposed", m.t()),
        ("permuted", b.permute(2, 0, 3, 1)),
        ("permuted-2", b.permute(3, 1, 0, 2)),
        ("channels_last", b.contiguous(memory_format=torch.channels_last)),
        ("sliced", b[1:5, :, 2:6]),
        ("stepped", b[:, ::2, :, 1::2]),
        ("expanded", make_input((1, 5, 1, 4), dtype, device, seed=62).expand(3, 5, 6, 4)),
        ("offset", make_input((1000,), dtype, device, seed=63)[7:7 + 6 * 5 * 7].view(6, 5, 7)),
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=["f32", "bf16", "f64"])
@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_every_layout_every_dim_set(device, op, dtype):
    """Every subset of dims of every layout, keepdim both ways, against torch."""
    for name, x in _reduce_layouts(device, dtype):
        before = x.clone()
        for k in range(x.dim() + 1):
            for dims in itertools.combinations(range(x.dim()), k):
                dim = list(dims) if dims else None
                for keepdim in (False, True):
                    _poison(device, x)
                    y = cupipe.reduce(x, op, dim, keepdim)
                    ref = reduce_ref(x, op, dim, keepdim)
                    n = x.numel() if not dims else int(torch.tensor([x.shape[d] for d in dims]).prod())
                    atol, rtol = _red_tol(op, dtype, n)
                    assert y.is_contiguous() and y.shape == ref.shape
                    assert_close(y, ref, atol=atol, rtol=rtol, what=f"{name} {op} dim={dim} keepdim={keepdim}")
        assert torch.equal(x, before)


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_layouts_dtype_argument(device, op):
    """dtype=float32 / float64 of a bf16 permuted input: the steps between keep the accumulation type."""
    x = make_input((9, 4, 11), torch.bfloat16, device, seed=64).permute(1, 2, 0)
    for dtype in ((torch.float32, torch.float64) if op in ("sum", "mean") else (None,)):
        for dim in ([0, 2], [1], [0, 1, 2]):
            y = cupipe.reduce(x, op, dim, dtype=dtype)
            ref = reduce_ref(x, op, dim, dtype=dtype)
            assert y.dtype == ref.dtype
            assert_close(y, ref, atol=1e-5, rtol=1e-5, what=f"{op} dim={dim} dtype={dtype}")


# (outer, r, inner) of the column kernels' classes: narrow rows (a few elements, rows not whole
# 16-byte vectors), rows of up to a vector per thread, rows wider than the block; short r with many
# outer slices (persistent blocks over items), long r with few (parts of r).
COLUMN_SHAPES = [(3, 1000, 3), (5, 257, 16), (2, 3001, 5), (700, 9, 24), (1, 40000, 3), (9, 50, 100),
                 (4, 40, 1028), (300, 3, 7), (2, 5, 2), (1, 3, 4100)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=["f32", "bf16", "f64"])
@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_columns_narrow_short_and_wide(device, op, dtype):
    """Middle-dim reductions of every column class, aligned and at an odd element offset."""
    for o, r, n in COLUMN_SHAPES:
        buf = make_input((o * r * n + 1,), dtype, device, seed=o + r + n)
        for off in (0, 1):
            x = buf[off:off + o * r * n].view(o, r, n)
            _poison(device, x)
            y = cupipe.reduce(x, op, 1)
            atol, rtol = _red_tol(op, dtype, r)
            assert_close(y, reduce_ref(x, op, [1]), atol=atol, rtol=rtol, what=f"{op} {(o, r, n)} offset {off}")


def test_reduce_layout_nan_propagates(device):
    """A NaN reaches its own output through both steps of a two-step plan, and no other."""
    x = make_input((7, 5, 6), torch.float32, device, seed=65).permute(1, 2, 0)  # logical (5, 6, 7)
    x[2, 3, 4] = float("nan")
    assert "then" in _plan("reduce", x, dim=[1, 2])
    for op in REDUCE_OPS:
        y = cupipe.reduce(x, op, [1, 2])
        assert torch.isnan(y[2]) and not torch.isnan(y[torch.arange(5, device=device) != 2]).any(), op


# (shape, dims) whose innermost reduced run lies innermost in memory with another reduced run
# outside it: on CUDA one folded pass (the direct column kernel) where the inner run's rows are
# whole 16-byte vectors. Folds of one to a few vectors (several slices a block), a fold of 2000
# fp32 elements (two chunks, each a partial), 1028 (a last chunk short of the line) with a long r
# (parts of r), a kept middle of 1 after size-1 dims, an outer kept dim, and three runs (the fold,
# then a step over its output), and 300 and 150 slices of a 4096-element fold (2-8 chunks of a row:
# on a GPU of about 130 SMs the sum kinds' blocks walk all of them, no partials, or fp32 and fp64
# half of them, two chunks' partials), and 1200 slices of a 128-element fold (two or four slices a block,
# several warps each: their totals meet in shared memory).
FOLDED = [((9, 13, 64), (0, 2)), ((7, 300, 8), (0, 2)), ((5, 3, 2000), (0, 2)), ((3000, 2, 1028), (0, 2)),
          ((3, 20, 5, 16), (1, 3)), ((4, 3, 5, 6, 16), (0, 2, 4)), ((6, 1, 7, 32), (0, 3)), ((2, 11, 3, 48), (0, 1, 3)),
          ((2, 300, 4096), (0, 2)), ((2, 150, 4096), (0, 2)), ((2, 5, 600, 128), (1, 3))]


@pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64],
                         ids=["f32", "bf16", "f16", "f64"])
@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_folded_runs(op, dtype):
    """Two runs of reduced dims in one pass against torch: poisoned outputs, bit-identical repeats,
    keepdim, a NaN reaching its output alone, the same plans at an odd offset (two steps) and under
    a ring mechanism (the folded step run as the two it fuses)."""
    esz = torch.empty((), dtype=dtype).element_size()
    for i, (shape, dims) in enumerate(FOLDED):
        buf = make_input((int(torch.tensor(shape).prod()) + 1,), dtype, "cuda", seed=90 + i)
        x = buf[:-1].view(shape)
        fold = shape[-1]
        plan = _plan("reduce", x, dim=list(dims), reduce_op=op)
        folds = fold * esz % 16 == 0
        assert (f"with the last {fold} of each inner row reduced too" in plan) == folds, plan
        n = int(torch.tensor([shape[d] for d in dims]).prod())
        atol, rtol = _red_tol(op, dtype, n)
        ref = reduce_ref(x, op, list(dims))
        for keepdim in (False, True):
            _poison("cuda", x)
            y = cupipe.reduce(x, op, list(dims), keepdim)
            assert_close(y, reduce_ref(x, op, list(dims), keepdim), atol=atol, rtol=rtol,
                         what=f"{op} {shape} dims={dims} keepdim={keepdim}")
        assert torch.equal(cupipe.reduce(x, op, list(dims)), cupipe.reduce(x, op, list(dims))), "not deterministic"
        odd = buf[1:].view(shape)  # the rows 2 bytes (or more) off a vector: the two-step plan
        assert f"of each inner row reduced too" not in _plan("reduce", odd, dim=list(dims), reduce_op=op)
        assert_close(cupipe.reduce(odd, op, list(dims)), reduce_ref(odd, op, list(dims)), atol=atol, rtol=rtol,
                     what=f"{op} {shape} dims={dims} at an odd offset")
        if cupipe.tma_available():
            assert_close(cupipe.reduce(x, op, list(dims), mechanism="tma", stages=2), ref, atol=atol, rtol=rtol,
                         what=f"{op} {shape} dims={dims} tma/2")
        nan = x.clone()
        idx = tuple(s // 2 for s in shape)
        nan[idx] = float("nan")
        y = cupipe.reduce(nan, op, list(dims), keepdim=True)
        hit = torch.zeros_like(y, dtype=torch.bool)
        hit[tuple(0 if d in dims else idx[d] for d in range(len(shape)))] = True
        assert torch.isnan(y[hit]).all() and not torch.isnan(y[~hit]).any(), f"{op} {shape}: NaN placement"


def test_reduce_fold_plans_on_cuda_only():
    """The fold is a CUDA plan (metadata only here): a CPU tensor keeps two steps."""
    x = torch.empty(6, 7, 8)
    assert "then columns" in _plan("reduce", x, dim=(0, 2)) and "reduced too" not in _plan("reduce", x, dim=(0, 2))
    if HAS_CUDA:
        p = _plan("reduce", x.cuda(), dim=(0, 2))
        assert "columns (outer, r, inner) = (1, 6, 56) with the last 8 of each inner row reduced too" in p, p
        assert "then" not in p
        # var folds where its direct kernel may run (auto or sync), not under tma; argmax takes one dim
        assert "reduced too" in _plan("reduce", x.cuda(), dim=(0, 2), reduce_op="var")
        assert "reduced too" not in _plan("reduce", x.cuda(), dim=(0, 2), reduce_op="var", mechanism="tma")
        with pytest.raises(ValueError, match="takes dim=None or one dim"):
            _plan("reduce", x.cuda(), dim=(0, 2), reduce_op="argmax")


# ----------------------------------------------------------------------------- stencils

def _stencil_layouts(device, dtype):
    b = make_input((3, 4, 17, 12), dtype, device, seed=70)
    return [
        ("contiguous", b),
        ("transposed", b.transpose(2, 3)),
        ("batch-permuted", b.permute(1, 0, 2, 3)),
        ("transposed-permuted", b.permute(3, 1, 0, 2)),
        ("channels_last", b.contiguous(memory_format=torch.channels_last)),
        ("cropped", b[:, 1:3, 2:15, 1:11]),
        ("cropped-planes", b[..., 2:15, 1:11]),
        ("cropped-transposed", b[..., 2:15, 1:11].transpose(2, 3)),
        ("stepped", b[:, :, ::2]),
        ("expanded", make_input((1, 1, 17, 12), dtype, device, seed=71).expand(2, 3, 17, 12)),
    ]


@pytest.mark.parametrize("boundary", ["zero", "replicate", "circular", "reflect"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_stencil2d_every_layout(device, boundary, dtype):
    w = make_weights((3, 5), torch.float32, device, seed=72)
    for name, x in _stencil_layouts(device, dtype):
        _poison(device, x)
        y = cupipe.stencil2d(x, w, boundary=boundary)
        ref = stencil2d_ref(x.double(), w.double(), boundary).to(dtype)  # fp64: exact, and no per-shape cuDNN set-up
        assert y.stride() == torch.empty_like(x).stride(), name  # x's layout when dense
        atol, rtol = tol(dtype, 15)
        assert_close(y, ref, atol=atol, rtol=rtol, what=f"stencil2d {name} {boundary}")


@pytest.mark.parametrize("boundary", ["zero", "replicate", "circular", "reflect"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_stencil1d_every_layout_every_dim(device, boundary, dtype):
    w = make_weights((5,), torch.float32, device, seed=73)
    for name, x in _stencil_layouts(device, dtype):
        for d in range(x.dim()):
            if boundary == "reflect" and x.shape[d] <= 2:
                continue
            _poison(device, x)
            y = cupipe.stencil1d(x, w, dim=d, boundary=boundary)
            ref = stencil1d_ref(x.double(), w.double(), d, boundary).to(dtype)
            assert y.stride() == torch.empty_like(x).stride(), name
            atol, rtol = tol(dtype, 5)
            assert_close(y, ref, atol=atol, rtol=rtol, what=f"stencil1d {name} dim={d} {boundary}")


# Stepped rows: a batch dim inside the plane's rows (channels_last's C; stencil1d's inner dims under
# 512 bytes) read in place, taps a step apart, the boundary mapping points rather than elements.
# Planes one tile wide and several (the stepped tiles are 16 halos wide), C odd and even.
STEP_WINDOWS = [(3, 3), (5, 3), (1, 7), (7, 1), (9, 9)]


@pytest.mark.parametrize("boundary", ["zero", "replicate", "circular", "reflect"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=["f32", "bf16", "f64"])
def test_stencil2d_channels_last_steps(device, boundary, dtype):
    for c in (2, 3, 16, 33, 64):
        for hw in ((19, 13), (23, 45)):
            cl = make_input((2, c, *hw), dtype, device, seed=80 + c).contiguous(memory_format=torch.channels_last)
            for name, x in (("channels_last", cl), ("cropped", cl[:, :, 1:-2, 2:-1]),
                            ("transposed", cl.transpose(2, 3))):
                for kh, kw in STEP_WINDOWS:
                    w = make_weights((kh, kw), torch.float32, device, seed=81)
                    assert "elements apart" in _plan("stencil2d", x, weights=w), name
                    if boundary == "reflect" and (x.shape[-2] <= kh // 2 or x.shape[-1] <= kw // 2):
                        continue
                    _poison(device, x)
                    y = cupipe.stencil2d(x, w, boundary=boundary)
                    ref = stencil2d_ref(x.double(), w.double(), boundary).to(dtype)
                    assert y.stride() == torch.empty_like(x).stride(), name
                    atol, rtol = tol(dtype, kh * kw)
                    assert_close(y, ref, atol=atol, rtol=rtol, what=f"stencil2d {name} C={c} {hw} {(kh, kw)} {boundary}")


@pytest.mark.parametrize("boundary", ["zero", "replicate", "circular", "reflect"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_stencil2d_channels_last_wide_points(device, boundary, dtype):
    """Wide points (C = 256, 200; 64 and 2-byte): on the GPU their stepped tiles are 8 halos across
    with rows halved until the family's blocks fit an SM (two, three for the 2-byte types); planes
    one tile wide and several."""
    for c, hw in ((256, (11, 9)), (256, (37, 70)), (200, (20, 33)), (64, (45, 300))):
        x = make_input((1, c, *hw), dtype, device, seed=95 + c).contiguous(memory_format=torch.channels_last)
        for kh, kw in ((3, 3), (5, 3)):
            w = make_weights((kh, kw), torch.float32, device, seed=96)
            assert "elements apart" in _plan("stencil2d", x, weights=w)
            _poison(device, x)
            y = cupipe.stencil2d(x, w, boundary=boundary)
            ref = stencil2d_ref(x.double(), w.double(), boundary).to(dtype)
            atol, rtol = tol(dtype, kh * kw)
            assert_close(y, ref, atol=atol, rtol=rtol, what=f"stencil2d C={c} {hw} {(kh, kw)} {boundary}")


@pytest.mark.parametrize("boundary", ["zero", "replicate", "circular", "reflect"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=["f32", "bf16", "f64"])
def test_stencil1d_narrow_inner_steps(device, boundary, dtype):
    esz = torch.empty((), dtype=dtype).element_size()
    for inner in (2, 3, 5, 12, 40, 8, 64):  # 8, 64: steps of whole 16-byte vectors (the fixed rows)
        if inner * esz >= 512:
            continue  # planes, not steps
        base = make_input((3, 50, inner), dtype, device, seed=90 + inner)
        for name, x in (("dense", base), ("cropped", base[:, 2:-3]), ("batch-permuted", base.transpose(0, 1)[:, 1:])):
            d = 1 if name != "batch-permuted" else 0
            for r in (1, 2, 3, 4):
                w = make_weights((2 * r + 1,), torch.float32, device, seed=91 + r)
                assert "elements apart" in _plan("stencil1d", x, weights=w, dim=d), name
                _poison(device, x)
                y = cupipe.stencil1d(x, w, dim=d, boundary=boundary)
                ref = stencil1d_ref(x.double(), w.double(), d, boundary).to(dtype)
                atol, rtol = tol(dtype, 2 * r + 1)
                assert_close(y, ref, atol=atol, rtol=rtol, what=f"stencil1d {name} inner={inner} r={r} {boundary}")


# Points of 3 values (RGB channels last, xyz triples) on aligned rows of whole 16-byte multiples
# (widths of 8 points and more): the stepped fixed rows of up to 5 taps and the 3x3 box compiled for
# a step of 3, every tap a compile-time element of the row's aligned vectors. 7 taps, the 3x5 box
# and a width of 7 points (rows not whole vectors) keep the general stepped consumer beside them.
@pytest.mark.parametrize("boundary", ["zero", "replicate", "circular", "reflect"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64],
                         ids=["f32", "bf16", "f16", "f64"])
def test_stencil_compiled_step(device, boundary, dtype):
    runs = [("auto", 0)]
    if device == "cuda":
        runs += [("primitives", 2), ("sync", 1)] + ([("tma", 2)] if tma_supported() else [])
    for width in (8, 40, 200, 7):
        x = make_input((2, 3, 11, width), dtype, device, seed=70 + width).contiguous(memory_format=torch.channels_last)
        for kh, kw in ((3, 3), (1, 3), (1, 5), (1, 7), (3, 5)):
            w = make_weights((kh, kw), torch.float32, device, seed=71 + kw)
            assert "3 elements apart" in _plan("stencil2d", x, weights=w)
            ref = stencil2d_ref(x.double(), w.double(), boundary).to(dtype)
            atol, rtol = tol(dtype, kh * kw)
            for m, st in runs:
                _poison(device, x)
                y = cupipe.stencil2d(x, w, boundary=boundary, mechanism=m, stages=st)
                assert_close(y, ref, atol=atol, rtol=rtol, what=f"stencil2d C=3 W={width} {(kh, kw)} {boundary} {m}/{st}")
        v = make_input((5, 4 * width, 3), dtype, device, seed=72 + width)  # xyz triples along dim 1
        for r in (1, 2, 3):
            w = make_weights((2 * r + 1,), torch.float32, device, seed=73 + r)
            assert "3 elements apart" in _plan("stencil1d", v, weights=w, dim=1)
            ref = stencil1d_ref(v.double(), w.double(), 1, boundary).to(dtype)
            atol, rtol = tol(dtype, 2 * r + 1)
            for m, st in runs:
                _poison(device, v)
                y = cupipe.stencil1d(v, w, dim=1, boundary=boundary, mechanism=m, stages=st)
                assert_close(y, ref, atol=atol, rtol=rtol, what=f"stencil1d inner 3 L={4 * width} r={r} {boundary} {m}/{st}")


def test_stencil_layout_gradients(device):
    """Autograd through a transposed and a channels_last input matches the contiguous input's."""
    w = make_weights((3, 3), torch.float64, device, seed=74).requires_grad_()
    for make in (lambda t: t.transpose(-1, -2), lambda t: t.contiguous(memory_format=torch.channels_last)):
        base = make_input((2, 3, 9, 8), torch.float64, device, seed=75)
        x = make(base).detach().requires_grad_()
        xc = x.detach().contiguous().requires_grad_()
        for b in ("zero", "reflect"):
            g1 = torch.autograd.grad(cupipe.stencil2d(x, w, boundary=b).square().sum(), (x, w))
            g2 = torch.autograd.grad(cupipe.stencil2d(xc, w, boundary=b).square().sum(), (xc, w))
            for a, e in zip(g1, g2):
                assert_close(a, e, atol=1e-10, rtol=1e-10, what=f"grad {b}")


# One test per configuration: each compiles its own first-use kernels, so pytest -n spreads them (a
# loop over every mechanism outlasted pytest-timeout on a fresh GPU machine).
@pytest.mark.skipif(not HAS_CUDA, reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("stages", [1, 3])
@pytest.mark.parametrize("m", [m for m in cupipe.MECHANISMS if m != "auto"])
def test_layouts_every_mechanism(m, stages):
    if m == "tma" and not cupipe.tma_available():
        pytest.skip("tma needs sm_90")
    x = make_input((40, 24, 36), torch.float32, "cuda", seed=76)
    w = make_weights((3, 3), torch.float32, "cuda", seed=77)
    t = x.transpose(1, 2)
    assert_close(cupipe.stencil2d(t, w, mechanism=m, stages=stages), stencil2d_ref(t, w),
                 atol=1e-5 * 9, rtol=1e-5 * 9, what=f"stencil2d transposed {m}/{stages}")
    c = x[:, 1:-1, 3:-1]
    assert_close(cupipe.stencil2d(c, w, mechanism=m, stages=stages), stencil2d_ref(c, w),
                 atol=1e-5 * 9, rtol=1e-5 * 9, what=f"stencil2d cropped {m}/{stages}")
    for cl in (x.view(2, 20, 24, 36).contiguous(memory_format=torch.channels_last),
               x.view(4, 10, 24, 36)[:, :7].contiguous(memory_format=torch.channels_last)):
        assert_close(cupipe.stencil2d(cl, w, mechanism=m, stages=stages), stencil2d_ref(cl, w),
                     atol=1e-5 * 9, rtol=1e-5 * 9, what=f"stencil2d channels_last {m}/{stages}")
    n = x.view(40, 864)[:, 7:187].view(40, 36, 5)  # stencil1d along dim 1: taps 5 apart, rows a pitch apart
    assert "elements apart" in _plan("stencil1d", n, weights=w[1], dim=1)
    ref = stencil1d_ref(n.double(), w[1].double(), 1).float()  # fp64: cuDNN may run fp32 as TF32
    assert_close(cupipe.stencil1d(n, w[1], dim=1, mechanism=m, stages=stages), ref,
                 atol=1e-5 * 3, rtol=1e-5 * 3, what=f"stencil1d narrow inner {m}/{stages}")
    p = x.permute(2, 0, 1)
    for dim in ([1], [0, 2], [1, 2]):
        assert_close(cupipe.reduce(p, "sum", dim, mechanism=m, stages=stages), reduce_ref(p, "sum", dim),
                     atol=1e-4, rtol=1e-5, what=f"reduce permuted dim={dim} {m}/{stages}")
    for o, r, n in COLUMN_SHAPES:
        xc = make_input((o, r, n), torch.float32, "cuda", seed=78)
        assert_close(cupipe.reduce(xc, "sum", 1, mechanism=m, stages=stages), reduce_ref(xc, "sum", [1]),
                     atol=1e-5 * r ** 0.5 + 1e-5, rtol=1e-5, what=f"reduce {(o, r, n)} {m}/{stages}")
