"""stencil1d / stencil2d against eager references (F.pad + F.conv1d/F.conv2d, computed in
float64, then cast), and their gradients against autograd through those references."""
from __future__ import annotations

import itertools

import pytest
import torch

import cupipe
from conftest import (BOUNDARIES, FLOAT_DTYPES, assert_close, make_input, make_weights,
                      poison_allocator, stencil1d_loop_ref, stencil1d_ref, stencil2d_loop_ref,
                      stencil2d_ref, tma_supported, tol)

RADII = [0, 1, 2, 3, 4, 6]
DTYPE_IDS = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
             torch.float64: "f64"}


def _ref1d(x, w, dim, boundary):
    """float64 reference for cupipe.stencil1d, cast to x's dtype; F.pad where it applies, the
    modular-index loop for circular with size < r (F.pad refuses to wrap more than once)."""
    r = (w.shape[0] - 1) // 2
    n = x.shape[dim]
    if boundary == "circular" and 0 < n < r:
        return stencil1d_loop_ref(x, w, dim, boundary).to(x.dtype)
    return stencil1d_ref(x.double(), w.double(), dim, boundary).to(x.dtype)


def _ref2d(x, w, boundary):
    ry, rx = (w.shape[0] - 1) // 2, (w.shape[1] - 1) // 2
    H, W = x.shape[-2], x.shape[-1]
    if boundary == "circular" and ((0 < H < ry) or (0 < W < rx)):
        return stencil2d_loop_ref(x, w, boundary).to(x.dtype)
    return stencil2d_ref(x.double(), w.double(), boundary).to(x.dtype)


def _check1d(x, w, dim, boundary, what=""):
    y = cupipe.stencil1d(x, w, dim=dim, boundary=boundary)
    assert y.stride() == torch.empty_like(x).stride()  # x's layout when dense, else contiguous
    atol, rtol = tol(x.dtype, w.shape[0])
    assert_close(y, _ref1d(x, w, dim, boundary), atol=atol, rtol=rtol,
                 what=f"stencil1d {what} shape={tuple(x.shape)} dim={dim} r={(w.shape[0]-1)//2} "
                      f"{boundary} {x.dtype}")
    return y


def _check2d(x, w, boundary, what=""):
    y = cupipe.stencil2d(x, w, boundary=boundary)
    assert y.stride() == torch.empty_like(x).stride()  # x's layout when dense, else contiguous
    atol, rtol = tol(x.dtype, w.numel())
    assert_close(y, _ref2d(x, w, boundary), atol=atol, rtol=rtol,
                 what=f"stencil2d {what} shape={tuple(x.shape)} w={tuple(w.shape)} {boundary} "
                      f"{x.dtype}")
    return y


# ----------------------------------------------------------------------------- stencil1d forward

SHAPES_1D = [(37,), (6, 29), (3, 5, 11)]
SHAPE_DIMS = [(s, d) for s in SHAPES_1D for d in range(-len(s), 0)]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: DTYPE_IDS[d])
@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize("r", RADII)
@pytest.mark.parametrize("shape,dim", SHAPE_DIMS, ids=[f"{s}-d{d}" for s, d in SHAPE_DIMS])
def test_stencil1d_matches_reference(device, shape, dim, r, boundary, dtype):
    x = make_input(shape, dtype, device, seed=1)
    w = make_weights((2 * r + 1,), dtype, device)
    if boundary == "reflect" and x.shape[dim] <= r:
        with pytest.raises(ValueError, match="reflect"):
            cupipe.stencil1d(x, w, dim=dim, boundary=boundary)
        return
    _check1d(x, w, dim, boundary)
    # positive dim and the op entry point give the same result
    y2 = torch.ops.cupipe.stencil1d(x, w, dim=dim % x.dim(), boundary=boundary)
    _check1d(x, w, dim % x.dim(), boundary)
    assert torch.equal(y2, cupipe.stencil1d(x, w, dim=dim, boundary=boundary))


def _ex_inputs(device, shape2, wshape2, shape1, k1, seed):
    """(x2, w2, x1, w1): a 2-D stack and its weights, rows and their 1-D weights."""
    f32 = torch.float32
    return (make_input(shape2, f32, device, seed=seed), make_weights(wshape2, f32, device, seed=seed + 2),
            make_input(shape1, f32, device, seed=seed + 1), make_weights((k1,), f32, device, seed=seed + 3))


def _check_ex_stencils(x2, w2, x1, w1, boundary, m1d, stages1d, free_sms=0, blocks=0):
    """_stencil2d_ex (primitives/2) and _stencil1d_ex along the last dim against the references."""
    what = f"free_sms={free_sms} blocks={blocks} {boundary}"
    y = torch.ops.cupipe._stencil2d_ex(x2, w2, boundary, "primitives", 2, free_sms, blocks)
    assert_close(y, _ref2d(x2, w2, boundary), atol=1e-4 * w2.numel(), rtol=1e-4, what=f"2d {what}")
    y = torch.ops.cupipe._stencil1d_ex(x1, w1, -1, boundary, m1d, stages1d, free_sms, blocks)
    assert_close(y, _ref1d(x1, w1, -1, boundary), atol=1e-3, rtol=1e-4, what=f"1d {m1d} {what}")


def test_stencil_free_sms(device):
    """The private _stencil1d_ex/_stencil2d_ex leave SMs free (cupipe.distributed's overlap):
    fewer blocks, more tiles each, the same results; nearly all SMs left free still runs (on
    one SM), and a negative count is an error that names the argument."""
    if device != "cuda":
        pytest.skip("the _ex stencils are CUDA-only")
    x2, w2, x1, w1 = _ex_inputs(device, (3, 300, 517), (3, 5), (4, 20001), 7, seed=70)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    m1d = "tma" if tma_supported() else "cg"
    for free in (0, 2, sms - 1, sms + 5):
        for boundary in ("zero", "reflect"):
            _check_ex_stencils(x2, w2, x1, w1, boundary, m1d, 3, free_sms=free)
    with pytest.raises(ValueError, match="free_sms"):
        torch.ops.cupipe._stencil2d_ex(x2, w2, "zero", "auto", 0, -1)


def test_stencil_grid_sizes(device):
    """The _ex stencils' `blocks` (the grid sweep): one block, a few, and a block per tile give
    the same results as the default grid."""
    if device != "cuda":
        pytest.skip("the _ex stencils are CUDA-only")
    x2, w2, x1, w1 = _ex_inputs(device, (2, 700, 1029), (5, 3), (3, 70001), 9, seed=74)
    for blocks in (1, 7, 100000):
        for boundary in ("zero", "circular"):
            _check_ex_stencils(x2, w2, x1, w1, boundary, "pipeline", 4, blocks=blocks)
    with pytest.raises(ValueError, match="blocks"):
        torch.ops.cupipe._stencil2d_ex(x2, w2, "zero", "auto", 0, 0, -1)


def test_stencil_auto_grids_past_one_wave(device):
    """The table runs fp32 1-D signals and 3x3 boxes with about two tiles per block: on inputs
    with more tiles than two per resident block the grid is several waves; results as the
    reference, poisoned outputs first."""
    if device != "cuda":
        pytest.skip("grids are CUDA-only")
    x2 = make_input((4, 1100, 1300), torch.float32, device, seed=78)  # 4 x 18 x 11 tiles of 64 x 128
    x1 = make_input(((1 << 25) + 333,), torch.float32, device, seed=79)  # ~4100 tiles of 8192
    w2 = make_weights((3, 3), torch.float32, device, seed=80)
    w1 = make_weights((9,), torch.float32, device, seed=81)
    for boundary in ("zero", "reflect"):
        poison_allocator(x2.numel() * 4)
        assert_close(cupipe.stencil2d(x2, w2, boundary=boundary), _ref2d(x2, w2, boundary),
                     atol=1e-4 * w2.numel(), rtol=1e-4, what=f"2d auto {boundary}")
        poison_allocator(x1.numel() * 4)
        assert_close(cupipe.stencil1d(x1, w1, boundary=boundary), _ref1d(x1, w1, -1, boundary),
                     atol=1e-3, rtol=1e-4, what=f"1d auto {boundary}")


