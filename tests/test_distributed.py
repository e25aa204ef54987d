"""cupipe.distributed on 1, 2, 3 and 4 CPU processes with the gloo backend.

One ``torch.multiprocessing`` spawn per world size runs every case (spawning is the expensive
part: each process imports torch). Every rank builds the same seeded global tensor, calls the
distributed op on its own block (uneven row counts), and compares its part of the result with
the single-process cupipe op on the global tensor -- so checking needs no communication. Each
rank writes ``rank<i>.json`` (case name -> None or the traceback) into a temp dir; the parent
reads them, so a failure on any rank fails the matching pytest item, and a rank that crashes
or hangs (the group's timeout is 60 s, the parent's deadline longer) fails them all.

Only loopback addresses are used (127.0.0.1; gloo bound to ``lo``).
"""
from __future__ import annotations

import datetime
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import cupipe
from conftest import assert_close, make_input, make_weights

pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()),
    reason="torch.distributed with the gloo backend is not available")

if dist.is_available():
    import cupipe.distributed as cd

WORLDS = [1, 2, 3, 4]
FAMILIES = ["stencil2d", "stencil1d", "stencil3d", "errors", "reduce", "heat", "misc"]
BOUNDARIES = ["zero", "replicate", "circular", "reflect"]
REDUCE_OPS = ["sum", "mean", "amax", "amin"]
ROOT = Path(__file__).resolve().parent.parent
DEADLINE_S = 240


# ----------------------------------------------------------------------------- layouts

def _sizes(world: int, r: int, rot: int = 0):
    """Uneven rows per rank, every one >= max(r, 1): covers a rank with exactly r rows, one with
    r <= rows < 2r (the extended-block path) and ones with >= 2r (interior + border patches)."""
    r = max(r, 1)
    if world == 1:
        return [r + 3]  # a single rank holds the whole dim (reflect needs more than r rows)
    pat = [r + 3, r, 2 * r + 1, max(2 * r - 1, r)]
    pat = pat[rot % 4:] + pat[:rot % 4]
    return pat[:world] if world <= 4 else (pat * world)[:world]


def _local(x, d, sizes, rank):
    off = sum(sizes[:rank])
    return x.narrow(d, off, sizes[rank])


def _close(actual, expected, what, dtype=torch.float64, atol=None, rtol=None, equal_nan=False):
    if atol is None:
        atol, rtol = {torch.float64: (1e-12, 1e-12), torch.float32: (1e-5, 1e-5),
                      torch.float16: (1e-2, 1e-2), torch.bfloat16: (3e-2, 3e-2)}[dtype]
    assert_close(actual, expected, atol=atol, rtol=rtol, what=what, equal_nan=equal_nan)


def _expect_error(fn, exc, *needles):
    try:
        fn()
    except exc as e:
        msg = str(e)
        for n in needles:
            assert n in msg, f"error message lacks {n!r}: {msg}"
        return msg
    raise AssertionError(f"expected {exc.__name__}")


# ----------------------------------------------------------------------------- inputs

_DEV = "cpu"  # set per rank by _worker: "cpu" (gloo) or "cuda:<rank>" (nccl)


def _inp(shape, dtype=torch.float32, seed=0):
    """Seeded input, the same on every rank (generated on the CPU), on this rank's device."""
    return make_input(shape, dtype, _DEV, seed)


def _wts(shape, dtype=torch.float32, seed=1000):
    return make_weights(shape, dtype, _DEV, seed)


# ----------------------------------------------------------------------------- cases
# Each case is (family, name, fn(rank, world)); fn raises on failure. Every rank runs every case
# in the same order (the distributed calls are collective).

