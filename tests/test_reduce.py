"""cupipe.reduce against getattr(torch, op)(x, dim, keepdim), and its gradients."""
from __future__ import annotations

import math

import pytest
import torch

import cupipe
from conftest import FLOAT_DTYPES, REDUCE_OPS, assert_close, make_input, reduce_ref, tma_supported, tol

DTYPE_IDS = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
             torch.float64: "f64"}

# (shape, dim) cases: None, int, negative int, adjacent and non-adjacent lists, everything, []
DIM_CASES = [
    ((17,), None), ((17,), 0), ((17,), -1), ((17,), [0]),
    ((5, 7), None), ((5, 7), 0), ((5, 7), 1), ((5, 7), -2), ((5, 7), [0, 1]), ((5, 7), [1, 0]),
    ((3, 4, 5), 1), ((3, 4, 5), -1), ((3, 4, 5), [0, 2]), ((3, 4, 5), [0, 1]),
    ((3, 4, 5), [1, 2]), ((3, 4, 5), [-1, 0]), ((3, 4, 5), []),
    ((2, 3, 4, 5), [0, 2]), ((2, 3, 4, 5), [1, 3]), ((2, 3, 4, 5), [0, 1, 3]),
    ((2, 3, 4, 5), [1, 2]), ((2, 3, 4, 5), None),
    ((64, 257), -1), ((257, 64), 0),
]


def _n_reduced(shape, dim):
    if dim is None or dim == []:
        return math.prod(shape)
    dims = [dim] if isinstance(dim, int) else dim
    return math.prod(shape[d] for d in dims)


def _tolerance(op, dtype, n):
    if op in ("amax", "amin"):
        return 0.0, 0.0  # the result is one of the inputs: exact
    atol, rtol = tol(dtype, 1)
    if dtype in (torch.float32, torch.float64):
        # sequential vs pairwise summation order: error grows ~ n * eps * max|x|
        eps = 1e-7 if dtype == torch.float32 else 1e-16
        atol = max(atol, 4 * n * eps)
    return atol, rtol


def _check(x, op, dim, keepdim, dtype=None, what=""):
    y = cupipe.reduce(x, op, dim, keepdim, dtype=dtype)
    expected = reduce_ref(x, op, dim, keepdim, dtype)
    atol, rtol = _tolerance(op, y.dtype, _n_reduced(tuple(x.shape), dim))
    assert y.is_contiguous()
    assert_close(y, expected, atol=atol, rtol=rtol, equal_nan=True,
                 what=f"reduce {what} {op} shape={tuple(x.shape)} dim={dim} keepdim={keepdim} "
                      f"{x.dtype} dtype={dtype}")
    return y