@pytest.mark.parametrize("boundary", ["zero", "replicate", "circular"])
@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("r", [4, 6])
def test_stencil1d_size_smaller_than_radius(device, n, r, boundary):
    """zero/replicate/circular work for any size; circular is a true modular wrap."""
    x = make_input((3, n), torch.float64, device, seed=n)
    w = make_weights((2 * r + 1,), torch.float64, device)
    y = cupipe.stencil1d(x, w, boundary=boundary)
    assert_close(y, stencil1d_loop_ref(x, w, -1, boundary), atol=1e-12, rtol=1e-12,
                 what=f"loop ref n={n} r={r} {boundary}")
    if boundary != "circular":  # F.pad constant/replicate accept any pad
        assert_close(y, stencil1d_ref(x, w, -1, boundary), atol=1e-12, rtol=1e-12, what="F.pad ref")
    # along a strided dim too
    xt = x.t().contiguous()
    assert_close(cupipe.stencil1d(xt, w, dim=0, boundary=boundary),
                 stencil1d_loop_ref(xt, w, 0, boundary), atol=1e-12, rtol=1e-12, what="dim 0")


def test_circular_equals_fpad_when_size_at_least_r(device):
    # size == r is the edge case where F.pad still accepts circular
    for n, r in [(4, 4), (6, 6), (5, 4)]:
        x = make_input((2, n), torch.float64, device, seed=n)
        w = make_weights((2 * r + 1,), torch.float64, device)
        y = cupipe.stencil1d(x, w, boundary="circular")
        assert_close(y, stencil1d_ref(x, w, -1, "circular"), atol=1e-12, rtol=1e-12, what=f"n={n}")
        assert_close(y, stencil1d_loop_ref(x, w, -1, "circular"), atol=1e-12, rtol=1e-12,
                     what=f"loop n={n}")


@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize("shape", [(1, 19), (19, 1), (7, 13), (1,), (2,)])
def test_stencil1d_odd_sizes(device, shape, boundary):
    for dim in range(len(shape)):
        for r in (0, 1, 2):
            x = make_input(shape, torch.float32, device, seed=7)
            w = make_weights((2 * r + 1,), torch.float32, device)
            if boundary == "reflect" and r > 0 and shape[dim] <= r:
                continue
            _check1d(x, w, dim, boundary)


# ----------------------------------------------------------------------------- stencil2d forward

W_SHAPES = [(1, 1), (3, 3), (5, 5), (7, 7), (9, 9), (13, 13), (3, 5), (5, 3), (1, 7), (9, 1)]
SHAPES_2D = [(7, 13), (2, 3, 9, 10), (1, 17), (17, 1), (5, 4)]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: DTYPE_IDS[d])
@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize("wshape", W_SHAPES, ids=lambda s: f"w{s[0]}x{s[1]}")
@pytest.mark.parametrize("shape", SHAPES_2D, ids=lambda s: "x" + "x".join(map(str, s)))
def test_stencil2d_matches_reference(device, shape, wshape, boundary, dtype):
    x = make_input(shape, dtype, device, seed=2)
    w = make_weights(wshape, dtype, device)
    ry, rx = (wshape[0] - 1) // 2, (wshape[1] - 1) // 2
    H, W = shape[-2], shape[-1]
    if boundary == "reflect" and ((ry > 0 and H <= ry) or (rx > 0 and W <= rx)):
        with pytest.raises(ValueError, match="reflect"):
            cupipe.stencil2d(x, w, boundary=boundary)
        return
    _check2d(x, w, boundary)


# The CUDA kernel's register blocking (see csrc/kernels/stencil.cuh): work items of 8 rows x 4
# columns (2 for fp64), taps in passes of 3 rows and chunks of 1, 3, 5 or 9 columns (wider
# stencils: several chunks, the last one partial), 1-row items for 1-D rows and planes of fewer
# than 8 rows. Planes whose rows are a multiple of 16 bytes move as one box per tile; the others
# row by row.
RADII_2D = [(17, 17), (17, 3), (3, 17), (1, 17), (17, 1), (13, 7), (9, 11)]
PLANES_2D = [(2, 45, 301), (37, 96)]  # rows not / rows a multiple of 16 bytes (every dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: DTYPE_IDS[d])
@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize("wshape", RADII_2D, ids=lambda s: f"w{s[0]}x{s[1]}")
@pytest.mark.parametrize("shape", PLANES_2D, ids=lambda s: "x" + "x".join(map(str, s)))
def test_stencil2d_radii_up_to_8(device, shape, wshape, boundary, dtype):
    """rx != ry up to 8: several tap passes, several tap chunks with a partial last one."""
    x = make_input(shape, dtype, device, seed=20)
    w = make_weights(wshape, dtype, device, seed=21)
    _check2d(x, w, boundary)


ODD_PLANES = [(1, 300), (300, 1), (5, 300), (9, 261), (7, 5), (3, 1, 7), (2, 11, 8)]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: DTYPE_IDS[d])
@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize("shape", ODD_PLANES, ids=lambda s: "x" + "x".join(map(str, s)))
def test_stencil2d_odd_planes(device, shape, boundary, dtype):
    """1xN and Nx1 planes, planes shorter than an 8-row item or just taller, widths that are not
    a multiple of an item's columns, planes narrower than the radius."""
    x = make_input(shape, dtype, device, seed=22)
    H, W = shape[-2:]
    for wshape in [(3, 3), (5, 5), (9, 9), (5, 3), (1, 3), (3, 1), (13, 1)]:
        ry, rx = (wshape[0] - 1) // 2, (wshape[1] - 1) // 2
        if boundary == "reflect" and ((ry > 0 and H <= ry) or (rx > 0 and W <= rx)):
            continue
        _check2d(x, make_weights(wshape, dtype, device, seed=23), boundary, what=f"w={wshape}")


# The CUDA kernel's fixed consumers (StencilFixed in csrc/kernels/stencil.cuh): 3x3 and 5x5
# boxes, the fp32 9x9 box (the wide consumer: 4 x 8 items in the general kernel, 3 x 12 in the
# narrow one), and 1-D rows of radius 1..4 along the last dim, run a compile-time consumer when the
# plane's rows are a multiple of 16 bytes and the data pointer is aligned; otherwise (an odd
# storage offset) the general consumer. Both must agree with the reference, on planes with
# partial items (rows not a multiple of 8, columns not a multiple of a tile), on planes shorter or
# narrower than one tile, and on planes with interior tiles (64 x 128 outputs, or 32 x 128 in the
# fp32 narrow kernels' 128-thread blocks: (2, 150, 384) has them for 3x3 and 5x5; the narrow 9x9
# kernel's 24 x 192 tiles: (1, 100, 600)). (90, 80) takes the narrow 9x9's 48 x 96 tiles of
# narrow planes, (20, 300) one partial row of its 24-row tiles, (37, 96) the general kernel's 9x9
# (its tiles would not be whole 3 x 12 items). Outputs come from poisoned memory.
FIXED_PLANES = [(37, 96), (2, 70, 200), (8, 128), (3, 1, 1024),
                (2, 150, 384), (1, 100, 600),  # interior tiles (no boundary row or column in their window) too
                (90, 80), (20, 300)]