def _stencil2d_cases(world):
    cases = []
    weights = [((3, 3), 0), ((5, 5), 1), ((5, 3), 0), ((3, 5), 1), ((1, 3), 2), ((7, 3), 3)]
    for boundary in BOUNDARIES:
        for (wh, ww), rot in weights:
            for overlap in (False, True):
                def fn(rank, world, boundary=boundary, wh=wh, ww=ww, rot=rot, overlap=overlap):
                    ry = (wh - 1) // 2
                    sizes = _sizes(world, ry, rot)
                    x = _inp((sum(sizes), 7), torch.float64, seed=11 + wh + ww)
                    w = _wts((wh, ww), torch.float64, seed=5 + rot)
                    y = cd.stencil2d(_local(x, 0, sizes, rank), w, boundary=boundary,
                                     overlap=overlap)
                    ref = cupipe.stencil2d(x, w, boundary=boundary)
                    assert y.is_contiguous()
                    _close(y, _local(ref, 0, sizes, rank),
                           f"rank {rank} sizes {sizes} w {wh}x{ww} {boundary} overlap={overlap}")
                cases.append(("stencil2d", f"{boundary}-w{wh}x{ww}-rot{rot}-ov{int(overlap)}", fn))
    for boundary in BOUNDARIES:
        for (wh, ww), k in (((3, 3), 4), ((5, 3), 3)):
            def fn(rank, world, boundary=boundary, wh=wh, ww=ww, k=k):
                ry = (wh - 1) // 2
                sizes = _sizes(world, ry, k)
                x = _inp((sum(sizes), 7), torch.float64, seed=60 + k)
                w = _wts((wh, ww), torch.float64, seed=61) * 0.3
                y = cd.stencil2d(_local(x, 0, sizes, rank), w, boundary=boundary, steps=k)
                ref = cupipe.stencil2d(x, w, boundary=boundary, steps=k)
                _close(y, _local(ref, 0, sizes, rank),
                       f"rank {rank} sizes {sizes} w {wh}x{ww} {boundary} steps={k}")
            cases.append(("stencil2d", f"steps{k}-{boundary}-w{wh}x{ww}", fn))
    for boundary in BOUNDARIES:
        for dtype in (torch.float32, torch.bfloat16):
            def fn(rank, world, boundary=boundary, dtype=dtype):
                sizes = _sizes(world, 1, 1)
                x = _inp((2, sum(sizes), 6), dtype, seed=3)  # leading batch dim
                w = _wts((3, 3), torch.float32, seed=4)
                y = cd.stencil2d(_local(x, 1, sizes, rank), w, boundary=boundary, overlap=True)
                ref = cupipe.stencil2d(x, w, boundary=boundary)
                _close(y, _local(ref, 1, sizes, rank), f"rank {rank} {boundary} {dtype}", dtype)
            cases.append(("stencil2d", f"batch-{boundary}-{str(dtype)[6:]}", fn))
    return cases


def _stencil3d_cases(world):
    cases = []
    for boundary in BOUNDARIES:
        for shape, rot in (((3, 3, 3), 0), ((5, 3, 1), 1), ((7, 1, 3), 2)):
            for overlap in (False, True):
                def fn(rank, world, boundary=boundary, shape=shape, rot=rot, overlap=overlap):
                    rz = (shape[0] - 1) // 2
                    sizes = _sizes(world, rz, rot)
                    x = _inp((2, sum(sizes), 5, 6), torch.float64, seed=50 + rot)
                    w = _wts(shape, torch.float64, seed=51 + rot)
                    y = cd.stencil3d(_local(x, 1, sizes, rank), w, boundary=boundary, overlap=overlap)
                    ref = cupipe.stencil3d(x, w, boundary=boundary)
                    _close(y, _local(ref, 1, sizes, rank),
                           f"rank {rank} sizes {sizes} w {shape} {boundary} overlap={overlap}")
                cases.append(("stencil3d", f"{boundary}-w{'x'.join(map(str, shape))}-ov{int(overlap)}", fn))

        def fn(rank, world, boundary=boundary):
            sizes = _sizes(world, 1, 2)
            x = _inp((sum(sizes), 4, 5), torch.float64, seed=70)
            w = _wts((3, 3, 1), torch.float64, seed=71) * 0.3
            y = cd.stencil3d(_local(x, 0, sizes, rank), w, boundary=boundary, steps=5)
            _close(y, _local(cupipe.stencil3d(x, w, boundary=boundary, steps=5), 0, sizes, rank),
                   f"rank {rank} sizes {sizes} {boundary} steps=5")
        cases.append(("stencil3d", f"steps5-{boundary}", fn))
    return cases