@pytest.mark.parametrize("keepdim", [False, True], ids=["nokeep", "keep"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: DTYPE_IDS[d])
@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("shape,dim", DIM_CASES, ids=[f"{s}-{d}" for s, d in DIM_CASES])
def test_reduce_matches_torch(device, shape, dim, op, dtype, keepdim):
    x = make_input(shape, dtype, device, seed=21)
    y = _check(x, op, dim, keepdim)
    # torch.ops entry point takes the int or list directly
    y2 = torch.ops.cupipe.reduce(x, op, dim if isinstance(dim, (list, int)) else None, keepdim)
    assert torch.equal(y, y2)


def test_reduce_int_dim_through_op(device):
    x = make_input((4, 6), torch.float32, device, seed=22)
    for d in (0, 1, -1):
        assert torch.equal(torch.ops.cupipe.reduce(x, "sum", d), torch.ops.cupipe.reduce(x, "sum", [d]))


@pytest.mark.parametrize("op", ["sum", "mean"])
@pytest.mark.parametrize("xdtype,odtype", [
    (torch.float16, torch.float32), (torch.bfloat16, torch.float32), (torch.float32, torch.float64),
    (torch.float16, torch.float64), (torch.float32, torch.float16), (torch.float64, torch.float32),
    (torch.bfloat16, torch.float16), (torch.float32, torch.float32),
])
def test_reduce_dtype_arg(device, op, xdtype, odtype):
    x = make_input((6, 50), xdtype, device, seed=23)
    for dim in (None, 1, [0]):
        y = _check(x, op, dim, False, dtype=odtype)
        assert y.dtype == odtype
        # and against torch's own dtype= semantics
        ref = getattr(torch, op)(x.to("cpu"), dim=dim, dtype=odtype) if dim is not None else \
            getattr(torch, op)(x.to("cpu"), dtype=odtype)
        atol, rtol = tol(odtype if odtype != torch.float64 else xdtype, 1)
        assert_close(y.cpu(), ref, atol=max(atol, 1e-4), rtol=max(rtol, 1e-4), what="torch dtype=")


def test_reduce_fp16_accumulates_in_fp32(device):
    """A sum whose partial sums exceed fp16's precision: fp32 accumulation gets it right."""
    x = torch.full((4096,), 1.0, dtype=torch.float16, device=device)
    # fp16 accumulation would stall at 2048 (2048 + 1 rounds back to 2048)
    assert cupipe.reduce(x, "sum").item() == 4096.0
    x = torch.full((3000,), 0.1, dtype=torch.bfloat16, device=device)
    expected = (x.float().sum()).to(torch.bfloat16)
    assert cupipe.reduce(x, "sum").item() == expected.item()
    assert cupipe.reduce(x, "mean").item() == x.float().mean().to(torch.bfloat16).item()


def test_reduce_fp32_sum_does_not_stall(device):
    """A plain running fp32 sum stalls at 2^24 (2^24 + 1 rounds back to 2^24); the result must
    be exact here, like torch.sum, for the whole tensor and along a dim."""
    n = (1 << 24) + (1 << 22)
    x = torch.ones(n, dtype=torch.float32, device=device)
    assert cupipe.reduce(x, "sum").item() == float(n)
    assert cupipe.reduce(x, "mean").item() == 1.0
    assert cupipe.reduce(x.view(1, n), "sum", 1).item() == float(n)
    xb = torch.ones(n, dtype=torch.bfloat16, device=device)
    assert cupipe.reduce(xb, "sum", dtype=torch.float32).item() == float(n)
    assert cupipe.reduce(xb, "mean").item() == 1.0


@pytest.mark.slow
def test_reduce_fp32_column_sum_does_not_stall(device):
    """Same along a strided dim (inner > 1): each of the 2 columns sums 2^24 + 2^22 ones."""
    n = (1 << 24) + (1 << 22)
    x = torch.ones((n, 2), dtype=torch.float32, device=device)
    assert cupipe.reduce(x, "sum", 0).tolist() == [float(n)] * 2
    assert cupipe.reduce(x, "mean", 0).tolist() == [1.0, 1.0]


def test_reduce_fp32_sum_accuracy(device):
    """Rounding error of an fp32 sum of 2^22 values in [0, 1): the relative error against fp64
    stays at the level of pairwise/tree summation (CPU pairwise: ~1e-7; GPU per-thread partials
    combined by trees: ~1e-6), well below that of one running sum (measured 1.2e-5 .. 1.7e-5 for
    these inputs, e.g. with numpy.cumsum in float32)."""
    g = torch.Generator().manual_seed(40)
    x = torch.rand(1 << 22, generator=g).to(device)
    for v, d in [(x, None), (x.view(-1, 8), 0), (x.view(8, -1), 1), (x.view(64, -1, 16), [0, 1])]:
        got = cupipe.reduce(v, "sum", d).double()
        want = v.double().sum() if d is None else v.double().sum(d)
        rel = ((got - want).abs() / want.abs()).max().item()
        assert rel < 3e-6, f"dim={d}: relative error {rel:.2e}"


# ----------------------------------------------------------------------------- layouts

def _noncontig(device, dtype=torch.float32):
    base = make_input((10, 24), dtype, device, seed=24)
    flat = make_input((500,), dtype, device, seed=25)
    b3 = make_input((4, 5, 6), dtype, device, seed=26)
    return [
        ("transposed", base.t()),
        ("step-slice", base[:, ::3]),
        ("rows-step", base[1::2, 2:]),
        ("storage-offset", flat[13:13 + 9 * 11].view(9, 11)),
        ("expanded", make_input((1, 7), dtype, device, seed=27).expand(5, 7)),
        ("permuted", b3.permute(2, 0, 1)),
        ("permuted-slice", b3.permute(1, 2, 0)[:, 1:5:2]),
    ]


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_reduce_noncontiguous(device, op, dtype):
    for name, x in _noncontig(device, dtype):
        dims = [None, 0, -1, list(range(x.dim()))]
        if x.dim() == 3:
            dims += [[0, 2], [1, 2], 1]
        for dim in dims:
            for keepdim in (False, True):
                before = x.clone()
                y = _check(x, op, dim, keepdim, what=name)
                assert torch.equal(x, before)
                yc = cupipe.reduce(x.contiguous(), op, dim, keepdim)
                assert_close(y, yc, atol=1e-6, rtol=1e-6, what=f"{name} vs contiguous")


# ----------------------------------------------------------------------------- 0-d and empty

@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: DTYPE_IDS[d])
def test_reduce_zero_dim(device, op, dtype):
    x = torch.tensor(0.375, dtype=dtype, device=device)
    for dim in (None, 0, -1, [0], []):
        for keepdim in (False, True):
            y = cupipe.reduce(x, op, dim, keepdim)
            ref = getattr(torch, op)(x) if dim is None else getattr(torch, op)(x, dim, keepdim)
            assert y.shape == ref.shape == torch.Size([])
            assert y.dtype == dtype
            assert y.item() == ref.item() == 0.375


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: DTYPE_IDS[d])
def test_reduce_empty(device, dtype):
    e = torch.empty((0,), dtype=dtype, device=device)
    e2 = torch.empty((0, 3), dtype=dtype, device=device)
    # sum of nothing is 0, mean of nothing is nan (like torch)
    assert cupipe.reduce(e, "sum").item() == 0
    assert math.isnan(cupipe.reduce(e, "mean").item())
    for keepdim in (False, True):
        s = cupipe.reduce(e2, "sum", 0, keepdim)
        assert torch.equal(s, torch.sum(e2, 0, keepdim)), s
        m = cupipe.reduce(e2, "mean", 0, keepdim)
        assert m.shape == torch.mean(e2, 0, keepdim).shape and bool(torch.isnan(m).all())
        # reducing the non-empty dim gives an empty result for every op
        for op in REDUCE_OPS:
            y = cupipe.reduce(e2, op, 1, keepdim)
            assert y.shape == getattr(torch, op)(e2, 1, keepdim).shape
    # amax/amin of an empty reduction raise (torch raises too)
    for op in ("amax", "amin"):
        for x, dim in [(e, None), (e2, 0), (e2, None), (e2, [0, 1])]:
            with pytest.raises(ValueError, match="empty"):
                cupipe.reduce(x, op, dim)
            with pytest.raises((IndexError, RuntimeError)):
                getattr(torch, op)(x, dim) if dim is not None else getattr(torch, op)(x)
    # the process/device is still fine afterwards
    assert cupipe.reduce(torch.ones(3, dtype=dtype, device=device), "sum").item() == 3