FIXED_WEIGHTS = [(3, 3), (5, 5), (9, 9), (3, 1), (7, 1)]  # and one tap column (Col3..Col9)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: DTYPE_IDS[d])
@pytest.mark.parametrize("boundary", BOUNDARIES)
# offset 4: 2-byte data 8 bytes past a 16-byte boundary, where the 2-byte box consumers take items
# of 8-byte vectors (half_items) and the rows give way to the general consumer.
@pytest.mark.parametrize("offset", [0, 1, 4], ids=["aligned", "offset", "offset4"])
def test_stencil_fixed_consumers(device, boundary, dtype, offset):
    for shape in FIXED_PLANES:
        n = 1
        for s in shape:
            n *= s
        base = make_input((n + offset,), dtype, device, seed=26)
        x = base[offset:].view(shape)  # contiguous; data pointer off by one element when offset
        for wshape in FIXED_WEIGHTS:
            ry, rx = (wshape[0] - 1) // 2, (wshape[1] - 1) // 2
            if boundary == "reflect" and (shape[-2] <= ry or shape[-1] <= rx):
                continue
            if device == "cuda":
                poison_allocator(x.numel() * x.element_size())
            _check2d(x, make_weights(wshape, dtype, device, seed=27), boundary, what=f"offset={offset}")
        for r in (1, 2, 3, 4):
            if boundary == "reflect" and shape[-1] <= r:
                continue
            if device == "cuda":
                poison_allocator(x.numel() * x.element_size())
            _check1d(x, make_weights((2 * r + 1,), dtype, device, seed=28), -1, boundary,
                     what=f"offset={offset}")
            if shape[-2] > r or boundary != "reflect":  # along the strided dim: the fixed columns
                _check1d(x, make_weights((2 * r + 1,), dtype, device, seed=29), -2, boundary,
                         what=f"offset={offset} dim=-2")


# Crops 8 bytes past a 16-byte boundary (2-byte types 4 elements in, fp32 2, fp64 1): tma maps them
# from the 8 bytes before x, here the crop's margin of NaN. The zero boundary's left-edge tiles zero
# those columns (a leak is a NaN in the output); other boundaries keep edge tiles off the maps. Small
# planes (every tile an edge tile) and wide ones (interior tiles, stages reused); auto takes the
# maps for the 2-byte types under the zero boundary.
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: DTYPE_IDS[d])
def test_stencil_crop_lead_maps(device, dtype):
    lead = 8 // dtype.itemsize
    runs = [("auto", 0)] + ([("tma", 2)] if device == "cuda" and tma_supported() else [])
    for planes, (h, w) in ((5, (32, 32)), (1, (70, 520))):
        parent = torch.full((planes, h + 2 * lead, w + 2 * lead), float("nan"), dtype=dtype, device=device)
        x = parent[:, lead:-lead, lead:-lead]
        x.copy_(make_input((planes, h, w), dtype, device, seed=31))
        assert x.data_ptr() % 16 == 8
        for wshape in ((3, 3), (5, 5), (7, 7), (3, 9)):
            wt = make_weights(wshape, dtype, device, seed=32)
            atol, rtol = tol(dtype, wt.numel())
            for boundary in BOUNDARIES:
                ref = _ref2d(x, wt, boundary)
                for m, st in runs:
                    if device == "cuda":
                        poison_allocator(x.numel() * x.element_size())
                    y = cupipe.stencil2d(x, wt, boundary=boundary, mechanism=m, stages=st)
                    assert_close(y, ref, atol=atol, rtol=rtol,
                                 what=f"crop {lead} in {(planes, h, w)} w={wshape} {boundary} {m}/{st} {dtype}")
        w5 = make_weights((5,), dtype, device, seed=33)
        atol, rtol = tol(dtype, 5)
        for m, st in runs:  # along the strided dim (the columns)
            y = cupipe.stencil1d(x, w5, dim=-2, mechanism=m, stages=st)
            assert_close(y, _ref1d(x, w5, -2, "zero"), atol=atol, rtol=rtol, what=f"crop {lead} in, dim -2, {m}/{st}")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: DTYPE_IDS[d])
@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_stencil1d_long_signal(device, boundary, dtype):
    """Signals long enough for several 1-row tiles per block, alone and as rows of a batch whose
    rows are not a multiple of 16 bytes."""
    for shape, r in [((2 ** 22 + 5,), 4), ((3, 2 ** 20 + 3), 1)]:
        x = make_input(shape, dtype, device, seed=24)
        _check1d(x, make_weights((2 * r + 1,), dtype, device, seed=25), -1, boundary)


@pytest.mark.parametrize("mechanism", cupipe.MECHANISMS)
def test_stencil_many_tiles_per_block(device, mechanism):
    """More tiles per block than stages (the grid is capped at the blocks the device holds at
    once), so that every mechanism refills every stage of its ring (a test per mechanism: xdist
    spreads their first-use compiles)."""
    big = device == "cuda"
    if big and mechanism == "tma" and not tma_supported():
        pytest.skip("tma needs sm_90")
    x2 = make_input((16, 1024, 1030) if big else (1, 70, 130), torch.float32, device, seed=26)
    x1 = make_input((2 ** 25 + 3,) if big else (5003,), torch.float32, device, seed=27)
    w1 = make_weights((9,), torch.float32, device, seed=28)
    w2 = [make_weights(s, torch.float32, device, seed=29) for s in [(3, 3), (9, 9), (5, 17)]]
    for boundary in BOUNDARIES:
        refs = [_ref2d(x2, w, boundary) for w in w2]
        ref1 = _ref1d(x1, w1, -1, boundary)
        for stages in (1, 3, 8):
            what = f"{mechanism} stages={stages} {boundary}"
            for w, ref in zip(w2, refs):
                y = cupipe.stencil2d(x2, w, boundary=boundary, mechanism=mechanism, stages=stages)
                assert_close(y, ref, atol=1e-4 * w.numel(), rtol=1e-4,
                             what=f"2d {what} w={tuple(w.shape)}")
            y = cupipe.stencil1d(x1, w1, boundary=boundary, mechanism=mechanism, stages=stages)
            assert_close(y, ref1, atol=1e-3, rtol=1e-4, what=f"1d {what}")


@pytest.mark.parametrize("boundary", ["zero", "replicate", "circular"])
@pytest.mark.parametrize("shape", [(1, 1), (2, 3), (3, 2), (2, 1, 2)])
def test_stencil2d_size_smaller_than_radius(device, shape, boundary):
    x = make_input(shape, torch.float64, device, seed=3)
    for wshape in [(9, 9), (9, 5), (3, 13)]:
        w = make_weights(wshape, torch.float64, device)
        y = cupipe.stencil2d(x, w, boundary=boundary)
        assert_close(y, stencil2d_loop_ref(x, w, boundary), atol=1e-12, rtol=1e-12,
                     what=f"{shape} w={wshape} {boundary}")
        if boundary != "circular":
            assert_close(y, stencil2d_ref(x, w, boundary), atol=1e-12, rtol=1e-12,
                         what=f"F.pad {shape} w={wshape} {boundary}")


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_stencil2d_leading_batch_dims(device, boundary):
    x = make_input((2, 1, 3, 6, 8), torch.float32, device, seed=4)
    w = make_weights((3, 5), torch.float32, device)
    y = _check2d(x, w, boundary)
    # each batch entry is independent
    y1 = cupipe.stencil2d(x[1, 0, 2], w, boundary=boundary)
    assert_close(y[1, 0, 2], y1, atol=0, rtol=0, what="batch slice")


# ----------------------------------------------------------------------------- layouts

