"""The state reductions of cupipe.reduce (var, std, argmax, argmin, logsumexp, norm) against torch:
every layout path of the CUDA kernel (packed rows, split rows, dense and boxed columns, parts with
the partials pass, misaligned data), every mechanism, dtypes, ties and NaN, determinism, gradients,
errors, and the torch integrations (opcheck, compile, vmap, graphs)."""
from __future__ import annotations

import math

import pytest
import torch

import cupipe
from conftest import FLOAT_DTYPES, assert_close, make_input, poison_allocator, tma_supported

STATE_OPS = ["var", "std", "argmax", "argmin", "logsumexp", "norm"]
NORM_ORDS = [2, 1, math.inf, -math.inf, 0, 3.5, -1]
DTYPE_IDS = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64"}


def torch_ref(x, op, dim=None, keepdim=False, *, correction=1, ord=2, dtype=None):
    """torch's op, computed in fp64 and cast to the result dtype (indices: on x itself)."""
    dims = list(range(x.dim())) if dim is None or dim == [] else dim
    if op in ("argmax", "argmin"):
        d = None if dim is None else (dim[0] if isinstance(dim, list) else dim)
        return getattr(torch, op)(x, d, keepdim=keepdim)
    xd = x.double()
    if op == "var":
        r = torch.var(xd, dims, correction=correction, keepdim=keepdim)
    elif op == "std":
        r = torch.std(xd, dims, correction=correction, keepdim=keepdim)
    elif op == "logsumexp":
        r = torch.logsumexp(xd, dims, keepdim=keepdim)
    else:
        r = torch.linalg.vector_norm(xd, ord, dims, keepdim)
    return r.to(dtype or x.dtype)


def _tol(dtype, op, ord=2):
    if op in ("argmax", "argmin"):
        return 0.0, 0.0
    t = {torch.float64: 1e-10, torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    if op == "norm" and not (ord in (0, 1, 2) or math.isinf(ord)):
        t *= 4  # the p-th power and its root
    return t, t


def check(x, op, dim=None, keepdim=False, what="", **kw):
    got = cupipe.reduce(x, op, dim, keepdim, **kw)
    kw = {k: v for k, v in kw.items() if k not in ("mechanism", "stages")}
    exp = torch_ref(x, op, dim, keepdim, **kw)
    atol, rtol = _tol(x.dtype, op, kw.get("ord", 2))
    assert_close(got, exp, atol=atol, rtol=rtol, equal_nan=True,
                 what=f"{what} {op} {tuple(x.shape)} stride={x.stride()} dim={dim} keepdim={keepdim} {x.dtype} {kw}")
    return got


# (shape, dims): two runs of reduced dims, the inner one innermost (on CUDA one folded pass of the
# direct state kernel where its rows are whole 16-byte vectors): a fold of one vector and of two
# chunks (partials), parts of a long r, an outer kept dim, three runs (the fold, then a copy).
STATE_FOLDED = [((9, 13, 64), [0, 2]), ((7, 300, 8), [0, 2]), ((5, 3, 2000), [0, 2]), ((3000, 2, 1028), [0, 2]),
                ((3, 20, 5, 16), [1, 3]), ((4, 3, 5, 6, 16), [0, 2, 4])]


@pytest.mark.skipif(not torch.cuda.is_available() or not cupipe.cuda_available(), reason="needs a GPU and a CUDA build")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=lambda d: DTYPE_IDS[d])
@pytest.mark.parametrize("op", ["var", "std", "logsumexp", "norm"])
def test_state_folded_runs(op, dtype):
    """var, std, logsumexp and norm over two runs of reduced dims in one pass: against torch in fp64
    on data far from zero (the slice's shift), outputs poisoned, bit-identical repeats, keepdim; the
    plan names the fold under auto and sync; under tma and at an odd offset x is copied first."""
    esz = torch.empty((), dtype=dtype).element_size()
    for i, (shape, dims) in enumerate(STATE_FOLDED):
        buf = make_input((math.prod(shape) + 1,), dtype, "cuda", seed=120 + i) + 100
        x = buf[:-1].view(shape)
        folds = shape[-1] * esz % 16 == 0 and len(dims) == 2
        plan = cupipe._C.layout_plan("reduce", x, dim=dims, reduce_op=op)
        assert ("reduced too" in plan) == folds, plan
        assert "reduced too" not in cupipe._C.layout_plan("reduce", x, dim=dims, reduce_op=op, mechanism="tma")
        if folds:  # explain: the folded plan, sync, the fold kernel
            e = cupipe.explain("reduce", x, op, dims)
            assert "reduced too" in e.layout and e.mechanism == "sync", str(e)
            assert any(k.startswith("reduce_state_cols_fold_kernel") for k, _ in e.kernels), e.kernels
        kws = [dict(correction=1), dict(correction=0)] if op in ("var", "std") else \
              [dict(ord=2), dict(ord=1), dict(ord=math.inf)] if op == "norm" else [{}]
        for kw in kws:
            for keepdim in (False, True):
                poison_allocator(4 * x.numel() * esz + 4096, "cuda")
                got = check(x, op, dims, keepdim, what="folded", **kw)
            assert torch.equal(got, cupipe.reduce(x, op, dims, True, **kw)), "not deterministic"
            check(x, op, dims, what="folded sync/3", mechanism="sync", stages=3, **kw)
            if tma_supported():
                check(x, op, dims, what="folded under tma (a copy)", mechanism="tma", **kw)
            check(buf[1:].view(shape), op, dims, what="odd offset (a copy)", **kw)