def _stencil1d_cases(world):
    cases = []
    for boundary in BOUNDARIES:
        for r in (1, 2, 3):
            for overlap in (False, True):
                def fn(rank, world, boundary=boundary, r=r, overlap=overlap):
                    sizes = _sizes(world, r, r)
                    x = _inp((sum(sizes),), torch.float64, seed=20 + r)
                    w = _wts((2 * r + 1,), torch.float64, seed=r)
                    y = cd.stencil1d(_local(x, 0, sizes, rank), w, boundary=boundary,
                                     overlap=overlap)
                    ref = cupipe.stencil1d(x, w, boundary=boundary)
                    _close(y, _local(ref, 0, sizes, rank),
                           f"rank {rank} sizes {sizes} r={r} {boundary} overlap={overlap}")
                cases.append(("stencil1d", f"{boundary}-r{r}-ov{int(overlap)}", fn))

            def fn(rank, world, boundary=boundary, r=r):
                sizes = _sizes(world, r, r + 1)
                x = _inp((2, sum(sizes)), torch.float64, seed=80 + r)
                w = _wts((2 * r + 1,), torch.float64, seed=81) * 0.3
                y = cd.stencil1d(_local(x, 1, sizes, rank), w, boundary=boundary, steps=6)
                _close(y, _local(cupipe.stencil1d(x, w, boundary=boundary, steps=6), 1, sizes, rank),
                       f"rank {rank} sizes {sizes} r={r} {boundary} steps=6")
            cases.append(("stencil1d", f"steps6-{boundary}-r{r}", fn))
        # split (and stencilled) along dim 0 and along dim -1 of a 2-D tensor
        for dim in (0, -1):
            def fn(rank, world, boundary=boundary, dim=dim):
                sizes = _sizes(world, 2, 3)
                shape = (sum(sizes), 5) if dim == 0 else (3, sum(sizes))
                x = _inp(shape, torch.float32, seed=30)
                w = _wts((5,), torch.float32, seed=31)
                y = cd.stencil1d(_local(x, dim, sizes, rank), w, dim=dim, boundary=boundary)
                ref = cupipe.stencil1d(x, w, dim=dim, boundary=boundary)
                _close(y, _local(ref, dim, sizes, rank), f"rank {rank} dim={dim} {boundary}",
                       torch.float32)
            cases.append(("stencil1d", f"2d-dim{dim}-{boundary}", fn))

    def fn(rank, world):  # stencil dim != split dim: purely local
        sizes = _sizes(world, 0, 1)
        x = _inp((sum(sizes), 9), torch.float64, seed=32)
        w = _wts((5,), torch.float64, seed=33)
        y = cd.stencil1d(_local(x, 0, sizes, rank), w, dim=1, split_dim=0, boundary="reflect")
        ref = cupipe.stencil1d(x, w, dim=1, boundary="reflect")
        _close(y, _local(ref, 0, sizes, rank), f"rank {rank} local stencil dim")
    cases.append(("stencil1d", "stencil-dim-not-split-dim", fn))
    return cases