def _noncontig_variants(device, dtype=torch.float32):
    """(name, tensor) pairs of non-contiguous views of 2-D/3-D data."""
    base = make_input((12, 26), dtype, device, seed=5)
    flat = make_input((400,), dtype, device, seed=6)
    big3 = make_input((4, 9, 10), dtype, device, seed=8)
    return [
        ("transposed", base.t()),
        ("step-slice", base[:, ::2]),
        ("row-step-slice", base[1::3, 3:]),
        ("storage-offset", flat[7:7 + 11 * 13].view(11, 13)),
        ("offset-transposed", flat[3:3 + 10 * 12].view(10, 12).t()),
        ("expanded", make_input((1, 15), dtype, device, seed=9).expand(6, 15)),
        ("permuted-3d", big3.permute(2, 0, 1)),
        ("flipped-sliced", base.flip(0)[2:, 1:]),  # flip copies; the slice adds an offset
        ("channels-last", make_input((2, 3, 5, 6), dtype, device, seed=19)
         .contiguous(memory_format=torch.channels_last)),
    ]


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_stencil1d_noncontiguous(device, boundary):
    w = make_weights((5,), torch.float32, device)
    for name, x in _noncontig_variants(device):
        for dim in range(x.dim()):
            if boundary == "reflect" and x.shape[dim] <= 2:
                continue
            before = x.clone()
            y = _check1d(x, w, dim, boundary, what=name)
            assert torch.equal(x, before), "input was modified"
            # as on a contiguous copy (read in memory order, another kernel family may run)
            assert_close(y, cupipe.stencil1d(x.contiguous(), w, dim=dim, boundary=boundary), atol=1e-5,
                         rtol=1e-5, what=f"{name} dim={dim} vs contiguous")


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_stencil2d_noncontiguous(device, boundary):
    w = make_weights((3, 5), torch.float32, device)
    for name, x in _noncontig_variants(device):
        y = _check2d(x, w, boundary, what=name)
        assert_close(y, cupipe.stencil2d(x.contiguous(), w, boundary=boundary), atol=1e-5, rtol=1e-5,
                     what=f"{name} vs contiguous")


def test_noncontiguous_weights(device):
    x = make_input((9, 11), torch.float32, device, seed=10)
    w2 = make_weights((5, 3), torch.float32, device).t()  # (3, 5), non-contiguous
    assert not w2.is_contiguous()
    _check2d(x, w2, "reflect")
    w1 = make_weights((14,), torch.float32, device)[::2][:5]  # stride 2
    assert not w1.is_contiguous()
    _check1d(x, w1, 0, "replicate")


# ----------------------------------------------------------------------------- dtypes of weights

@pytest.mark.parametrize("xdtype,wdtype", [
    (torch.float16, torch.float32), (torch.bfloat16, torch.float64), (torch.float32, torch.float64),
    (torch.float32, torch.float16), (torch.float64, torch.float32), (torch.float16, torch.bfloat16),
])
def test_weights_any_float_dtype(device, xdtype, wdtype):
    """Weights of any floating dtype are converted to the accumulation type (fp32, or fp64 for
    fp64 x); the reference applies the same conversion of the weights' values."""
    x = make_input((6, 10), xdtype, device, seed=11)
    w1 = make_weights((5,), wdtype, device)
    w2 = make_weights((3, 3), wdtype, device)
    _check1d(x, w1, -1, "zero", what=f"w {wdtype}")
    _check2d(x, w2, "circular", what=f"w {wdtype}")
    assert cupipe.stencil1d(x, w1).dtype == xdtype
    assert cupipe.stencil2d(x, w2).dtype == xdtype


# ----------------------------------------------------------------------------- empty tensors

@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize("shape", [(0,), (0, 5), (5, 0), (2, 0, 7), (0, 0)])
def test_stencil1d_empty(device, shape, boundary):
    x = make_input(shape, torch.float32, device)
    w = make_weights((3,), torch.float32, device)
    for dim in range(len(shape)):
        if boundary == "reflect" and shape[dim] <= 1:
            with pytest.raises(ValueError, match="reflect"):
                cupipe.stencil1d(x, w, dim=dim, boundary=boundary)
            continue
        y = cupipe.stencil1d(x, w, dim=dim, boundary=boundary)
        assert y.shape == x.shape and y.dtype == x.dtype and y.device == x.device


@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize("shape", [(0, 5, 5), (3, 0, 4, 4), (0, 7), (7, 0)])
def test_stencil2d_empty(device, shape, boundary):
    x = make_input(shape, torch.float32, device)
    w = make_weights((3, 3), torch.float32, device)
    if boundary == "reflect" and min(shape[-2:]) <= 1:
        with pytest.raises(ValueError, match="reflect"):
            cupipe.stencil2d(x, w, boundary=boundary)
        return
    y = cupipe.stencil2d(x, w, boundary=boundary)
    assert y.shape == x.shape and y.dtype == x.dtype


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_stencil_grad_empty(device, boundary):
    """Backward through an empty input: empty grad for x, zero grad for the weights."""
    for shape, dim in [((0, 5), 0), ((0, 5), 1), ((5, 0), 1), ((5, 0), 0), ((2, 0, 4), 1)]:
        if boundary == "reflect" and shape[dim] <= 1:
            continue
        x = torch.empty(shape, device=device, requires_grad=True)
        w = make_weights((3,), torch.float32, device).requires_grad_()
        y = cupipe.stencil1d(x, w, dim=dim, boundary=boundary)
        gx, gw = torch.autograd.grad(y, (x, w), torch.ones_like(y))
        assert gx.shape == x.shape and torch.equal(gw, torch.zeros_like(w)), (shape, dim)
    for shape in [(0, 5), (5, 0), (0, 3, 3), (2, 0, 4, 4)]:
        if boundary == "reflect" and min(shape[-2:]) <= 1:
            continue
        x = torch.empty(shape, device=device, requires_grad=True)
        w = make_weights((3, 3), torch.float32, device).requires_grad_()
        y = cupipe.stencil2d(x, w, boundary=boundary)
        gx, gw = torch.autograd.grad(y, (x, w), torch.ones_like(y))
        assert gx.shape == x.shape and torch.equal(gw, torch.zeros_like(w)), shape


# ----------------------------------------------------------------------------- knobs

# One test per mechanism and stage count (xdist spreads their first-use compiles).
@pytest.mark.parametrize("stages", (0, 1, 2, 3, 4, 8))
@pytest.mark.parametrize("mechanism", cupipe.MECHANISMS)
def test_stencil_mechanisms(device, mechanism, stages):
    if device == "cuda" and mechanism == "tma" and not tma_supported():
        pytest.skip("tma needs sm_90")
    x = make_input((2, 33, 47), torch.float32, device, seed=12)
    xb = make_input((3, 37, 96), torch.float32, device, seed=13)  # rows of 16-byte multiples
    w1 = make_weights((7,), torch.float32, device)
    w2 = make_weights((5, 5), torch.float32, device)
    w3 = make_weights((9, 13), torch.float32, device)
    w4 = make_weights((3, 3), torch.float32, device)
    w5 = make_weights((9, 9), torch.float32, device)
    for boundary in BOUNDARIES:
        for dim in (-1, 1):
            y = cupipe.stencil1d(x, w1, dim=dim, boundary=boundary, mechanism=mechanism,
                                 stages=stages)
            assert_close(y, _ref1d(x, w1, dim, boundary), atol=1e-4, rtol=1e-4,
                         what=f"1d {mechanism} {stages} {boundary} dim={dim}")
        # xb's rows are whole 16-byte multiples: 1-D along them and the 3x3/5x5/9x9 boxes
        # run the fixed consumers (at 2 stages the narrow kernels), behind every mechanism's
        # loader.
        y = cupipe.stencil1d(xb, w1, dim=-1, boundary=boundary, mechanism=mechanism, stages=stages)
        assert_close(y, _ref1d(xb, w1, -1, boundary), atol=1e-4, rtol=1e-4,
                     what=f"1d {mechanism} {stages} {boundary} x={tuple(xb.shape)}")
        for xx, w in [(x, w2), (xb, w2), (xb, w4), (xb, w3), (xb, w5)]:
            y = cupipe.stencil2d(xx, w, boundary=boundary, mechanism=mechanism, stages=stages)
            assert_close(y, _ref2d(xx, w, boundary), atol=1e-4, rtol=1e-4,
                         what=f"2d {mechanism} {stages} {boundary} x={tuple(xx.shape)} "
                              f"w={tuple(w.shape)}")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: DTYPE_IDS[d])