# ----------------------------------------------------------------------------- NaN / inf

@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: DTYPE_IDS[d])
def test_reduce_nan_propagation(device, op, dtype):
    x = make_input((6, 9), dtype, "cpu", seed=28)
    x[0, 0] = float("nan")   # first element of a row
    x[2, 4] = float("nan")   # middle
    x[4, 8] = float("nan")   # last
    x[5, :] = float("nan")   # whole row
    x[1, 3] = float("inf")
    x[3, 5] = -float("inf")
    x = x.to(device)
    for dim in (None, 0, 1, [0, 1]):
        y = cupipe.reduce(x, op, dim)
        ref = reduce_ref(x, op, dim)
        assert torch.equal(torch.isnan(y), torch.isnan(ref)), f"{op} dim={dim}: {y} vs {ref}"
        assert_close(y, ref, atol=1e-2, rtol=1e-2, equal_nan=True, what=f"{op} dim={dim}")
    if op in ("amax", "amin"):
        assert bool(torch.isnan(cupipe.reduce(x, op, 1)[[0, 2, 4, 5]]).all())
        assert not bool(torch.isnan(cupipe.reduce(x, op, 1)[[1, 3]]).any())


# ----------------------------------------------------------------------------- knobs

# One test per mechanism and stage count: each compiles its own kernel instances on first use,
# so xdist spreads the compiles over its workers.
@pytest.mark.parametrize("stages", (0, 1, 2, 3, 4, 8))
@pytest.mark.parametrize("mechanism", cupipe.MECHANISMS)
def test_reduce_mechanisms(device, mechanism, stages):
    if device == "cuda" and mechanism == "tma" and not tma_supported():
        pytest.skip("tma needs sm_90")
    x = make_input((37, 301), torch.float32, device, seed=29)
    for op in REDUCE_OPS:
        for dim in (None, 0, 1):
            y = cupipe.reduce(x, op, dim, mechanism=mechanism, stages=stages)
            atol, rtol = _tolerance(op, torch.float32, x.numel())
            assert_close(y, reduce_ref(x, op, dim), atol=atol, rtol=rtol,
                         what=f"{mechanism} stages={stages} {op} dim={dim}")


# Shapes that reach each path of the CUDA kernels: packed short rows (vector-aligned or not),
# split long rows, column chunks of every width (32 to 256 vectors; 16-byte aligned rows or not,
# several chunks per row with a partial last one, partial last vector), several outer slices,
# outputs split in parts;
# and a storage offset that misaligns the data pointer.
LAYOUT_CASES = [
    ((257, 64), 1), ((300, 37), 1), ((5, 9000), 1), ((3, 40000), -1),
    ((300, 1000), 0), ((301, 1003), 0),  # small column splits: tiles of a row or two, two a part
    ((130, 129), 0), ((4, 67, 300), 1), ((2, 33, 5), 1),
    ((20, 4500), 0), ((3, 40, 1500), 1), ((9, 2050), 0),
    ((1500, 700), 0),  # many parts of many columns: the column partials pass, two threads per column
    ((5000, 301), 0),  # 40 parts of 301 columns: four threads per column, a partial last block
    ((37, 4096), 1), ((11, 6000), 1),  # packed rows over 2 KiB: several warps per row
    ((10, 1300), 1),  # rows of ~5 KiB: three rows per wide-rows block, the last block one row
    ((1031, 128), 1), ((4099, 16), 1),  # packed rows of up to 32 vectors: a thread per row
    ((777, 3), 1), ((333, 255), 1),  # the same at any alignment: rows across 2 vectors, and 33 of them
    ((1001, 2), 1), ((999, 7), 1),  # rows under a vector: a thread a row, its vector masked
    ((2, 70001), 1),  # rows over 64 KiB: tma/1 takes 64 KiB stages
    ((2, 600, 6), 1), ((3, 500, 2100), 1),  # columns of 4- and 8-byte units (fp16, fp32): dense; boxed
]