def _error_cases(world):
    cases = []

    def too_few_rows(rank, world):
        # radius 2; one rank holds a single row
        sizes = [4, 1, 5, 3][:world]
        x = _inp((sum(sizes), 6), torch.float64, seed=40)
        w = _wts((5, 5), torch.float64, seed=41)
        xl = _local(x, 0, sizes, rank)
        if world == 1:  # a single process is the plain op: no row requirement
            _close(cd.stencil2d(xl, w), cupipe.stencil2d(x, w), "world 1")
            return
        for boundary in BOUNDARIES:
            _expect_error(lambda: cd.stencil2d(xl, w, boundary=boundary), ValueError,
                          "rank 1 has 1 row(s)", "at least 2 row(s)", f"rows per rank: {sizes}")
    cases.append(("errors", "stencil2d-rank-with-fewer-rows-than-r", too_few_rows))

    def too_few_rows_1d(rank, world):
        sizes = [5, 4, 2, 3][:world]
        x = _inp((sum(sizes),), torch.float64, seed=42)
        w = _wts((7,), torch.float64, seed=43)
        xl = _local(x, 0, sizes, rank)
        if world < 3:
            _close(cd.stencil1d(xl, w, boundary="circular"),
                   _local(cupipe.stencil1d(x, w, boundary="circular"), 0, sizes, rank), "ok")
            return
        _expect_error(lambda: cd.stencil1d(xl, w, boundary="circular", overlap=True), ValueError,
                      "rank 2 has 2 row(s)", "radius along the split dim is 3")
    cases.append(("errors", "stencil1d-rank-with-fewer-rows-than-r", too_few_rows_1d))

    def heat_halo_too_wide(rank, world):
        sizes = [5, 4, 2, 3][:world]
        u = _inp((sum(sizes), 5), torch.float64, seed=44)
        ul = _local(u, 0, sizes, rank)
        if world < 3:
            return
        _expect_error(lambda: cd.heat_steps(ul, 4, 0.1, halo_width=3), ValueError,
                      "rank 2 has 2 row(s)", "halo_width is 3")
        cd.heat_steps(ul, 4, 0.1, halo_width=2)  # fine
    cases.append(("errors", "heat-halo-wider-than-a-rank", heat_halo_too_wide))

    def shape_mismatch(rank, world):
        if world == 1:
            return
        x = _inp((4, 6 if rank != world - 1 else 7), torch.float64, seed=45)
        w = _wts((3, 3), torch.float64, seed=46)
        _expect_error(lambda: cd.stencil2d(x, w), ValueError,
                      "must agree across ranks", f"rank {world - 1} has shape (4, 7)")
        _expect_error(lambda: cd.reduce(x, "sum", 0), ValueError, "must agree across ranks")
    cases.append(("errors", "non-split-dims-differ", shape_mismatch))

    def bad_args(rank, world):
        x = _inp((4, 6), torch.float64, seed=47)
        ones33 = torch.ones(3, 3, device=_DEV)
        _expect_error(lambda: cd.stencil2d(x, ones33, boundary="wrap"), ValueError, "boundary")
        _expect_error(lambda: cd.stencil2d(x, torch.ones(2, 3, device=_DEV)), ValueError, "odd")
        _expect_error(lambda: cd.stencil1d(x, ones33[0], dim=2), IndexError, "dim")
        _expect_error(lambda: cd.reduce(x, "prod"), ValueError, "op")
        _expect_error(lambda: cd.heat_steps(x, -1, 0.1), ValueError, "steps")
        _expect_error(lambda: cd.heat_steps(x, 1, 0.1, halo_width=0), ValueError, "halo_width")
        _expect_error(lambda: cd.heat_steps(x, 1, 0.1, halo_width=2.0), ValueError, "halo_width")
        xg = x.clone().requires_grad_()
        _expect_error(lambda: cd.stencil2d(xg, ones33), NotImplementedError, "autograd")
        with torch.no_grad():
            cd.stencil2d(xg, torch.ones(3, 3, dtype=torch.float64, device=_DEV))
    cases.append(("errors", "bad-arguments", bad_args))
    return cases


def _reduce_ref(x, op, dim, keepdim, dtype=None):
    return cupipe.reduce(x, op, dim, keepdim, dtype=dtype)


DIMS = [None, 0, 1, -1, [0, 2], [1, 2], [], [0, 1, 2], [2, 0]]