@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_stencil2d_tma_tensor_tiles(device, boundary, dtype):
    """tma moves 2-D tiles as one tensor-map box when rows are 16-byte multiples from an aligned
    pointer (zeros for the box's out-of-plane part: the zero boundary; other boundaries take the
    box for interior tiles only). Planes with edge, interior and batch-crossing tiles, several
    radii, odd heights; an unaligned pointer takes the row copies."""
    if device != "cuda":
        pytest.skip("tma is CUDA-only")
    if not tma_supported():
        pytest.skip("tma needs an sm_90 GPU and sm_90 code")
    for shape, offset in [((3, 131, 256), 0), ((2, 200, 520), 0), ((1, 67, 1024), 0), ((2, 150, 384), 1)]:
        n = shape[0] * shape[1] * shape[2]
        x = make_input((n + offset,), dtype, device, seed=90)[offset:].view(shape)
        for wshape in [(3, 3), (5, 5), (3, 7), (9, 9)]:
            if boundary == "reflect" and (shape[-2] <= wshape[0] // 2 or shape[-1] <= wshape[1] // 2):
                continue
            w = make_weights(wshape, dtype, device, seed=91)
            for stages in (1, 2, 4):
                poison_allocator(x.numel() * x.element_size())
                y = cupipe.stencil2d(x, w, boundary=boundary, mechanism="tma", stages=stages)
                atol, rtol = tol(dtype, w.numel())
                assert_close(y, _ref2d(x, w, boundary), atol=atol, rtol=rtol,
                             what=f"tma {shape} offset={offset} w={wshape} stages={stages} {dtype}")


# The tensor-core consumer of fp16/bf16 (StencilFixed::Mma, csrc/kernels/stencil/consumer_mma.cuh): sm_80+,
# rows of whole 16-byte multiples, tiles of whole 128-output units; with two stages, boxes of 5, 7
# or 9 tap rows and 5 to 9 columns run the narrow tensor-core kernels (rounds of rows), other
# boxes of at least 35 taps with 3 <= kw <= 9 (and every box at 1 or 3 stages) the general
# kernel's consumer. Tiles start at a column phase that depends on the pointer's offset and rx (the
# tile grid shifts left by up to 62 columns), weights are split into two 2-byte terms, and units near
# non-finite values are recomputed on the CUDA cores. CUPIPE_STENCIL_MMA=0 turns it off: the
# CUDA-core consumers are the control. (3, 3) stays on the CUDA cores, and (5, 5) at 1 or 3
# stages: controls.
MMA_PLANES = [(2, 70, 200), (1, 67, 1024), (9, 136), (2, 8, 264)]
MMA_WEIGHTS = [(9, 9), (7, 7), (5, 7), (7, 5), (13, 3), (17, 3), (5, 9), (5, 5), (3, 3)]


def _mma_capable(device):
    if device != "cuda":
        pytest.skip("the tensor-core consumer is CUDA-only")
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("the tensor-core consumer needs sm_80")


def _offset_view(shape, dtype, device, offset, seed):
    n = 1
    for s_ in shape:
        n *= s_
    return make_input((n + offset,), dtype, device, seed=seed)[offset:].view(shape)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_stencil_tensor_core_consumer(device, boundary, dtype):
    """Every plane (partial units, partial tiles, planes of one tile), pointer offset (element
    0..3: every column phase) and stencil shape against the float64 reference (the
    every-mechanism test below: one plane behind each mechanism's loader)."""
    _mma_capable(device)
    for shape in MMA_PLANES:
        for offset in (0, 1, 2, 3):
            x = _offset_view(shape, dtype, device, offset, seed=60)
            H, W = shape[-2], shape[-1]
            for wshape in MMA_WEIGHTS:
                ry, rx = (wshape[0] - 1) // 2, (wshape[1] - 1) // 2
                if boundary == "reflect" and (H <= ry or W <= rx):
                    continue
                w = make_weights(wshape, torch.float32, device, seed=61)  # fp32: split into terms
                poison_allocator(x.numel() * x.element_size())
                y = cupipe.stencil2d(x, w, boundary=boundary)
                atol, rtol = tol(dtype, w.numel())
                assert_close(y, _ref2d(x, w, boundary), atol=atol, rtol=rtol,
                             what=f"2d {shape} offset={offset} w={wshape}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("mechanism", cupipe.MECHANISMS)
def test_stencil_tensor_core_every_mechanism(device, mechanism, dtype):
    """The tensor-core consumer behind each mechanism's loader at 1-3 stages: the first plane,
    aligned and one element off, 5x5 to 9x9, every boundary (a test per mechanism: xdist spreads
    their first-use compiles)."""
    _mma_capable(device)
    if mechanism == "tma" and not tma_supported():
        pytest.skip("tma needs sm_90")
    shape = MMA_PLANES[0]
    for offset in (0, 1):
        x = _offset_view(shape, dtype, device, offset, seed=60)
        for wshape in [(5, 5), (7, 7), (9, 9)]:
            w = make_weights(wshape, torch.float32, device, seed=61)
            atol, rtol = tol(dtype, w.numel())
            for boundary in BOUNDARIES:
                if boundary == "reflect" and (shape[-2] <= wshape[0] // 2 or shape[-1] <= wshape[1] // 2):
                    continue
                ref = _ref2d(x, w, boundary)
                for stages in (1, 2, 3):
                    poison_allocator(x.numel() * x.element_size())
                    y = cupipe.stencil2d(x, w, boundary=boundary, mechanism=mechanism, stages=stages)
                    assert_close(y, ref, atol=atol, rtol=rtol,
                                 what=f"2d {mechanism}/{stages} {boundary} {shape} offset={offset} w={wshape}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_stencil_tensor_core_many_tiles_per_block(device, dtype):
    """The narrow tensor-core kernels' persistent blocks with several tiles each (the planes above
    give a block one tile at most): ~2300 tiles of 32 x 128 over at most one wave of blocks, edge
    tiles on every side. tma under the zero boundary builds its fragments while the first tile
    loads and zeroes no stage; reflect and primitives take the set-up before the ring. fp32 weights
    (two terms) and weights in x's dtype (one term), against the float64 reference, poisoned
    outputs."""
    _mma_capable(device)
    x = make_input((2, 1100, 4104), dtype, device, seed=75)  # rows of whole 16-byte multiples
    configs = [("auto", 0), ("primitives", 2)]
    if tma_supported():
        configs.append(("tma", 2))
    weights = [make_weights((5, 5), torch.float32, device, seed=76),
               make_weights((7, 7), torch.float32, device, seed=77),
               make_weights((5, 5), dtype, device, seed=78)]
    for boundary in ("zero", "reflect"):
        for w in weights:
            ref = _ref2d(x, w, boundary)
            atol, rtol = tol(dtype, w.numel())
            for mechanism, stages in configs:
                poison_allocator(x.numel() * x.element_size())
                y = cupipe.stencil2d(x, w, boundary=boundary, mechanism=mechanism, stages=stages)
                assert_close(y, ref, atol=atol, rtol=rtol,
                             what=f"{mechanism}/{stages} {boundary} w={tuple(w.shape)} {w.dtype}")


def _both_consumers(monkeypatch, fn):
    y_mma = fn()
    monkeypatch.setenv("CUPIPE_STENCIL_MMA", "0")
    y_core = fn()
    monkeypatch.delenv("CUPIPE_STENCIL_MMA")
    return y_mma, y_core


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("boundary", ["zero", "replicate"])
def test_stencil_tensor_core_nonfinite(device, monkeypatch, boundary, dtype):
    """inf and NaN inputs: the MMAs would multiply them by zero weights (NaN in up to 16
    neighbours); those units are recomputed exactly, so the result equals the CUDA-core
    consumer's: NaN, +inf and -inf in the same places, finite values within fp32 rounding."""
    _mma_capable(device)
    x = make_input((2, 70, 200), dtype, device, seed=63)
    for (b, i, j), v in [((0, 10, 50), float("inf")), ((1, 33, 127), float("nan")),
                         ((0, 69, 199), float("-inf")), ((1, 0, 0), float("inf")),
                         ((0, 40, 128), float("inf")), ((0, 40, 131), float("-inf"))]:
        x[b, i, j] = v
    for wshape in [(5, 5), (7, 7), (9, 9), (5, 7), (13, 3)]:
        w = make_weights(wshape, torch.float32, device, seed=64)
        y_mma, y_core = _both_consumers(monkeypatch, lambda: cupipe.stencil2d(x, w, boundary=boundary))
        assert torch.equal(torch.isnan(y_mma), torch.isnan(y_core)), wshape
        assert torch.equal(torch.isinf(y_mma), torch.isinf(y_core)), wshape
        assert bool(torch.isnan(y_mma).any()) and bool(torch.isinf(y_mma).any()), wshape
        atol, rtol = tol(dtype, w.numel())
        finite = torch.isfinite(y_core)  # (assert_close would call inf - inf a difference)
        assert_close(y_mma[finite], y_core[finite], atol=atol, rtol=rtol, what=f"nonfinite w={wshape}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_stencil_tensor_core_weight_terms(device, monkeypatch, dtype):
    """fp32 weights over a wide range (2^-12 .. 2^12 apart; bf16 also scaled by 2^+-60, past
    fp16's range): both consumers within one output ulp of the float64 result, plus fp32
    accumulation error (2^-16 of sum |w x|), plus for the tensor cores what the two weight terms
    leave out: fp16's the bits a weight loses below 2^-22 of the largest one (its terms go
    subnormal there), bf16's up to 2^-16 of each weight (two terms of 8 bits)."""
    _mma_capable(device)
    x = make_input((3, 67, 256), dtype, device, seed=66)
    g = torch.Generator(device="cpu").manual_seed(67)
    ulp = 2.0 ** -10 if dtype == torch.float16 else 2.0 ** -7
    scales = (1.0, 2.0 ** -8) if dtype == torch.float16 else (1.0, 2.0 ** -60, 2.0 ** 60)
    for scale, k in itertools.product(scales, (5, 7)):
        w = (torch.randn(k, k, generator=g) * 2.0 ** torch.randint(-12, 13, (k, k), generator=g)) * scale
        w = w.to(device)
        exact = stencil2d_ref(x.double(), w.double(), "zero")
        mag = stencil2d_ref(x.double().abs(), w.double().abs(), "zero")  # sum |w x| per output
        xsum = stencil2d_ref(x.double().abs(), torch.ones_like(w, dtype=torch.float64), "zero")
        bound = ulp * exact.abs() + 2.0 ** -16 * mag
        terms = (2.0 ** -22 * float(w.abs().max()) * xsum if dtype == torch.float16
                 else 2.0 ** -16 * mag)
        in_range = exact.abs() < (6.0e4 if dtype == torch.float16 else 3.0e38)
        for name, y in zip(("mma", "cuda cores"),
                           _both_consumers(monkeypatch, lambda: cupipe.stencil2d(x, w))):
            err = (y.double() - exact).abs()
            b = bound + terms if name == "mma" else bound
            assert bool((err <= b)[in_range].all()), (name, scale, k, float((err - b)[in_range].max()))


@pytest.mark.parametrize("mechanism", cupipe.MECHANISMS)  # (an item each: their first-use compiles spread)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_stencil_tensor_core_weights_in_input_dtype(device, dtype, mechanism):
    """Weights that come in x's dtype are exact in it: the narrow tensor-core kernels multiply one
    weight term instead of two. The second terms were zeros, so the sums are the same: equal, bit
    for bit, to the same weights passed as fp32 (every mechanism). Every result against the
    float64 reference."""
    _mma_capable(device)
    if mechanism == "tma" and not tma_supported():
        pytest.skip("tma needs sm_90")
    for shape, offset in [((2, 70, 264), 0), ((67, 1024), 1)]:
        x = _offset_view(shape, dtype, device, offset, seed=68)
        for k in (5, 7, 9):
            w = make_weights((k, k), dtype, device, seed=69)
            ref = _ref2d(x, w, "zero")
            atol, rtol = tol(dtype, w.numel())
            poison_allocator(x.numel() * x.element_size())
            y1 = cupipe.stencil2d(x, w, mechanism=mechanism, stages=2)
            y3 = cupipe.stencil2d(x, w.float(), mechanism=mechanism, stages=2)
            what = f"{mechanism} {shape} offset={offset} {k}x{k}"
            assert_close(y1, ref, atol=atol, rtol=rtol, what=what)
            assert torch.equal(y1, y3), what


@pytest.mark.parametrize("xdtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16],
                         ids=["f32", "f64", "f16", "bf16"])
def test_stencil_weights_any_float_dtype(device, xdtype):
    """Weights of any float dtype: on CUDA the kernels convert them while staging them (no
    conversion kernel), so the result equals, bit for bit, the same weights converted to the
    accumulation type first (fp32; fp64 for fp64 x: fp64 weights round to nearest, the others are
    exact); a non-contiguous view too. 2-D boxes on the tensor-core and CUDA-core paths, and 1-D."""
    acc = torch.float64 if xdtype == torch.float64 else torch.float32
    x = make_input((2, 37, 264), xdtype, device, seed=72)
    for wshape in [(3, 3), (5, 5), (7, 7), (1, 9)]:
        w64 = make_weights(wshape, torch.float64, device, seed=73)
        for wdt in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
            w = w64.to(wdt)
            ref = cupipe.stencil2d(x, w.to(acc))
            poison_allocator(x.numel() * x.element_size(), device)
            assert torch.equal(cupipe.stencil2d(x, w), ref), (wshape, wdt)
            wt = w.t().contiguous().t()  # the same values, column-major
            assert torch.equal(cupipe.stencil2d(x, wt), ref), (wshape, wdt, "strided")
    w1 = make_weights((9,), torch.float16, device, seed=74)
    assert torch.equal(cupipe.stencil1d(x, w1), cupipe.stencil1d(x, w1.to(acc)))


def test_stencil_tensor_core_one_term_fallback(device):
    """fp16 weights whose scaled values are not all exact in fp16 (1024 sets the scale 2^-11, and
    3 * 2^-15 then falls below fp16's smallest subnormal): the one-term kernel finds out when it
    builds its fragments and computes those tiles on the exact path; within the float64 result's
    ulp plus fp32 accumulation error."""
    _mma_capable(device)
    x = make_input((2, 70, 264), torch.float16, device, seed=70)
    w = make_weights((5, 5), torch.float16, device, seed=71)
    w[0, 0], w[4, 3] = 1024.0, 3 * 2.0 ** -15
    exact = stencil2d_ref(x.double(), w.double(), "zero")
    mag = stencil2d_ref(x.double().abs(), w.double().abs(), "zero")
    for mechanism in ("auto", "primitives", "sync"):
        y = cupipe.stencil2d(x, w, mechanism=mechanism, stages=2)
        finite = exact.abs() < 6.0e4
        err = (y.double() - exact).abs()
        bound = 2.0 ** -10 * exact.abs() + 2.0 ** -16 * mag
        assert bool((err <= bound)[finite].all()), (mechanism, float((err - bound)[finite].max()))


# ----------------------------------------------------------------------------- gradients

def _grads(fn, *inputs):
    out = fn(*inputs)
    g = make_input(out.shape, out.dtype, out.device, seed=99)
    return torch.autograd.grad(out, inputs, g, allow_unused=True)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize("r", [0, 1, 3])
def test_stencil1d_grad_matches_reference(device, r, boundary, dtype):
    for shape, dim in [((23,), 0), ((5, 17), -1), ((5, 17), 0), ((3, 6, 8), 1)]:
        x = make_input(shape, dtype, device, seed=13).requires_grad_()
        w = make_weights((2 * r + 1,), dtype, device).requires_grad_()
        gx, gw = _grads(lambda a, b: cupipe.stencil1d(a, b, dim=dim, boundary=boundary), x, w)
        x64 = x.detach().double().requires_grad_()
        w64 = w.detach().double().requires_grad_()
        rx, rw = _grads(lambda a, b: stencil1d_ref(a, b, dim, boundary), x64, w64)
        a, rt = (1e-10, 1e-10) if dtype == torch.float64 else (1e-4, 1e-4)
        assert_close(gx, rx.to(dtype), atol=a, rtol=rt, what=f"grad x {shape} dim={dim}")
        assert_close(gw, rw.to(dtype), atol=a * x.numel(), rtol=rt, what=f"grad w {shape} dim={dim}")
        # only one of the two requiring grad
        gx_only, = torch.autograd.grad(cupipe.stencil1d(x, w.detach(), dim=dim, boundary=boundary),
                                       x, make_input(shape, dtype, device, seed=99))
        assert_close(gx_only, gx, atol=0, rtol=0, what="grad x only")
        gw_only, = torch.autograd.grad(cupipe.stencil1d(x.detach(), w, dim=dim, boundary=boundary),
                                       w, make_input(shape, dtype, device, seed=99))
        assert_close(gw_only, gw, atol=0, rtol=0, what="grad w only")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize("wshape", [(1, 1), (3, 3), (3, 5), (5, 1)])
def test_stencil2d_grad_matches_reference(device, wshape, boundary, dtype):
    for shape in [(7, 9), (2, 3, 6, 5)]:
        x = make_input(shape, dtype, device, seed=14).requires_grad_()
        w = make_weights(wshape, dtype, device).requires_grad_()
        gx, gw = _grads(lambda a, b: cupipe.stencil2d(a, b, boundary=boundary), x, w)
        x64 = x.detach().double().requires_grad_()
        w64 = w.detach().double().requires_grad_()
        rx, rw = _grads(lambda a, b: stencil2d_ref(a, b, boundary), x64, w64)
        a, rt = (1e-10, 1e-10) if dtype == torch.float64 else (1e-4, 1e-4)
        assert_close(gx, rx.to(dtype), atol=a * w.numel(), rtol=rt, what=f"grad x {shape}")
        assert_close(gw, rw.to(dtype), atol=a * x.numel(), rtol=rt, what=f"grad w {shape}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_stencil_grad_half(device, dtype):
    """Half inputs: gradients come back in the input dtypes and are close to fp64."""
    x = make_input((6, 10), dtype, device, seed=15).requires_grad_()
    w = make_weights((3, 3), dtype, device).requires_grad_()
    gx, gw = _grads(lambda a, b: cupipe.stencil2d(a, b, boundary="replicate"), x, w)
    assert gx.dtype == dtype and gw.dtype == dtype
    x64 = x.detach().double().requires_grad_()
    w64 = w.detach().double().requires_grad_()
    rx, rw = _grads(lambda a, b: stencil2d_ref(a, b, "replicate"), x64, w64)
    atol, rtol = tol(dtype, 9)
    assert_close(gx, rx.to(dtype), atol=atol, rtol=rtol, what="grad x")
    # grad w sums 60 products of O(1) values; allow for the half rounding of the output
    assert_close(gw, rw.to(dtype), atol=atol * 8, rtol=rtol, what="grad w")


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_stencil1d_gradcheck(device, boundary):
    cases = [((7,), 0, 1), ((4, 6), -1, 2), ((5, 3), 0, 1), ((2, 5, 3), 1, 2)]
    if boundary != "reflect":  # sizes smaller than r: modular wrap / clamping / zeros
        cases += [((2, 3), -1, 4), ((2,), 0, 3)]
    for shape, dim, r in cases:
        x = make_input(shape, torch.float64, device, seed=16).requires_grad_()
        w = make_weights((2 * r + 1,), torch.float64, device).requires_grad_()
        assert torch.autograd.gradcheck(
            lambda a, b: cupipe.stencil1d(a, b, dim=dim, boundary=boundary), (x, w))
        assert torch.autograd.gradgradcheck(
            lambda a, b: cupipe.stencil1d(a, b, dim=dim, boundary=boundary), (x, w))


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_stencil2d_gradcheck(device, boundary):
    cases = [((4, 5), (3, 3)), ((2, 4, 6), (3, 5)), ((5, 3), (5, 1))]
    if boundary != "reflect":
        cases += [((2, 3), (7, 5))]
    for shape, wshape in cases:
        x = make_input(shape, torch.float64, device, seed=17).requires_grad_()
        w = make_weights(wshape, torch.float64, device).requires_grad_()
        assert torch.autograd.gradcheck(lambda a, b: cupipe.stencil2d(a, b, boundary=boundary),
                                        (x, w))


# ----------------------------------------------------------------------------- weight gradients

def _wgrad_ref(x, g, w_shape, boundary, one_d_dim=None):
    """float64 grad_w of the reference stencil, and the same for |x|, |g| (the scale that bounds
    the accumulation error of each tap)."""
    def grad_w(a, b):
        w = torch.zeros(w_shape, dtype=torch.float64, device=a.device, requires_grad=True)
        if one_d_dim is None:
            y = stencil2d_ref(a.double(), w, boundary)
        else:
            y = stencil1d_ref(a.double(), w, one_d_dim, boundary)
        return torch.autograd.grad(y, w, b.double())[0]
    return grad_w(x, g), grad_w(x.abs(), g.abs())


def _check_wgrad(got, ref, scale, dtype, what):
    assert got.dtype == (torch.float64 if dtype == torch.float64 else torch.float32), what
    assert got.shape == ref.shape, what
    # fp32 (fp64) accumulation of exactly representable products: the error of each tap is a
    # small multiple of eps times the sum of the magnitudes of its products.
    rel = 1e-12 if dtype == torch.float64 else 2e-5
    err = (got.double().cpu() - ref.cpu()).abs()
    bound = rel * scale.cpu() + 1e-30
    assert bool((err <= bound).all()), f"{what}: max err {err.max().item():.3e}, " \
                                       f"bound {bound.min().item():.3e}..{bound.max().item():.3e}"


# Shapes that take each consumer blocking: Row (a 1-D signal, or planes under 8 rows), Box1, 3, 5
# and 9 (one chunk, several chunks: kw 11 and 17), one pass and several (kh > 3), edge tiles.
WGRAD_2D = [((67, 131), (3, 3)), ((2, 40, 70), (5, 5)), ((33, 257), (3, 5)), ((50, 77), (5, 1)),
            ((19, 45), (1, 7)), ((70, 90), (9, 9)), ((41, 60), (7, 11)), ((30, 40), (17, 17)),
            ((5, 300), (3, 3))]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: DTYPE_IDS[d])
@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize("shape,wshape", WGRAD_2D, ids=[f"{s}-{w}" for s, w in WGRAD_2D])
def test_stencil2d_weight_grad_op(device, shape, wshape, boundary, dtype):
    x = make_input(shape, dtype, device, seed=21)
    g = make_input(shape, dtype, device, seed=22)
    w = make_weights(wshape, dtype, device)
    got = torch.ops.cupipe._stencil2d_weight_grad(x, g, w, boundary)
    ref, scale = _wgrad_ref(x, g, wshape, boundary)
    _check_wgrad(got, ref, scale, dtype, f"{shape} {wshape} {boundary}")


WGRAD_1D = [((1000,), 0, 4), ((3, 517), -1, 2), ((40, 9, 33), 1, 3), ((6, 5000), -1, 1),
            ((12, 7), 0, 2)]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: DTYPE_IDS[d])
@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize("shape,dim,r", WGRAD_1D, ids=[f"{s}-d{d}-r{r}" for s, d, r in WGRAD_1D])
def test_stencil1d_weight_grad_op(device, shape, dim, r, boundary, dtype):
    x = make_input(shape, dtype, device, seed=23)
    g = make_input(shape, dtype, device, seed=24)
    w = make_weights((2 * r + 1,), dtype, device)
    got = torch.ops.cupipe._stencil1d_weight_grad(x, g, w, dim, boundary)
    ref, scale = _wgrad_ref(x, g, (2 * r + 1,), boundary, one_d_dim=dim)
    _check_wgrad(got, ref, scale, dtype, f"{shape} dim={dim} r={r} {boundary}")


def test_stencil_weight_grad_deterministic_and_strided(device):
    """Many tiles per block: the same bits on every run; a non-contiguous (expanded) upstream
    gradient, as autograd hands over from a .sum(), gives the contiguous one's result."""
    x = make_input((3, 300, 520), torch.float32, device, seed=25)
    g = make_input((3, 300, 520), torch.float32, device, seed=26)
    w = make_weights((5, 5), torch.float32, device)
    a = torch.ops.cupipe._stencil2d_weight_grad(x, g, w, "reflect")
    b = torch.ops.cupipe._stencil2d_weight_grad(x, g, w, "reflect")
    assert torch.equal(a, b)
    ref, scale = _wgrad_ref(x, g, (5, 5), "reflect")
    _check_wgrad(a, ref, scale, torch.float32, "many tiles")
    ones = torch.ones((), device=device).expand(3, 300, 520)
    e = torch.ops.cupipe._stencil2d_weight_grad(x, ones, w, "zero")
    f = torch.ops.cupipe._stencil2d_weight_grad(x, ones.contiguous(), w, "zero")
    assert torch.equal(e, f)


def test_stencil_weight_grad_errors(device):
    x = make_input((6, 7), torch.float32, device)
    w = make_weights((3, 3), torch.float32, device)
    with pytest.raises(ValueError, match="grad must have x's shape"):
        torch.ops.cupipe._stencil2d_weight_grad(x, x[:5], w, "zero")
    with pytest.raises(TypeError, match="grad must have x's dtype"):
        torch.ops.cupipe._stencil2d_weight_grad(x, x.double(), w, "zero")
    with pytest.raises(ValueError, match="boundary"):
        torch.ops.cupipe._stencil1d_weight_grad(x, x, w[0], -1, "wrap")


# Each kernel family (csrc/kernels/stencil/family.cuh, docs/design.md 4.2) is what the launch plan
# picks for the case it exists for, and agrees with the reference there, on planes with interior,
# edge and partial tiles. `primitives` runs on every sm_80+ GPU; the tensor-core families need sm_80
# code too. Each case: (shape, weights, dtype, stages, dim, offset, family).
FAMILY_CASES = [
    ((3, 100, 1000), (9,), torch.float32, 2, -1, 0, "row"),
    ((2, 150, 384), (3, 3), torch.float32, 2, None, 0, "narrow3"),
    ((2, 150, 384), (3, 3), torch.bfloat16, 1, None, 0, "narrow3"),
    ((2, 150, 384), (5, 5), torch.float32, 2, None, 0, "narrow5"),
    ((1, 100, 600), (9, 9), torch.float32, 2, None, 0, "wide9"),
    ((2, 150, 512), (5, 5), torch.float16, 2, None, 0, "mma5"),
    ((2, 150, 512), (7, 7), torch.bfloat16, 2, None, 0, "mma7"),
    ((2, 150, 512), (9, 9), torch.float16, 2, None, 0, "mma9"),
    ((2, 150, 384), (3, 3), torch.float32, 3, None, 0, "box_fixed"),  # deeper rings: the fixed box on Box's block
    ((1, 100, 600), (9, 9), torch.float32, 4, None, 0, "box_fixed"),  # the wide 9x9 there
    ((2, 150, 384), (3, 3), torch.float32, 2, None, 1, "box"),     # unaligned: no fixed consumer
    ((2, 150, 384), (3, 3), torch.bfloat16, 2, None, 4, "narrow3"),  # 8 bytes off 16: 8-byte items
    ((2, 150, 384), (5, 5), torch.float16, 3, None, 4, "box_fixed"),
    ((2, 150, 384), (3, 3), torch.bfloat16, 2, None, 1, "box"),    # 2 bytes off: the general consumer
    ((2, 150, 384), (3, 3), torch.float64, 2, None, 0, "box_fixed"),
    ((2, 150, 384), (5, 3), torch.float64, 2, None, 0, "box"),
    ((2, 150, 384), (7, 7), torch.float32, 2, None, 0, "box"),
    ((2, 150, 512), (7, 7), torch.float16, 3, None, 0, "box_mma"),  # the tensor cores at other stage counts
    ((2, 200, 512), (11, 5), torch.bfloat16, 2, None, 0, "box_mma"),  # more tap rows than Mma9
    ((64, 3000), (7,), torch.float32, 2, 0, 0, "box_fixed"),       # 1-D along a strided dim: the fixed column
    ((64, 3001), (7,), torch.float32, 2, 0, 0, "box"),             # not rows16: Box1
    ((40, 512), (5,), torch.bfloat16, 2, 0, 0, "box_fixed"),
    ((40, 512), (11,), torch.float32, 2, 0, 0, "box"),             # no fixed column of 11 taps
    ((8, 500, 3), (5,), torch.float32, 2, 1, 0, "stepped_row"),    # taps 3 apart along the rows
    ((8, 500, 3), (9,), torch.bfloat16, 1, 1, 0, "stepped_row"),
]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available() or not cupipe.build_info.get("with_cuda"),
                    reason="needs a CUDA device and a CUDA build of cupipe")
@pytest.mark.parametrize("case", FAMILY_CASES, ids=lambda c: f"{c[6]}-{'x'.join(map(str, c[1]))}-"
                         f"{DTYPE_IDS[c[2]]}-s{c[3]}" + ("-off" if c[5] else ""))
@pytest.mark.parametrize("boundary", ["zero", "reflect"])
def test_stencil_kernel_families(case, boundary):
    shape, wshape, dtype, stages, dim, offset, family = case
    n = 1
    for s in shape:
        n *= s
    x = make_input((n + offset,), dtype, "cuda", seed=95)[offset:].view(shape)
    w = make_weights(wshape, dtype, "cuda", seed=96)
    assert cupipe._C.stencil_family(x, w, dim, boundary, "primitives", stages) == family
    poison_allocator(x.numel() * x.element_size())
    if dim is None:
        y = cupipe.stencil2d(x, w, boundary=boundary, mechanism="primitives", stages=stages)
        ref = _ref2d(x, w, boundary)
    else:
        y = cupipe.stencil1d(x, w, dim=dim, boundary=boundary, mechanism="primitives", stages=stages)
        ref = _ref1d(x, w, dim, boundary)
    atol, rtol = tol(dtype, w.numel())
    assert_close(y, ref, atol=atol, rtol=rtol, what=f"family {family} {shape} w={wshape} {boundary} {dtype}")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available() or not cupipe.build_info.get("with_cuda"),
                    reason="needs a CUDA device and a CUDA build of cupipe")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
@pytest.mark.parametrize("boundary", ["zero", "replicate"])
def test_stencil_stepped_box_family(dtype, boundary):
    """A channels_last plane: the taps along W lie C elements apart (the SteppedBox family)."""
    x = make_input((2, 5, 70, 300), dtype, "cuda", seed=97).contiguous(memory_format=torch.channels_last)
    w = make_weights((3, 5), dtype, "cuda", seed=98)
    for mech, stages in (("primitives", 1), ("tma" if tma_supported() else "cg", 2)):
        assert cupipe._C.stencil_family(x, w, None, boundary, mech, stages) == "stepped_box"
        poison_allocator(x.numel() * x.element_size())
        y = cupipe.stencil2d(x, w, boundary=boundary, mechanism=mech, stages=stages)
        atol, rtol = tol(dtype, w.numel())
        assert_close(y, _ref2d(x, w, boundary), atol=atol, rtol=rtol, what=f"stepped box {mech}/{stages} {boundary}")


def test_stencil_family_errors():
    """stencil_family checks its arguments like the ops, and needs a CUDA tensor and build."""
    x, w = torch.randn(8, 8), torch.randn(3, 3)
    if not cupipe.build_info.get("with_cuda"):
        with pytest.raises(RuntimeError, match="no CUDA kernels"):
            cupipe._C.stencil_family(x, w)
        return
    with pytest.raises(ValueError, match="mechanism"):
        cupipe._C.stencil_family(x, w, None, "zero", "warp", 0)
    with pytest.raises(ValueError, match="CUDA tensor"):
        cupipe._C.stencil_family(x, w, None, "zero", "auto", 0)