@pytest.mark.parametrize("mechanism", cupipe.MECHANISMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64],
                         ids=lambda d: DTYPE_IDS[d])
def test_reduce_layouts_every_mechanism(device, mechanism, dtype):
    if device == "cuda" and mechanism == "tma" and not tma_supported():
        pytest.skip("tma needs sm_90")
    for i, (shape, dim) in enumerate(LAYOUT_CASES):
        n = math.prod(shape)
        for offset in (0, 1):
            x = make_input((n + offset,), dtype, device, seed=40 + i)[offset:].view(shape)
            for stages in (1, 2, 4):
                for op in ("sum", "amax"):
                    y = cupipe.reduce(x, op, dim, mechanism=mechanism, stages=stages)
                    atol, rtol = _tolerance(op, y.dtype, shape[dim])
                    assert_close(y, reduce_ref(x, op, dim), atol=atol, rtol=rtol,
                                 what=f"{mechanism} stages={stages} {op} {shape} dim={dim} "
                                      f"offset={offset} {dtype}")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: DTYPE_IDS[d])
def test_reduce_short_rows(device, dtype):
    """Rows under a 16-byte vector (every length from 1, the copy class, to a vector's elements less
    one; the vector itself as a control): the CUDA kernel's thread per 16 / esz rows from an aligned
    x, rows counts that leave a partial last group and tile, a NaN and an inf in some rows, results
    in x's dtype and in another (dtype=), outputs poisoned first; misaligned x (the per-row span
    path) for the same rows. Bit-identical repeats."""
    from conftest import poison_allocator
    esz = torch.empty((), dtype=dtype).element_size()
    ve = 16 // esz
    for r in range(1, ve + 1):
        outer = 40_007 if r <= 2 else 9_001  # several 32 KiB tiles, the last one partial
        for offset in (0, 1):
            base = make_input((outer * r + offset,), dtype, "cpu", seed=70 + r)
            base[offset + 5 * r] = float("nan")
            base[offset + 11 * r + r - 1] = float("inf")
            x = base.to(device)[offset:].view(outer, r)
            for op in REDUCE_OPS:
                for odt in (None, torch.float32 if dtype != torch.float32 else torch.float64):
                    if op in ("amax", "amin") and odt is not None:
                        continue  # torch.amax has no dtype
                    poison_allocator(outer * 8, device)
                    y = cupipe.reduce(x, op, 1, dtype=odt)
                    ref = reduce_ref(x, op, 1, dtype=odt)
                    atol, rtol = _tolerance(op, y.dtype, r)
                    assert_close(y, ref, atol=atol, rtol=rtol, equal_nan=True,
                                 what=f"{op} rows of {r} offset={offset} {dtype} dtype={odt}")
                    assert torch.equal(torch.isnan(y), torch.isnan(ref)), f"{op} rows of {r}: NaNs differ"
                    if odt is None:
                        assert_close(cupipe.reduce(x, op, 1), y, atol=0, rtol=0, equal_nan=True,
                                     what=f"a repeat of {op} rows of {r}")


# (outer, r, inner) of the direct column kernel (sync on 16-byte aligned columns; the table's choice
# on sm_90): one-vector rows (a warp's shuffles), chunks narrowed for few outer slices, chunks that
# are not a power of two (25 vectors), rows wider than a block (750 vectors: three chunks), r below
# a batch of loads and of 1, r split into parts, many outer slices (several a block, the last block's
# partly past outer; parts of a warp each for one-vector rows of 20001).
DIRECT_COLUMNS = [(3, 1000, 4), (1, 5003, 64), (7, 999, 100), (2, 333, 3000), (64, 3, 256), (5, 1, 64),
                  (1, 100_003, 16), (1500, 37, 32), (3001, 41, 4), (20_001, 9, 4), (9001, 7, 8)]