def _reduce_cases(world):
    cases = []
    for op in REDUCE_OPS:
        for split in (0, 1):
            def fn(rank, world, op=op, split=split):
                sizes = _sizes(world, 1, split)
                shape = [3, 4, 5]
                shape[split] = sum(sizes)
                x = _inp(shape, torch.float64, seed=50 + split)
                xl = _local(x, split, sizes, rank)
                for dim in DIMS:
                    for keepdim in (False, True):
                        y = cd.reduce(xl, op, dim, keepdim, split_dim=split)
                        ref = _reduce_ref(x, op, dim, keepdim)
                        dims = range(3) if dim in (None, []) else \
                            [dim % 3] if isinstance(dim, int) else [d % 3 for d in dim]
                        if split not in dims:  # local part of the result
                            ref = _local(ref, split if keepdim else
                                         split - sum(1 for d in dims if d < split), sizes, rank)
                        _close(y, ref, f"rank {rank} {op} dim={dim} keepdim={keepdim} "
                                       f"split={split}")
            cases.append(("reduce", f"{op}-split{split}-all-dims", fn))
        for dtype, out in ((torch.float32, None), (torch.bfloat16, None), (torch.float16, None),
                           (torch.bfloat16, torch.float32), (torch.float32, torch.float64)):
            if out is not None and op in ("amax", "amin"):
                continue
            def fn(rank, world, op=op, dtype=dtype, out=out):
                sizes = _sizes(world, 2, 2)
                x = _inp((sum(sizes) * 50, 3), dtype, seed=52)
                xl = _local(x, 0, [s * 50 for s in sizes], rank)
                for dim in (None, 0):
                    y = cd.reduce(xl, op, dim, dtype=out)
                    ref = _reduce_ref(x, op, dim, False, dtype=out)
                    # fp32 results: partial sums combined in another order than one pass
                    atol = 1e-4 if ref.dtype == torch.float32 else None
                    _close(y, ref, f"rank {rank} {op} {dtype} -> {out} dim={dim}", ref.dtype,
                           atol=atol, rtol=atol)
            cases.append(("reduce", f"{op}-{str(dtype)[6:]}-to-{str(out)[6:]}", fn))

    # The state reductions over the split dim: partial states gathered and merged in rank order.
    state_ops = [("var", {}), ("std", {"correction": 0}), ("logsumexp", {}), ("norm", {}), ("norm", {"ord": 1}),
                 ("norm", {"ord": float("inf")}), ("norm", {"ord": 0}), ("norm", {"ord": 3.0}), ("argmax", {}),
                 ("argmin", {})]
    for split in (0, 1):
        def states(rank, world, split=split):
            sizes = _sizes(world, 1, split)
            shape = [3, 4, 5]
            shape[split] = sum(sizes)
            x = _inp(shape, torch.float64, seed=60 + split)
            x.view(-1)[::7] = x.view(-1)[0]  # ties for argmax/argmin
            xl = _local(x, split, sizes, rank)
            for op, kw in state_ops:
                for dim in (None, split, [0, 2] if split == 0 else [1, 2], [0, 1, 2]):
                    if op.startswith("arg") and isinstance(dim, list):
                        continue
                    for keepdim in (False, True):
                        y = cd.reduce(xl, op, dim, keepdim, split_dim=split, **kw)
                        ref = cupipe.reduce(x, op, dim, keepdim, **kw)
                        _close(y, ref, f"rank {rank} {op} {kw} dim={dim} keepdim={keepdim} split={split}")
        cases.append(("reduce", f"state-ops-split{split}", states))

    def states_zero_rows_nan(rank, world):
        sizes = [3, 0, 4, 0][:world] if world > 1 else [3]
        x = _inp((sum(sizes), 3, 2), torch.float32, seed=61)
        x[-1, 1, 0] = float("nan")
        x[0, 2, 1] = float("inf")
        xl = _local(x, 0, sizes, rank)
        for op, kw in state_ops:
            for dim in (None, 0) if op.startswith("arg") else (None, 0, [0, 2]):
                ref = cupipe.reduce(x, op, dim, **kw)
                tol = 0 if op.startswith("arg") else 2e-6
                _close(cd.reduce(xl, op, dim, **kw), ref, f"rank {rank} {op} {kw} dim={dim} zero-row ranks",
                       ref.dtype, atol=tol, rtol=tol, equal_nan=True)
        try:
            cd.reduce(xl, "argmax", [0, 1])
        except ValueError as e:
            assert "one dim" in str(e)
        else:
            raise AssertionError("argmax over two dims did not raise")
    cases.append(("reduce", "state-ops-zero-rows-nan-inf", states_zero_rows_nan))

    def nan_inf(rank, world):
        sizes = _sizes(world, 1, 0)
        x = _inp((sum(sizes), 4), torch.float32, seed=53)
        x[sizes[0] - 1 if world == 1 else sizes[0], 1] = float("nan")   # second rank's rows
        x[0, 2] = float("inf")
        x[-1, 2] = float("-inf")
        x[-1, 3] = float("nan")
        xl = _local(x, 0, sizes, rank)
        for op in REDUCE_OPS:
            for dim in (None, 0, 1, [0, 1]):
                y = cd.reduce(xl, op, dim)
                ref = _reduce_ref(x, op, dim, False)
                if 0 not in ([0, 1] if dim is None else [dim] if isinstance(dim, int) else dim):
                    ref = _local(ref, 0, sizes, rank)
                _close(y, ref, f"rank {rank} {op} dim={dim} with NaN/inf", torch.float32,
                       equal_nan=True)
    cases.append(("reduce", "nan-and-inf-propagation", nan_inf))

    def zero_rows(rank, world):
        sizes = [3, 0, 4, 0][:world] if world > 1 else [3]
        x = _inp((sum(sizes), 3, 2), torch.float64, seed=54)
        xl = _local(x, 0, sizes, rank)
        for op in REDUCE_OPS:
            for dim in (None, 0, [0, 2]):
                for keepdim in (False, True):
                    _close(cd.reduce(xl, op, dim, keepdim), _reduce_ref(x, op, dim, keepdim),
                           f"rank {rank} {op} dim={dim} keepdim={keepdim} zero-row ranks")
    cases.append(("reduce", "ranks-with-zero-rows", zero_rows))

    def empty_global(rank, world):
        x = torch.zeros(0, 3, dtype=torch.float64, device=_DEV)
        for op in ("sum", "mean"):
            _close(cd.reduce(x, op, 0), _reduce_ref(x, op, 0, False), f"{op} empty",
                   equal_nan=True)
        for op in ("amax", "amin"):
            try:
                _reduce_ref(x, op, 0, False)
                expected = None
            except Exception as e:  # noqa: BLE001
                expected = type(e)
            assert expected is not None, "single-process amax of an empty dim did not raise"
            _expect_error(lambda: cd.reduce(x, op, 0), expected)
    cases.append(("reduce", "empty-global-reduction", empty_global))
    return cases