DIM_CASES = [((17,), None), ((5, 7), 0), ((5, 7), 1), ((3, 4, 5), 1), ((3, 4, 5), [0, 2]), ((3, 4, 5), [1, 2]),
             ((2, 3, 4, 5), [1, 3]), ((2, 3, 4, 5), None), ((64, 257), -1), ((257, 64), 0), ((1, 1, 9), [0, 2]),
             ((24, 1040), 0)]  # the last: col_quads in every 2- and 4-byte dtype


@pytest.mark.parametrize("keepdim", [False, True], ids=["nokeep", "keep"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: DTYPE_IDS[d])
@pytest.mark.parametrize("op", STATE_OPS)
def test_state_ops_match_torch(device, op, dtype, keepdim):
    for i, (shape, dim) in enumerate(DIM_CASES):
        if op in ("argmax", "argmin") and isinstance(dim, list) and len(dim) > 1:
            dim = dim[:1]
        x = make_input(shape, dtype, device, seed=i, low=-2, high=2)
        poison_allocator(4 * x.numel() + 4096, device)
        if op == "norm":
            for o in NORM_ORDS:
                check(x, op, dim, keepdim, ord=o)
        elif op in ("var", "std"):
            for c in (1, 0, 2, 0.5):
                check(x, op, dim, keepdim, correction=c)
        else:
            check(x, op, dim, keepdim)


# Shapes that reach each path of reduce_state_kernel: packed rows (one lane or groups per row,
# rows spanning tiles' ends), split rows (one part, several parts: the partials pass), dense
# columns (inner up to 256, narrow and odd), boxed columns (wider rows, a partial last chunk),
# column parts, four adjacent columns a thread (col_quads: aligned rows of a multiple of 4 columns,
# more than 3 x 256 wide), boxed rows of a multiple of 128 bytes (a tile layout may place them by
# x's offset modulo 128, which the 16-byte storage offset moves); with a storage offset that
# misaligns the data (each row at its own shift, quads off).
LAYOUT_CASES = [((257, 64), 1), ((300, 37), 1), ((4, 9000), 1), ((3, 40000), -1), ((2, 300001), 1),
                ((300, 3), 0), ((1000, 1003), 0), ((4, 67, 300), 1), ((2, 33, 5), 1), ((20000, 7), 0),
                ((9, 2050), 0), ((3, 70, 600), 1), ((1, 5000, 16), 1), ((4099, 1), 0),
                ((37, 1024), 0), ((5, 3000), 0), ((3, 50, 1028), 1), ((33, 2048), 0), ((2, 21, 3072), 1)]


@pytest.mark.parametrize("op", STATE_OPS)
def test_state_layouts(device, op):
    for i, (shape, dim) in enumerate(LAYOUT_CASES):
        n = math.prod(shape)
        for offset in (0, 1, 4):
            x = make_input((n + offset,), torch.float32, device, seed=50 + i)[offset:].view(shape)
            check(x, op, dim, what=f"offset={offset}")


# One test per mechanism, dtype and stage count (xdist spreads their first-use compiles).
@pytest.mark.parametrize("dtype, stages", [(torch.float32, 1), (torch.float32, 2), (torch.bfloat16, 2),
                                           (torch.float64, 2)], ids=["f32-1", "f32-2", "bf16-2", "f64-2"])
@pytest.mark.parametrize("mechanism", cupipe.MECHANISMS)
def test_state_every_mechanism(device, mechanism, dtype, stages):
    if device == "cuda" and mechanism == "tma" and not tma_supported():
        pytest.skip("tma needs sm_90")
    for i, (shape, dim) in enumerate([((37, 301), 1), ((37, 301), 0), ((3, 30000), 1), ((2, 9, 700), 1),
                                      ((40, 2048), 0)]):
        x = make_input(shape, dtype, device, seed=70 + i)
        for op in STATE_OPS:
            check(x, op, dim, mechanism=mechanism, stages=stages, what=f"{mechanism}/{stages}")


def check_direct(x, argmax_ok, what):
    """Every state op over dim 1 under sync with 1, 2 and 3 stages (the direct kernels' 4, 8 and 16
    loads in flight) against torch, bit-identical on repeat; argmax_ok(result) checks the planted
    ties and NaN."""
    for stages in (1, 2, 3):
        for op in STATE_OPS:
            got = check(x, op, 1, mechanism="sync", stages=stages, what=f"{what} sync/{stages}")
            again = cupipe.reduce(x, op, 1, mechanism="sync", stages=stages)
            assert torch.equal(got.nan_to_num(), again.nan_to_num()), f"not deterministic: {op} {tuple(x.shape)}"
            if op == "argmax":
                assert argmax_ok(got), f"{what} sync/{stages}: argmax {got.tolist()[:8]} {tuple(x.shape)}"
        check(x, "norm", 1, mechanism="sync", stages=stages, ord=math.inf, what=f"{what} sync/{stages}")


# (outer, r, inner) of the direct column plan (sync on 16-byte aligned columns): one-vector rows,
# narrowed chunks, a chunk of 25 vectors, rows wider than a block, r under a batch, r split in parts,
# many short outer slices (several a block, the last block's partly past outer; parts of a warp each
# for rows of one and two vectors).
DIRECT_COLUMNS = [(3, 1000, 4), (1, 5003, 64), (7, 999, 100), (2, 333, 3000), (64, 3, 256), (1, 100_003, 16),
                  (3001, 41, 4), (2001, 7, 32), (20_001, 9, 4), (9001, 7, 8)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=lambda d: DTYPE_IDS[d])
def test_state_direct_columns(device, dtype):
    """The state ops through the direct column kernel (sync, 4 / 8 / 16 loads in flight): against
    torch, with data offset from zero (var's shift), ties across row groups and parts (the first
    index wins), a NaN column; bit-identical repeats."""
    esz = torch.empty((), dtype=dtype).element_size()
    for i, (outer, r, inner) in enumerate(DIRECT_COLUMNS):
        inner = inner * 4 // esz
        base = make_input((outer, r, inner), dtype, "cpu", seed=40 + i) + 100
        base[:, r // 3, 0] = 1e3    # a tie of two maxima: rows r // 3 and r - 1 of column 0
        base[:, r - 1, 0] = 1e3
        base[0, r // 2, 1 % inner] = float("nan")
        check_direct(base.to(device), lambda got: got[:, 0].tolist() == [r // 3] * outer, "direct columns")


# (outer, r) of narrow columns (rows of 2 or 4 elements under 16 bytes) that wrap into 16-byte vectors on
# CUDA (reduce_state_cols_wrap_kernel): r split in parts, many slices of a few vectors (several a block),
# one vector a slice, r of whole vectors; odd r and a start a row past a vector read a row a vector
# (reduce_state_cols_narrow_kernel), a start off a row's size the ring.
WRAPPED = [(3, 1000), (1, 100_002), (2001, 8), (5, 4), (700, 64), (3, 41)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=lambda d: DTYPE_IDS[d])
def test_state_wrapped_columns(device, dtype):
    """The state ops over columns of 2 or 4 elements narrower than a vector (sync, 4 / 8 / 16 loads in
    flight; a vector's lanes hold several rows of a column): against torch, with data offset from zero
    (var's shift, one a column), a tie of three maxima in adjacent and distant rows (the first index
    wins across a vector's lanes and the row groups), a NaN column; bit-identical repeats; views of the
    same rows a row and an element past the start too."""
    esz = torch.empty((), dtype=dtype).element_size()
    for inner in (2, 4):
        if inner * esz >= 16:
            continue
        for i, (outer, r) in enumerate(WRAPPED):
            base = make_input((outer * r * inner + 8,), dtype, "cpu", seed=140 + i) + 100
            for offset in (0, inner, 1):  # (inner: rows on their own size's boundaries only; 1: off a row's)
                x = base.clone()[offset:offset + outer * r * inner].view(outer, r, inner)
                ties = sorted({r // 3, min(r // 3 + 1, r - 1), r - 1})
                x[:, ties, 0] = 1e3
                x[0, r // 2, 1] = float("nan")
                check_direct(x.to(device), lambda got, t=ties[0]: got[:, 0].tolist() == [t] * outer,
                             f"wrapped columns {(outer, r, inner)} offset {offset}")


# (outer, r) in fp32 elements of the direct row plan (sync along 16-byte aligned rows): one-vector
# rows (32 a warp item), packed rows of 16, 25 and 250 vectors (groups of 1-32 lanes, a last item
# past the rows), enough rows of 16 vectors for several items a warp (the next item's loads issued
# before this one's adds), rows of 4 and 8 vectors (read interleaved, a lane's loads from 4 rows; a
# last item partly past the rows, several items a warp), long rows a block each, in parts with the
# partials pass; then single rows with a tail past their last whole vector (any element size).
DIRECT_ROWS = [(1000, 4), (333, 64), (77, 100), (50, 1000), (140_001, 64), (1001, 16), (300_001, 32), (9, 4096),
               (3, 300_000)]
DIRECT_ROW_TAILS = [(1, 3), (1, 1_000_003), (1, 4099)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=["f32", "bf16", "f64"])
def test_state_direct_rows(device, dtype):
    """The state ops through the direct row kernel (sync, 4 / 8 / 16 loads in flight): against torch,
    with data offset from zero (var's shift), ties across lanes, warps and parts (the first index
    wins), a NaN row; bit-identical repeats."""
    esz = torch.empty((), dtype=dtype).element_size()
    cases = [(outer, r * 4 // esz) for outer, r in DIRECT_ROWS] + DIRECT_ROW_TAILS
    for i, (outer, r) in enumerate(cases):
        base = make_input((outer, r), dtype, "cpu", seed=60 + i) + 100
        base[:, r // 3] = 1e3  # a tie of two maxima: elements r // 3 and r - 1 of every row
        base[:, r - 1] = 1e3
        if outer > 1:
            base[1, r // 2] = float("nan")
        want = [r // 3] * outer
        if outer > 1:
            want[1] = r // 2
        check_direct(base.to(device), lambda got: got.tolist() == want, "direct rows")


def test_state_noncontiguous_and_expanded(device):
    base = make_input((40, 30, 6), torch.float32, device, seed=3)
    views = [base.transpose(0, 1), base[:, ::2, 1:5], base.permute(2, 0, 1), base[:, :1].expand(40, 7, 6)]
    for v in views:
        for op in STATE_OPS:
            for dim in (None, 0, 1, 2, [0, 2]):
                if op in ("argmax", "argmin") and isinstance(dim, list):
                    continue
                check(v, op, dim)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_ties_and_nan(device, op):
    x = torch.tensor([[1., 3., 3., 0.], [math.nan, 2., math.nan, 5.], [2., 2., 2., 2.], [-0., 0., -1., -1.]],
                     device=device)
    for dim in (None, 0, 1):
        check(x, op, dim)
    # ties across every lane, part and block: the first index wins
    y = torch.zeros(3, 100000, device=device)
    y[:, 77777] = 1
    y[:, 99998] = 1
    assert cupipe.reduce(y, "argmax", 1).tolist() == [77777] * 3
    assert cupipe.reduce(y, "argmin", 1).tolist() == [0] * 3
    y[1, 50001] = math.nan
    y[1, 60001] = math.nan
    assert cupipe.reduce(y, "argmax", 1).tolist()[1] == 50001
    assert cupipe.reduce(y, "argmin", 1).tolist()[1] == 50001
    z = torch.zeros(100000, 3, device=device)
    z[4321, :] = 2
    z[90000, :] = 2
    assert cupipe.reduce(z, "argmax", 0).tolist() == [4321] * 3


def test_logsumexp_and_norm_infinities(device):
    inf, nan = math.inf, math.nan
    x = torch.tensor([[-inf, -inf], [inf, 1.], [inf, inf], [nan, 1.], [-inf, 3.], [1e18, -1e18]], device=device)
    check(x, "logsumexp", 1)
    for o in (1, 2, inf, -inf, 0):
        check(x, "norm", 1, ord=o)
    check(x, "var", 1)
    check(x, "std", 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_interleaved_rows_special_values(device, dtype):
    """Rows of 4 and 8 vectors (read interleaved by sync/1 for var, std, logsumexp and norms)
    holding infinities, NaN, all -inf rows, huge magnitudes and a large offset, against torch for
    every state op."""
    inf, nan = math.inf, math.nan
    for vecs in (4, 8):
        r = vecs * 16 // dtype.itemsize
        x = make_input((67, r), dtype, "cpu", seed=r)
        x[3] = -inf
        x[10] = inf
        x[11, 5] = inf
        x[20, 7] = nan
        x[30, : r // 2] = -inf
        x[40, ::2], x[40, 1::2] = 1e18, -1e18
        x[50:60] += 1e6
        x = x.to(device)
        for op in STATE_OPS:
            check(x, op, 1, mechanism="sync", stages=1, what=f"interleaved rows of {r}")
        for o in (1, 2, inf, -inf, 0):
            check(x, "norm", 1, mechanism="sync", stages=1, ord=o, what=f"interleaved rows of {r}")


def test_var_is_stable_on_large_offsets(device):
    """One pass that stays exact where the sum of squares would cancel: values 1e6 + N(0, 1)."""
    x = (1e6 + make_input((4, 100000), torch.float64, device, seed=5)).float()
    got = cupipe.reduce(x, "var", 1)
    exp = torch.var(x.double(), 1).float()
    assert_close(got, exp, atol=0, rtol=1e-3, what="var of 1e6 + noise")


def test_var_correction_past_count(device):
    x = make_input((3, 4), torch.float32, device)
    check(x, "var", 1, correction=4)  # dof 0: inf (nan where there is no spread)
    check(x, "var", 1, correction=7)
    check(x, "std", 0, correction=3)
    c = torch.full((2, 5), 2.0, device=device)
    check(c, "var", 1, correction=5)


def test_state_cpu_columns_equal_rows():
    """The CPU kernel walks columns in blocks and rows one output at a time, in the same order per
    output: a reduction over dim 0 equals the same one over the rows of the transposed copy, bit
    for bit (2^15-element chunks included)."""
    x = make_input((70000, 19), torch.float32, "cpu", seed=21, low=-3, high=5)
    xt = x.t().contiguous()
    for op in STATE_OPS:
        for kw in ({}, {"ord": 3.0}) if op == "norm" else ({},):
            assert torch.equal(cupipe.reduce(x, op, 0, **kw), cupipe.reduce(xt, op, 1, **kw)), (op, kw)


@pytest.mark.parametrize("op", STATE_OPS)
def test_state_deterministic(device, op):
    x = make_input((3, 1_000_003), torch.float32, device, seed=9)
    for dim in (None, 1):
        a = cupipe.reduce(x, op, dim)
        for _ in range(3):
            assert torch.equal(cupipe.reduce(x, op, dim), a), f"{op} dim={dim} changed on repeat"
    y = make_input((70000, 40), torch.float32, device, seed=10)
    b = cupipe.reduce(y, op, 0)
    assert torch.equal(cupipe.reduce(y, op, 0), b)


def test_state_empty(device):
    e = torch.empty(0, 3, device=device)
    assert torch.isnan(cupipe.reduce(e, "var", 0)).all() and torch.isnan(cupipe.reduce(e, "std", 0)).all()
    assert (cupipe.reduce(e, "logsumexp", 0) == -math.inf).all()
    assert (cupipe.reduce(e, "norm", 0) == 0).all()
    assert cupipe.reduce(e, "argmax", 1).shape == (0,)
    for op, kw in (("argmax", {}), ("argmin", {}), ("norm", {"ord": math.inf})):
        with pytest.raises(ValueError, match="empty"):
            cupipe.reduce(e, op, 0, **kw)
    with pytest.raises(ValueError, match="empty"):
        cupipe.reduce(e, "argmax")


def test_state_errors(device):
    x = make_input((3, 4), torch.float32, device)
    cases = [(dict(op="argmax", dim=[0, 1]), "one dim"), (dict(op="var", dtype=torch.float64), "dtype"),
             (dict(op="sum", correction=0), "correction"), (dict(op="var", ord=1), "ord"),
             (dict(op="norm", ord=math.nan), "ord"), (dict(op="var", correction=math.inf), "correction")]
    for kw, word in cases:
        with pytest.raises(ValueError, match=word):
            cupipe.reduce(x, **kw)


def test_norm_dtype(device):
    x = make_input((30, 40), torch.float16, device)
    got = cupipe.reduce(x, "norm", 1, dtype=torch.float32)
    assert got.dtype == torch.float32
    assert_close(got, torch.linalg.vector_norm(x.double(), 2, 1).float(), atol=1e-5, rtol=1e-5, what="norm dtype")
    got = cupipe.reduce(x, "norm", 1, ord=1, dtype=torch.float64)
    assert_close(got, torch.linalg.vector_norm(x.double(), 1, 1), atol=1e-10, rtol=1e-10, what="norm f64")


GRAD_CASES = [("var", {}), ("var", {"correction": 0}), ("std", {}), ("logsumexp", {}), ("norm", {}),
              ("norm", {"ord": 1}), ("norm", {"ord": math.inf}), ("norm", {"ord": 3.0})]


@pytest.mark.parametrize("op,kw", GRAD_CASES, ids=[f"{o}-{k}" for o, k in GRAD_CASES])
def test_state_grad_matches_torch(device, op, kw):
    for dim, keepdim in ((None, False), (1, True), ([0, 2], False)):
        x = make_input((4, 5, 6), torch.float64, device, seed=11).requires_grad_()
        g = make_input(torch_ref(x.detach(), op, dim, keepdim, **kw).shape, torch.float64, device, seed=12)
        got, = torch.autograd.grad(cupipe.reduce(x, op, dim, keepdim, **kw), x, g)
        exp, = torch.autograd.grad(torch_ref(x, op, dim, keepdim, **kw), x, g)
        assert_close(got, exp, atol=1e-10, rtol=1e-10, what=f"grad {op} {kw} dim={dim}")
    x = make_input((3, 7), torch.float64, device, seed=13).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: cupipe.reduce(t, op, 1, **kw), (x,))


def test_norm_grad_at_zeros_as_torch(device):
    """Zero elements and an all-zero row: torch's gradients (0 where the norm is 0)."""
    x = torch.tensor([[0., 1., -2.], [0., 0., 0.], [3., 0., -3.]], dtype=torch.float64, device=device)
    for o in (1, 2, 3.0, math.inf):
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        got, = torch.autograd.grad(cupipe.reduce(xa, "norm", 1, ord=o).sum(), xa)
        exp, = torch.autograd.grad(torch.linalg.vector_norm(xb, o, 1).sum(), xb)
        assert_close(got, exp, atol=1e-12, rtol=1e-12, what=f"norm grad ord={o}")


def test_arg_outputs_need_no_grad(device):
    x = make_input((4, 5), torch.float32, device).requires_grad_()
    i = cupipe.reduce(x, "argmax", 1)
    assert i.dtype == torch.int64 and not i.requires_grad


def test_state_opcheck_compile_vmap(device):
    x = make_input((6, 50), torch.float32, device, seed=14)
    for op, kw in (("var", {"correction": 0}), ("argmax", {}), ("logsumexp", {}), ("norm", {"ord": 1})):
        torch.library.opcheck(torch.ops.cupipe.reduce.default, (x, op, [1], False), kw,
                              test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))
        f = torch.compile(lambda t: cupipe.reduce(t, op, 1, **kw), fullgraph=True, backend="aot_eager")
        assert_close(f(x), cupipe.reduce(x, op, 1, **kw), atol=0, rtol=0, what=f"compile {op}")
        got = torch.vmap(lambda t: cupipe.reduce(t, op, **kw))(x)
        exp = torch.stack([cupipe.reduce(t, op, **kw) for t in x])
        assert_close(got, exp, atol=1e-6, rtol=1e-6, what=f"vmap {op}")
    got = torch.vmap(lambda t: cupipe.reduce(t, "argmin", keepdim=True))(x.view(6, 5, 10))
    assert got.shape == (6, 1, 1)
    assert torch.equal(got.flatten(), torch.stack([t.argmin() for t in x]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_state_cuda_graph_and_stream():
    x = make_input((5, 70000), torch.float32, "cuda", seed=15)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for op in STATE_OPS:
            check(x, op, 1)
    s.synchronize()
    g = torch.cuda.CUDAGraph()
    outs = {}
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        for op in STATE_OPS:
            outs[op] = cupipe.reduce(x, op, 1)
    x.copy_(make_input((5, 70000), torch.float32, "cuda", seed=16))
    g.replay()
    torch.cuda.synchronize()
    for op in STATE_OPS:
        assert_close(outs[op], torch_ref(x, op, 1), atol=_tol(x.dtype, op)[0], rtol=_tol(x.dtype, op)[1],
                     what=f"graph {op}", equal_nan=True)