def _check_sync_columns(x, what):
    """x (outer, r, inner) over dim 1 under auto and every stage count of sync, every op, against
    torch: NaN columns alike, outputs poisoned first, bit-identical repeats."""
    from conftest import poison_allocator
    outer, r, inner = x.shape
    for stages in (0, 1, 2, 3):
        mech = "auto" if stages == 0 else "sync"
        for op in REDUCE_OPS:
            poison_allocator(outer * inner * 8, x.device.type)
            y = cupipe.reduce(x, op, 1, mechanism=mech, stages=stages)
            ref = reduce_ref(x, op, 1)
            atol, rtol = _tolerance(op, y.dtype, r)
            case = f"{mech} stages={stages} {op} {what}"
            assert torch.equal(torch.isnan(y), torch.isnan(ref)), f"{case}: NaN columns differ"
            assert_close(y, ref, atol=atol, rtol=rtol, equal_nan=True, what=case)
            again = cupipe.reduce(x, op, 1, mechanism=mech, stages=stages)
            assert torch.equal(y.nan_to_num(), again.nan_to_num()), f"not deterministic: {case}"


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: DTYPE_IDS[d])
def test_reduce_direct_columns(device, dtype):
    """The direct column kernel through every stage count of sync (4, 8, 16 loads in flight) and
    auto, every op, against torch: a NaN and an inf in some columns, outputs poisoned first,
    bit-identical repeats; and the tma ring on the same input agreeing."""
    esz = torch.empty((), dtype=dtype).element_size()
    for i, (outer, r, inner) in enumerate(DIRECT_COLUMNS):
        inner = inner * 4 // esz  # the same bytes a row for every dtype (16-byte multiples)
        base = make_input((outer, r, inner), dtype, "cpu", seed=90 + i)
        base[0, r // 2, 1] = float("nan")
        base[outer - 1, r - 1, inner - 1] = float("inf")
        x = base.to(device)
        _check_sync_columns(x, f"{(outer, r, inner)} {dtype}")
        if device == "cuda" and tma_supported():
            ring = cupipe.reduce(x, "sum", 1, mechanism="tma", stages=1)
            atol, rtol = _tolerance("sum", ring.dtype, r)
            assert_close(cupipe.reduce(x, "sum", 1), ring, atol=2 * atol, rtol=2 * rtol, equal_nan=True,
                         what=f"direct against the ring {(outer, r, inner)} {dtype}")


# (outer, r) of narrow columns (rows of 2 or 4 elements under 16 bytes) that wrap into 16-byte vectors
# on CUDA: one slice of many rows (r split in parts), many slices of a few vectors (several a block),
# one vector a slice, r of whole vectors. Odd r, and a start a row past a vector, read rows of 4 or 8
# bytes as one vector each (the narrow kernels); a start off a row's size, the ring.
WRAPPED = [(3, 1000), (1, 100_002), (2001, 8), (5, 4), (700, 64), (3, 41)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=lambda d: DTYPE_IDS[d])
def test_reduce_wrapped_columns(device, dtype):
    """Columns of 2 or 4 elements narrower than a vector, through auto and every stage count of sync
    (the wrap kernel where the rows wrap into vectors, else the narrow one for rows of 4 or 8 bytes),
    every op, against torch: a NaN and an inf, outputs poisoned first, bit-identical repeats; views of
    the same rows a row and an element past the start too."""
    esz = torch.empty((), dtype=dtype).element_size()
    for inner in (2, 4):
        if inner * esz >= 16:
            continue
        for i, (outer, r) in enumerate(WRAPPED):
            base = make_input((outer * r * inner + 8,), dtype, "cpu", seed=120 + i)
            base[inner * (r // 2) + 1] = float("nan")
            base[outer * r * inner - 1] = float("inf")
            flat = base.to(device)
            for offset in (0, inner, 1):  # (inner: rows on their own size's boundaries only; 1: off a row's)
                x = flat[offset:offset + outer * r * inner].view(outer, r, inner)
                _check_sync_columns(x, f"{(outer, r, inner)} offset {offset} {dtype}")
    if device == "cuda" and tma_supported() and esz == 2:  # sm_90's table: sync, the wrap kernel
        x = make_input((700, 64, 4), dtype, device, seed=130)
        for op, name in (("sum", "reduce_cols_wrap_kernel"), ("var", "reduce_state_cols_wrap_kernel"),
                         ("argmax", "reduce_state_cols_wrap_kernel")):
            kernels = [k for k, _ in cupipe.explain("reduce", x, op, 1).kernels]
            assert kernels and kernels[0].startswith(name), (op, kernels)
            # odd r: no wrap; rows of 8 bytes read as one vector each
            kernels = [k for k, _ in cupipe.explain("reduce", x[:, :41], op, 1).kernels]
            assert kernels and kernels[0].startswith(name.replace("wrap", "narrow")), (op, kernels)


@pytest.mark.parametrize("shape", [(40, 300, 301), (16, 1000, 301), (4, 1000, 1024), (1500, 301), (40000, 160)],
                         ids=lambda s: "x".join(map(str, s)))
def test_reduce_column_partials_slices(device, shape):
    """Columns split in parts (on a 132-SM GPU about 7, 24, 63, 375 and 393 of them) so that the
    CUDA partials pass gives each output 1, 2, 4 or 8 threads (slices of the parts, combined in
    order); 301 columns leave a partial last block; rows of 640 bytes take the congruent layout.
    Every op; bit-identical repeats."""
    x = make_input(shape, torch.float32, device, seed=61)
    d = x.dim() - 2  # the reduced dim: the middle one of (outer, r, inner), 0 of (r, inner)
    for op in REDUCE_OPS:
        y = cupipe.reduce(x, op, d)
        atol, rtol = _tolerance(op, y.dtype, shape[d])
        assert_close(y, reduce_ref(x, op, d), atol=atol, rtol=rtol, what=f"{op} {shape}")
        assert torch.equal(y, cupipe.reduce(x, op, d)), f"not deterministic: {op} {shape}"


# (shape, reduced dim, dtype) of congruent columns: a case a test, so that xdist spreads their first-use
# compiles (each case its dtype's ring instances for every stage count).
CONGRUENT = [((300, 1024), 0, torch.float32),   # 4 KiB rows, auto: tma/3 on sm_90
             ((97, 2048), 0, torch.float16),
             ((70, 512), 0, torch.float64),
             ((3, 100, 64), 1, torch.float32),  # 256-byte rows: narrow chunks, several outer slices
             ((150, 8192), 0, torch.bfloat16)]  # two 8 KiB chunks per row


@pytest.mark.parametrize("case", range(len(CONGRUENT)), ids=lambda i: "x".join(map(str, CONGRUENT[i][0])))
@pytest.mark.parametrize("mechanism", cupipe.MECHANISMS)
def test_reduce_columns_congruent(device, mechanism, case):
    """Columns whose rows are a multiple of 128 bytes (the CUDA kernel's congruent layout: each tile
    row lands in shared memory at its source's offset modulo 128, the tile at x's): data pointers
    0, 16, 48 and 112 bytes past a 128-byte line, and 4 bytes (not 16-byte aligned: the other
    layout); chunks of 512 bytes to 16 KiB; every stage count; a NaN column; bit-identical repeats."""
    if device == "cuda" and mechanism == "tma" and not tma_supported():
        pytest.skip("tma needs sm_90")
    shape, dim, dtype = CONGRUENT[case]
    esz = torch.empty((), dtype=dtype).element_size()
    n = math.prod(shape)
    for off_bytes in (0, 16, 48, 112, 4):
        if off_bytes % esz:
            continue
        off = off_bytes // esz
        x = make_input((n + off,), dtype, device, seed=70 + case)[off:].view(shape)
        x.view(-1)[5 * shape[-1] + 3] = float("nan")  # row 5 of the first slice, column 3
        for stages in (0, 1, 2, 3):
            for op in ("sum", "amax"):
                y = cupipe.reduce(x, op, dim, mechanism=mechanism, stages=stages)
                ref = reduce_ref(x, op, dim)
                atol, rtol = _tolerance(op, y.dtype, shape[dim])
                assert torch.equal(torch.isnan(y), torch.isnan(ref)), f"{op} {shape} {dtype}: NaN columns differ"
                assert_close(y, ref, atol=atol, rtol=rtol, equal_nan=True,
                             what=f"{mechanism} stages={stages} {op} {shape} {dtype} offset={off_bytes} B")
                again = cupipe.reduce(x, op, dim, mechanism=mechanism, stages=stages)
                assert torch.equal(y.nan_to_num(), again.nan_to_num()), f"not deterministic: {op} {shape}"


@pytest.mark.parametrize("mechanism", cupipe.MECHANISMS)
def test_reduce_wide_rows(device, mechanism):
    """Rows of 4-32 KiB along the last dim (the CUDA wide-rows kernel: a block per tile of one to
    three rows, several warps per row): every op with NaN and -inf in some rows, 2-byte and fp64
    inputs, row counts that leave a partial last tile, every stage count; bit-identical repeats."""
    if device == "cuda" and mechanism == "tma" and not tma_supported():
        pytest.skip("tma needs sm_90")
    cases = [((37, 4096), torch.float32), ((7, 1300), torch.float32), ((5, 2056), torch.float32),
             ((9, 3000), torch.bfloat16), ((6, 4096), torch.float16), ((4, 2048), torch.float64)]
    for i, (shape, dtype) in enumerate(cases):
        x = make_input(shape, dtype, device, seed=90 + i)
        x[1, shape[1] // 3] = float("nan")
        x[2, -1] = -float("inf")
        for stages in (0, 1, 2, 8):
            for op in REDUCE_OPS:
                y = cupipe.reduce(x, op, -1, mechanism=mechanism, stages=stages)
                ref = reduce_ref(x, op, -1)
                atol, rtol = _tolerance(op, y.dtype, shape[1])
                assert torch.equal(torch.isnan(y), torch.isnan(ref)), f"{op} {shape} {dtype}: NaN rows differ"
                assert_close(y, ref, atol=atol, rtol=rtol, equal_nan=True,
                             what=f"{mechanism} stages={stages} {op} {shape} {dtype}")
                again = cupipe.reduce(x, op, -1, mechanism=mechanism, stages=stages)
                assert torch.equal(y.nan_to_num(), again.nan_to_num()), f"not deterministic: {op} {shape}"


@pytest.mark.parametrize("mechanism", cupipe.MECHANISMS)
def test_reduce_chunked_rows(device, mechanism):
    """Whole tensors and a few long rows at one stage (the CUDA chunked path: a block per
    stage-sized chunk of a row, then the partials pass): last chunks that end past a 16-byte
    multiple or hold only a few elements, every dtype, several dims at once; each case clean and
    again with NaN in the last chunk's tail and -inf inside; every op; bit-identical repeats."""
    if device == "cuda" and mechanism == "tma" and not tma_supported():
        pytest.skip("tma needs sm_90")
    cases = [((3 * 16384 + 3,), None, torch.float32),    # 64 KiB chunks, the last one 3 elements
             ((11137,), None, torch.float32),            # 32 KiB chunks, the last 736 vectors + 1
             ((2 * 32768 + 7,), None, torch.float16),
             ((40005,), None, torch.bfloat16),
             ((2 * 8192 + 1,), None, torch.float64),
             ((3, 20000), -1, torch.float32),            # a few long rows
             ((2, 40000), 1, torch.bfloat16),
             ((4, 3, 5000), [1, 2], torch.float32)]
    for i, (shape, dim, dtype) in enumerate(cases):
        for poisoned in (False, True):
            x = make_input(shape, dtype, device, seed=110 + i)
            if poisoned:
                flat = x.view(-1)
                flat[-1] = float("nan")
                flat[flat.numel() // 2] = -float("inf")
            for op in REDUCE_OPS:
                y = cupipe.reduce(x, op, dim, mechanism=mechanism, stages=1)
                ref = reduce_ref(x, op, dim)
                atol, rtol = _tolerance(op, y.dtype, _n_reduced(shape, dim))
                assert_close(y, ref, atol=atol, rtol=rtol, equal_nan=True,
                             what=f"{mechanism} {op} {shape} dim={dim} {dtype} poisoned={poisoned}")
                again = cupipe.reduce(x, op, dim, mechanism=mechanism, stages=1)
                assert torch.equal(y.nan_to_num(), again.nan_to_num()) and \
                    torch.equal(y.isnan(), again.isnan()), f"not deterministic: {op} {shape} {dtype}"


@pytest.mark.parametrize("mechanism", ["primitives", "cg", "barrier", "specialized", "tma"])
@pytest.mark.parametrize("tile_bytes", [2048, 8192, 32768])
def test_reduce_stage_sizes(device, mechanism, tile_bytes):
    """The private _reduce_ex takes the stage size (the benchmark's tile sweep): every layout
    path at stage sizes other than the default, with packed rows of several sizes per tile and
    column tiles of 4 to 64 rows."""
    if device != "cuda":
        pytest.skip("_reduce_ex is CUDA-only")
    if mechanism == "tma" and not tma_supported():
        pytest.skip("tma needs sm_90")
    for i, (shape, dim) in enumerate(LAYOUT_CASES + [((9, 5000), 1), ((70, 513), 0)]):
        x = make_input(shape, torch.float32, device, seed=60 + i)
        for stages in (1, 3):
            y = torch.ops.cupipe._reduce_ex(x, "sum", [dim], False, mechanism, stages, tile_bytes)
            atol, rtol = _tolerance("sum", torch.float32, shape[dim])
            assert_close(y, reduce_ref(x, "sum", dim), atol=atol, rtol=rtol,
                         what=f"{mechanism} stages={stages} tile={tile_bytes} {shape} dim={dim}")


@pytest.mark.parametrize("mechanism", ["primitives", "specialized"])
def test_reduce_block_counts(device, mechanism):
    """_reduce_ex's `blocks` sets the main pass's grid (the sweep's oversubscription study): one
    block, a few, and more blocks than the device holds at once must all give the same sums,
    and the same bits on a repeat."""
    if device != "cuda":
        pytest.skip("_reduce_ex is CUDA-only")
    cases = LAYOUT_CASES + [((3, 1 << 20), 1), ((1 << 21,), 0), ((64, 3000, 40), 1)]
    for i, (shape, dim) in enumerate(cases):
        x = make_input(shape, torch.float32, device, seed=80 + i)
        atol, rtol = _tolerance("sum", torch.float32, shape[dim])
        for blocks in (1, 5, 3000):
            y = torch.ops.cupipe._reduce_ex(x, "sum", [dim], False, mechanism, 2, 8192, blocks)
            assert_close(y, reduce_ref(x, "sum", dim), atol=atol, rtol=rtol,
                         what=f"{mechanism} blocks={blocks} {shape} dim={dim}")
            again = torch.ops.cupipe._reduce_ex(x, "sum", [dim], False, mechanism, 2, 8192, blocks)
            assert torch.equal(y, again), f"not deterministic: blocks={blocks} {shape} dim={dim}"


def test_reduce_stage_size_errors(device):
    if device != "cuda":
        pytest.skip("_reduce_ex is CUDA-only")
    x = torch.randn(100, device=device)
    with pytest.raises(ValueError, match="tile_bytes"):
        torch.ops.cupipe._reduce_ex(x, "sum", None, False, "primitives", 2, 1000)
    with pytest.raises(ValueError, match="blocks"):
        torch.ops.cupipe._reduce_ex(x, "sum", None, False, "primitives", 2, 0, -1)
    with pytest.raises(RuntimeError, match="shared memory"):
        torch.ops.cupipe._reduce_ex(x, "sum", None, False, "primitives", 8, 65536)


@pytest.mark.slow
def test_reduce_over_2_31_elements(device):
    """64-bit indexing: 2^31 + 1040 fp16 elements (4 GiB); the extreme values sit beyond
    element 2^31, and a column reduction whose offsets pass 2^31 too."""
    if device != "cuda":
        pytest.skip("a 4 GiB CPU reference is too slow for the suite")
    n = (1 << 31) + 1040
    g = torch.Generator(device=device).manual_seed(7)
    x = torch.rand(n, generator=g, device=device, dtype=torch.float32).to(torch.float16)
    x[n - 3] = 4.0
    x[n - 7] = -4.0
    assert cupipe.reduce(x, "amax").item() == 4.0
    assert cupipe.reduce(x, "amin").item() == -4.0
    expected = x.sum(dtype=torch.float64).item()
    got = cupipe.reduce(x, "sum", dtype=torch.float32).item()
    assert abs(got - expected) <= 1e-4 * abs(expected), (got, expected)
    cols = x[: (1 << 31)].view(1 << 16, 1 << 15)
    assert_close(cupipe.reduce(cols, "amax", 0), cols.amax(0), atol=0, rtol=0, what="cols amax")
    del x, cols
    torch.cuda.empty_cache()


@pytest.mark.slow
@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_large(device, op):
    x = make_input((1 << 22,), torch.float32, device, seed=30)
    _check(x, op, None, False)
    x2 = x.view(1024, 4096)
    _check(x2, op, 0, False)
    _check(x2, op, 1, False)


# ----------------------------------------------------------------------------- gradients

GRAD_DIMS = [None, 0, -1, [0, 2], [1, 2], [0, 1, 2]]


@pytest.mark.parametrize("keepdim", [False, True], ids=["nokeep", "keep"])
@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_grad_matches_torch(device, op, keepdim):
    for dim in GRAD_DIMS:
        for dtype in (torch.float32, torch.float64, torch.bfloat16):
            x = make_input((3, 4, 5), dtype, device, seed=31).requires_grad_()
            y = cupipe.reduce(x, op, dim, keepdim)
            g = make_input(y.shape, dtype, device, seed=32)
            gx, = torch.autograd.grad(y, x, g)
            xr = x.detach().clone().requires_grad_()
            yr = getattr(torch, op)(xr, dim, keepdim) if dim is not None else \
                getattr(torch, op)(xr, list(range(3)), keepdim)
            gr, = torch.autograd.grad(yr, xr, g)
            assert gx.dtype == dtype
            atol, rtol = tol(dtype, 1)
            assert_close(gx, gr, atol=atol, rtol=rtol, what=f"grad {op} dim={dim} {dtype}")


@pytest.mark.parametrize("op", ["amax", "amin"])
def test_reduce_grad_ties_split_evenly(device, op):
    """Like torch: the gradient of amax/amin is split evenly among the tied extrema."""
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0],
                      [2.0, 2.0, 2.0, 2.0],
                      [-1.0, 5.0, -1.0, 0.5]], dtype=torch.float64, device=device)
    for dim in (None, 0, 1, [0, 1]):
        for keepdim in (False, True):
            xa = x.clone().requires_grad_()
            y = cupipe.reduce(xa, op, dim, keepdim)
            g = make_input(y.shape, torch.float64, device, seed=33) + 2
            gx, = torch.autograd.grad(y, xa, g)
            xr = x.clone().requires_grad_()
            yr = getattr(torch, op)(xr, dim if dim is not None else [0, 1], keepdim)
            gr, = torch.autograd.grad(yr, xr, g)
            assert_close(gx, gr, atol=1e-12, rtol=1e-12, what=f"ties {op} dim={dim} keep={keepdim}")


def test_reduce_grad_noncontiguous_and_dtype(device):
    base = make_input((8, 6), torch.float32, device, seed=34)
    x = base.t()[:, ::2].detach().requires_grad_()  # (6, 4), non-contiguous leaf
    y = cupipe.reduce(x, "sum", 0, dtype=torch.float64)
    gx, = torch.autograd.grad(y, x, torch.ones_like(y))
    assert gx.dtype == torch.float32 and torch.equal(gx, torch.ones_like(x))
    y = cupipe.reduce(x, "mean", [0, 1], dtype=torch.float16)
    gx, = torch.autograd.grad(y, x)
    assert_close(gx, torch.full_like(x, 1 / 24), atol=1e-6, rtol=1e-3, what="mean grad")


def test_reduce_grad_empty(device):
    x = torch.empty((0, 4), dtype=torch.float64, device=device, requires_grad=True)
    for op, dim in [("sum", 0), ("sum", None), ("mean", 1), ("amax", 1), ("amin", 1)]:
        y = cupipe.reduce(x, op, dim)
        gx, = torch.autograd.grad(y, x, torch.ones_like(y))
        assert gx.shape == x.shape
    y = cupipe.reduce(x, "sum", 0)
    gx, = torch.autograd.grad(y, x, torch.ones_like(y))
    assert gx.shape == (0, 4)


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_reduce_gradcheck(device, op):
    # distinct values (a permutation scaled), so amax/amin have no ties
    g = torch.Generator().manual_seed(35)
    x = (torch.randperm(60, generator=g).double() / 7 - 4).reshape(3, 4, 5).to(device)
    x.requires_grad_()
    for dim in (None, 0, -1, [0, 2], [1, 2]):
        for keepdim in (False, True):
            assert torch.autograd.gradcheck(lambda t: cupipe.reduce(t, op, dim, keepdim), (x,))
    x0 = torch.tensor(1.5, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: cupipe.reduce(t, op), (x0,))