def _heat_ref(u, steps, alpha, boundary):
    lap = torch.tensor([[0.0, 1, 0], [1, -4, 1], [0, 1, 0]], dtype=torch.float64,
                       device=u.device)
    for _ in range(steps):
        u = u + alpha * cupipe.stencil2d(u, lap, boundary=boundary)
    return u


def _heat_cases(world):
    cases = []
    for boundary in BOUNDARIES:
        for hw, overlap in ((1, False), (1, True), (3, False), (2, False)):
            def fn(rank, world, boundary=boundary, hw=hw, overlap=overlap):
                sizes = _sizes(world, hw, 1)
                u = _inp((sum(sizes), 9), torch.float64, seed=60)
                steps, alpha = 7, 0.2
                y = cd.heat_steps(_local(u, 0, sizes, rank), steps, alpha, boundary=boundary,
                                  halo_width=hw, overlap=overlap)
                ref = _heat_ref(u, steps, alpha, boundary)
                _close(y, _local(ref, 0, sizes, rank),
                       f"rank {rank} sizes {sizes} heat {boundary} halo_width={hw} "
                       f"overlap={overlap}", atol=1e-12, rtol=1e-10)
            cases.append(("heat", f"{boundary}-hw{hw}-ov{int(overlap)}", fn))

    def batched_f32(rank, world):
        sizes = _sizes(world, 3, 2)
        u = _inp((2, sum(sizes), 6), torch.float32, seed=61)
        for hw in (1, 3):
            y = cd.heat_steps(_local(u, 1, sizes, rank), 10, 0.15, boundary="reflect",
                              halo_width=hw)
            ref = _heat_ref(u.double(), 10, 0.15, "reflect").float()
            _close(y, _local(ref, 1, sizes, rank), f"rank {rank} batched f32 hw={hw}",
                   torch.float32)
    cases.append(("heat", "batched-float32", batched_f32))

    def hw_vs_hw1(rank, world):  # halo_width=k against halo_width=1, more steps than k
        sizes = _sizes(world, 4, 3)
        u = _inp((sum(sizes), 8), torch.float64, seed=62)
        ul = _local(u, 0, sizes, rank)
        a = cd.heat_steps(ul, 13, 0.24, boundary="circular", halo_width=1)
        b = cd.heat_steps(ul, 13, 0.24, boundary="circular", halo_width=4)
        _close(b, a, f"rank {rank} halo_width 4 vs 1", atol=1e-12, rtol=1e-10)
        c = cd.heat_steps(ul, 13, 0.24, boundary="circular")  # as many steps a pass as the rows allow
        _close(c, a, f"rank {rank} default halo_width vs 1", atol=1e-12, rtol=1e-10)
        assert torch.equal(cd.heat_steps(ul, 0, 0.2), ul)
    cases.append(("heat", "halo-width-4-equals-1", hw_vs_hw1))
    return cases


def _misc_cases(world):
    def gather_split(rank, world):
        sizes = _sizes(world, 2, 1)
        x = _inp((3, sum(sizes)), torch.float64, seed=70)
        g = cd.gather(_local(x, 1, sizes, rank), dim=1)
        assert torch.equal(g, x)
        xs = _inp((10, 2), torch.float64, seed=71)
        assert torch.equal(cd.split(xs, 0), torch.tensor_split(xs, world)[rank])
        assert cd.split_sizes(10, world) == [t.shape[0] for t in torch.tensor_split(xs, world)]

    def subgroup(rank, world):  # a group of the odd ranks (plus rank 0 when world < 3)
        members = [r for r in range(world) if r % 2 == 1] or [0]
        if world == 2:
            members = [1]
        g = dist.new_group(members)
        if rank not in members:
            return
        i = members.index(rank)
        sizes = _sizes(len(members), 1, 0)
        x = _inp((sum(sizes), 5), torch.float64, seed=72)
        w = _wts((3, 3), torch.float64, seed=73)
        y = cd.stencil2d(_local(x, 0, sizes, i), w, boundary="circular", group=g)
        _close(y, _local(cupipe.stencil2d(x, w, boundary="circular"), 0, sizes, i), "subgroup")
        _close(cd.reduce(_local(x, 0, sizes, i), "amax", None, group=g), x.amax(), "subgroup")

    def overlap_auto(rank, world):
        # The first 2 * OVERLAP_TRIALS blocks of calls time both variants, then every rank keeps the same
        # choice; every result equals the single-process op, and a bad value names the argument.
        sizes = _sizes(world, 1, 2)
        x = _inp((sum(sizes), 6), torch.float64, seed=74)
        w = _wts((3, 3), torch.float64, seed=75)
        ref = _local(cupipe.stencil2d(x, w, boundary="reflect"), 0, sizes, rank)
        before = set(cd._overlap_auto)
        for i in range(2 * cd.OVERLAP_TRIALS * cd.OVERLAP_BLOCK + 2):
            _close(cd.stencil2d(_local(x, 0, sizes, rank), w, boundary="reflect", overlap="auto"), ref,
                   f"rank {rank} overlap=auto call {i}")
        new = [cd._overlap_auto[k] for k in set(cd._overlap_auto) - before]
        if world == 1:
            assert not new  # one rank: nothing to overlap, nothing measured
        else:
            assert len(new) == 1 and new[0].choice is not None
            assert [len(t) for t in new[0].times] == [cd.OVERLAP_TRIALS] * 2
            choices = [None] * world
            dist.all_gather_object(choices, new[0].choice)
            assert len(set(choices)) == 1, choices
        _expect_error(lambda: cd.stencil2d(_local(x, 0, sizes, rank), w, overlap="yes"), ValueError,
                      "overlap must be True, False or \"auto\"", "'yes'")

    return [("misc", "gather-split-helpers", gather_split), ("misc", "subgroup", subgroup),
            ("misc", "overlap-auto", overlap_auto)]


def _all_cases(world):
    return (_stencil2d_cases(world) + _stencil1d_cases(world) + _stencil3d_cases(world) + _error_cases(world)
            + _reduce_cases(world) + _heat_cases(world) + _misc_cases(world))


# ----------------------------------------------------------------------------- spawn

def _worker(rank, world, port, outdir, backend="gloo"):
    global _DEV
    out = {"cases": {}, "fatal": None, "seconds": None}
    t0 = time.time()
    try:
        torch.set_num_threads(1)
        if os.path.exists("/sys/class/net/lo"):
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        for k, v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                     ("NVSHMEM_DISABLE_NVLS", "1")):
            os.environ.setdefault(k, v)
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        kw = {}
        if backend == "nccl":
            torch.cuda.set_device(rank)
            _DEV = f"cuda:{rank}"
            kw["device_id"] = torch.device(_DEV)
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=60), **kw)
        try:
            for fam, name, fn in _all_cases(world):
                try:
                    fn(rank, world)
                    out["cases"][f"{fam}/{name}"] = None
                except Exception:  # noqa: BLE001
                    out["cases"][f"{fam}/{name}"] = traceback.format_exc()
            dist.barrier()
        finally:
            dist.destroy_process_group()
    except BaseException:  # noqa: BLE001
        out["fatal"] = traceback.format_exc()
    out["seconds"] = time.time() - t0
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump(out, f)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(world, backend):
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory(prefix=f"cupipe-dist-{world}-") as tmp:
        ctx = mp.start_processes(_worker, args=(world, _free_port(), tmp, backend), nprocs=world,
                                 join=False, start_method="spawn")
        deadline = time.time() + DEADLINE_S
        problem = None
        try:
            while not ctx.join(timeout=2):
                if time.time() > deadline:
                    problem = f"ranks still running after {DEADLINE_S} s (hang?)"
                    for p in ctx.processes:
                        if p.is_alive():
                            p.kill()
                    break
        except Exception as e:  # noqa: BLE001  (a rank raised or died)
            problem = f"{type(e).__name__}: {e}"
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
        results = {}
        for r in range(world):
            f = Path(tmp) / f"rank{r}.json"
            results[r] = json.loads(f.read_text()) if f.exists() else None
    return problem, results


_RESULTS = {}


def _results(world, backend):
    """Spawn ``world`` ranks once (per backend) and cache what each rank reported."""
    key = (world, backend)
    if key not in _RESULTS:
        problem, results = _spawn(world, backend)
        if any(v is not None and v["fatal"] and "Address already in use" in v["fatal"]
               for v in results.values()):  # lost the race for the free port: once more
            problem, results = _spawn(world, backend)
        _RESULTS[key] = (problem, results)
    return _RESULTS[key]


def _case_names(world, family):
    return [f"{f}/{n}" for f, n, _ in _all_cases(world) if f == family]


def _check_family(world, family, backend):
    problem, results = _results(world, backend)
    lines = []
    for r in range(world):
        res = results.get(r)
        if res is None:
            lines.append(f"rank {r}: wrote no result file")
            continue
        if res["fatal"]:
            lines.append(f"rank {r}: fatal error\n{res['fatal']}")
        for name in _case_names(world, family):
            if name not in res["cases"]:
                lines.append(f"rank {r}: {name} did not run")
            elif res["cases"][name] is not None:
                lines.append(f"rank {r}: {name} failed\n{res['cases'][name]}")
    if problem:
        lines.insert(0, f"spawn of {world} ranks: {problem}")
    assert not lines, f"{backend}, {world} rank(s), {family}:\n" + "\n".join(lines[:12]) + \
        (f"\n... and {len(lines) - 12} more" if len(lines) > 12 else "")
    assert _case_names(world, family), "no cases"


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("world", WORLDS)
def test_distributed_gloo(world, family):
    _check_family(world, family, "gloo")


def _n_gpus():
    try:
        ok = torch.cuda.is_available() and cupipe.cuda_available() and dist.is_nccl_available()
        return torch.cuda.device_count() if ok else 0
    except Exception:  # noqa: BLE001
        return 0


@pytest.mark.cuda
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("world", [2, 3, 4])
def test_distributed_nccl(world, family):
    """The same cases with NCCL, one GPU per rank (NVLink multicast off)."""
    if _n_gpus() < world:
        pytest.skip(f"needs {world} GPUs, NCCL and a CUDA build of cupipe")
    _check_family(world, family, "nccl")


def test_example_torchrun_two_ranks():
    """examples/distributed_heat.py under torchrun with 2 CPU ranks (gloo), checked against a
    single-process run by the example itself."""
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="",  # the cupipe under test
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    if os.path.exists("/sys/class/net/lo"):
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    # --standalone lets torchrun bind its own free port: a port picked here could be taken by a
    # test running beside this one before torchrun binds it.
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           str(ROOT / "examples" / "distributed_heat.py"),
           "--rows", "96", "--cols", "64", "--steps", "20", "--warmup", "2", "--halo-width", "2",
           "--boundary", "reflect"]
    p = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, f"torchrun failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    assert "check against single-process run: PASS" in p.stdout, p.stdout
