"""Shared fixtures and helpers for the cupipe test suite.

Every test runs on CPU. Tests that take the ``device`` fixture also run on CUDA when
``torch.cuda.is_available()`` (and cupipe was built with CUDA); the CUDA variants carry the
``cuda`` marker, so ``-m "not cuda"`` deselects them and they are skipped cleanly without a GPU.

Tests marked ``slow`` (large tensors) only run with ``CUPIPE_SLOW=1``.

With ``CUPIPE_TEST_PRECOMPILE=1`` on a GPU machine, the session first compiles every kernel
instance the module does not hold, in parallel, into the disk cache (cupipe.precompile): the tests'
mechanism x stages matrix then loads them instead of compiling each at its first call
(tools/gpu_check.sh sets it).

Helpers (import them with ``from conftest import ...``; pytest puts tests/ on sys.path):
  tma_supported()                          mechanism='tma' runs on the current GPU and build
  make_input(shape, dtype, device, seed)   seeded random input
  stencil1d_ref / stencil2d_ref            eager references (F.pad + F.conv*, in float64)
  stencil1d_loop_ref                       plain-Python reference with modular indexing
  tol(dtype, taps)                         explicit (atol, rtol) per dtype
  assert_close(actual, expected, ...)      torch.testing.assert_close with a readable message
  poison_allocator(nbytes, device)         make the caching allocator hand back 0xFF bytes
  Smoother                                 a module that calls every op (compile, export tests)
  assert_runs_like_eager(eager, run, ...)  another run of a Smoother: outputs and gradients
"""
from __future__ import annotations

import math
import os
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Optional, Sequence, Tuple

import pytest
import torch
import torch.nn.functional as F

import cupipe

HAS_CUDA = bool(torch.cuda.is_available() and cupipe.build_info.get("with_cuda"))


def tma_supported() -> bool:
    """Whether mechanism='tma' runs on the current GPU with this build (cupipe.tma_available)."""
    return cupipe.tma_available()

DEVICES = ["cpu", pytest.param("cuda", marks=[
    pytest.mark.cuda,
    pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device and a CUDA build of cupipe"),
])]

FLOAT_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
BOUNDARIES = ["zero", "replicate", "circular", "reflect"]
REDUCE_OPS = ["sum", "mean", "amax", "amin"]


def sass_functions(path, containing: str = "") -> dict:
    """{kernel: SASS text} (cuobjdump) of a module, a cubin or a kernel cache file (its trailer
    dropped), calls' target addresses masked (a shared callee lies elsewhere in a module's cubin). For a module, only its sm_90 cubins that name ``containing`` are disassembled (the
    whole module's SASS takes minutes)."""
    from cupipe import _kernel_cache

    funcs, name = {}, None
    with tempfile.TemporaryDirectory() as d:
        path = Path(path)
        if path.suffix == ".cubin":
            data = _kernel_cache._read_valid(path) or path.read_bytes()
            cubins = [Path(d) / "k.cubin"]
            cubins[0].write_bytes(data)
        else:
            subprocess.run(["cuobjdump", "-xelf", "all", os.path.abspath(path)], cwd=d, check=True, capture_output=True)
            cubins = [p for p in sorted(Path(d).glob("*.sm_90*.cubin")) if containing.encode() in p.read_bytes()]
        for cubin in cubins:
            out = subprocess.run(["cuobjdump", "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
            for line in out.splitlines():
                line = line.strip()
                if line.startswith("Function :"):
                    name = line.split(":", 1)[1].strip()
                    funcs[name] = []
                elif name is not None and line and not line.startswith(("code for", ".", "-")):
                    line = " ".join(line.split())  # cuobjdump pads columns per file
                    if " CALL." in line:  # a callee's address: where its cubin placed the function
                        line = re.sub(r"0x[0-9a-f]+", "0x?", line)
                    funcs[name].append(line)
    return {k: "\n".join(v) for k, v in funcs.items()}


def pytest_configure(config):
    """Under xdist each worker's intra-op pool would take every core: the workers' share instead
    (the CPU-device tests of 14 workers on 16 cores were otherwise oversubscribed many times over)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


def pytest_sessionstart(session):
    """CUPIPE_TEST_PRECOMPILE=1: precompile every instance of the 1-D/2-D stencils, copies and
    reductions for the GPU (their tests walk the whole mechanism x stages matrix), once (in the
    xdist controller, or the only process), before any test runs. stencil3d's tests use a few of
    its instances and compile them on first use."""
    if os.environ.get("CUPIPE_TEST_PRECOMPILE") != "1" or hasattr(session.config, "workerinput"):
        return
    if not cupipe.cuda_available():
        return
    from cupipe import _kernel_cache

    arch = _kernel_cache.arch_of(cupipe._C.cuda_device_info(0)["sm"])
    got = cupipe.precompile(["stream_copy", "stencil2d", "reduce"], arch=arch)
    print(f"\ncupipe: precompiled for {arch}: {got}")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("CUPIPE_SLOW", "0") == "1":
        return
    skip_slow = pytest.mark.skip(reason="slow test; set CUPIPE_SLOW=1 to run it")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip_slow)


@pytest.fixture(params=DEVICES)
def device(request):
    """"cpu" always; "cuda" when a GPU is available (otherwise that variant is skipped)."""
    return request.param


# ----------------------------------------------------------------------------- inputs

def make_input(shape: Sequence[int], dtype: torch.dtype = torch.float32, device="cpu",
               seed: int = 0, *, low: float = -1.0, high: float = 1.0) -> torch.Tensor:
    """Seeded random tensor, generated on the CPU (so it is the same on every device) and moved.

    Floats: uniform in [low, high). Integers: the dtype's full range (clipped to int32 range for
    the sampling). bool: random bits. complex: uniform real and imaginary parts.
    """
    g = torch.Generator().manual_seed(seed)
    shape = tuple(shape)
    if dtype.is_complex:
        real_dtype = torch.float32 if dtype == torch.complex64 else torch.float64
        re = torch.rand(shape, generator=g, dtype=real_dtype) * (high - low) + low
        im = torch.rand(shape, generator=g, dtype=real_dtype) * (high - low) + low
        t = torch.complex(re, im)
    elif dtype.is_floating_point:
        t = (torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low).to(dtype)
    elif dtype == torch.bool:
        t = torch.randint(0, 2, shape, generator=g).to(torch.bool)
    else:
        info = torch.iinfo(dtype)
        lo, hi = max(info.min, -2**31), min(info.max, 2**31 - 1)
        t = torch.randint(lo, hi, shape, generator=g, dtype=torch.int64).to(dtype)
    return t.to(device)


def make_weights(shape: Sequence[int], dtype=torch.float32, device="cpu", seed: int = 1000):
    return make_input(shape, dtype, device, seed)


def poison_allocator(nbytes: int, device="cuda") -> None:
    """Fill, then free, a block of ``nbytes`` 0xFF bytes, so that the caching allocator hands
    the poisoned memory to the next allocation of a similar size (an op that forgets to write
    part of its output then shows NaNs / -1s instead of plausible zeros). No-op on CPU."""
    if torch.device(device).type != "cuda":
        return
    n = max(int(nbytes), 1)
    t = torch.full((n,), 0xFF, dtype=torch.uint8, device=device)
    torch.cuda.synchronize(device)
    del t


# ----------------------------------------------------------------------------- tolerances

def tol(dtype: torch.dtype, taps: int = 1) -> Tuple[float, float]:
    """(atol, rtol) for comparing a cupipe result with a float64 reference cast to ``dtype``.

    The kernels accumulate in fp32 (fp64 for fp64 inputs), so:
      * fp64: only summation-order differences, ~1e-15 per tap.
      * fp32: summation-order rounding, ~1e-7 relative per tap; 1e-5 scaled by the number of
        taps (or summed elements) covers it with margin.
      * fp16 / bf16: accumulation is in fp32, so the error is dominated by rounding the *output*
        to the half type (fp16: 2^-11 ~ 5e-4 relative, bf16: 2^-8 ~ 4e-3 relative), plus
        reference and result possibly rounding to neighbouring half values; 1e-2 / 3e-2 allow a
        couple of ulps at magnitude ~1 and a little for the accumulation.
    """
    taps = max(int(taps), 1)
    if dtype == torch.float64:
        return 1e-12 * taps, 1e-12
    if dtype == torch.float32:
        return 1e-5 * taps, 1e-5 * taps
    if dtype == torch.float16:
        return 1e-2 * max(1.0, math.sqrt(taps) / 4), 1e-2
    if dtype == torch.bfloat16:
        return 3e-2 * max(1.0, math.sqrt(taps) / 4), 3e-2
    raise ValueError(f"no tolerance for {dtype}")


def assert_close(actual: torch.Tensor, expected: torch.Tensor, *, atol: float, rtol: float,
                 what: str = "", equal_nan: bool = False) -> None:
    """assert_close that also checks shape/dtype/device and reports where the worst error is."""
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.device == expected.device, f"{what}: device {actual.device} != {expected.device}"

    def msg(m):
        if actual.numel() == 0:
            return f"{what}: {m}"
        diff = (actual.double() - expected.double()).abs()
        diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
        if equal_nan:
            both_nan = torch.isnan(actual.double()) & torch.isnan(expected.double())
            diff = torch.where(both_nan, torch.zeros_like(diff), diff)
        idx = int(diff.flatten().argmax())
        pos = tuple(int(i) for i in torch.unravel_index(torch.tensor(idx), actual.shape)) \
            if actual.dim() else ()
        return (f"{what}: {m}\n  worst at {pos}: got {actual.flatten()[idx].item()!r}, "
                f"expected {expected.flatten()[idx].item()!r} (atol={atol}, rtol={rtol})")

    torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol, equal_nan=equal_nan,
                               msg=msg)


# ----------------------------------------------------------------------------- references

def _pad_mode(boundary: str) -> str:
    return "constant" if boundary == "zero" else boundary


def stencil1d_ref(x: torch.Tensor, w: torch.Tensor, dim: int = -1, boundary: str = "zero",
                  out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """Eager reference: F.conv1d(F.pad(x, (r, r), mode), w) along ``dim``, computed in the dtype
    of ``x`` (pass float64 tensors for an exact-ish reference). Differentiable.

    Circular only matches cupipe's modular wrap for size >= r (F.pad's restriction); use
    stencil1d_loop_ref for smaller sizes."""
    r = (w.shape[0] - 1) // 2
    dim = dim % x.dim()
    xt = x.movedim(dim, -1)
    shape = xt.shape
    n = shape[-1]
    flat = xt.reshape(-1, 1, n)
    if r > 0 and flat.shape[0] > 0:
        flat = F.pad(flat, (r, r), mode=_pad_mode(boundary))
    elif r > 0:
        flat = flat.new_zeros((0, 1, n + 2 * r))
    y = F.conv1d(flat, w.to(flat.dtype)[None, None])
    y = y.reshape(shape).movedim(-1, dim)
    return y if out_dtype is None else y.to(out_dtype)


def stencil2d_ref(x: torch.Tensor, w: torch.Tensor, boundary: str = "zero",
                  out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """Eager reference: F.conv2d(F.pad(x.reshape(-1,1,H,W), (rx,rx,ry,ry), mode), w[None,None])."""
    ry, rx = (w.shape[0] - 1) // 2, (w.shape[1] - 1) // 2
    H, W = x.shape[-2], x.shape[-1]
    flat = x.reshape(-1, 1, H, W)
    if (ry or rx) and flat.shape[0] > 0:
        flat = F.pad(flat, (rx, rx, ry, ry), mode=_pad_mode(boundary))
    elif ry or rx:
        flat = flat.new_zeros((0, 1, H + 2 * ry, W + 2 * rx))
    y = F.conv2d(flat, w.to(flat.dtype)[None, None])
    y = y.reshape(x.shape)
    return y if out_dtype is None else y.to(out_dtype)


def _map_index(i: int, n: int, boundary: str) -> int:
    """Python mirror of the documented boundary semantics (-1 = read a zero)."""
    if 0 <= i < n:
        return i
    if boundary == "zero":
        return -1
    if boundary == "replicate":
        return 0 if i < 0 else n - 1
    if boundary == "circular":
        return i % n  # true modular wrap, any number of times
    if boundary == "reflect":
        if n == 1:
            return 0
        period = 2 * (n - 1)
        m = i % period
        return m if m < n else period - m
    raise ValueError(boundary)


def stencil1d_loop_ref(x: torch.Tensor, w: torch.Tensor, dim: int = -1,
                       boundary: str = "zero") -> torch.Tensor:
    """Slow plain-Python reference with explicit index mapping (float64 result), for the cases
    F.pad cannot express (circular with size < r). Use on small inputs only."""
    r = (w.shape[0] - 1) // 2
    xt = x.double().movedim(dim, -1).cpu()
    wl = w.double().cpu().tolist()
    n = xt.shape[-1]
    rows = xt.reshape(-1, n).tolist()
    out = []
    for row in rows:
        o = []
        for i in range(n):
            acc = 0.0
            for k in range(2 * r + 1):
                j = _map_index(i + k - r, n, boundary)
                if j >= 0:
                    acc += wl[k] * row[j]
            o.append(acc)
        out.append(o)
    y = torch.tensor(out, dtype=torch.float64).reshape(xt.shape).movedim(-1, dim)
    return y.to(x.device)


def stencil2d_loop_ref(x: torch.Tensor, w: torch.Tensor, boundary: str = "zero") -> torch.Tensor:
    """Slow plain-Python 2-D reference with explicit index mapping (float64 result)."""
    ry, rx = (w.shape[0] - 1) // 2, (w.shape[1] - 1) // 2
    H, W = x.shape[-2], x.shape[-1]
    planes = x.double().cpu().reshape(-1, H, W).tolist()
    wl = w.double().cpu().tolist()
    out = []
    for p in planes:
        op = []
        for i in range(H):
            row = []
            for j in range(W):
                acc = 0.0
                for a in range(2 * ry + 1):
                    yi = _map_index(i + a - ry, H, boundary)
                    if yi < 0:
                        continue
                    for c in range(2 * rx + 1):
                        xj = _map_index(j + c - rx, W, boundary)
                        if xj >= 0:
                            acc += wl[a][c] * p[yi][xj]
                row.append(acc)
            op.append(row)
        out.append(op)
    return torch.tensor(out, dtype=torch.float64).reshape(x.shape).to(x.device)


def reduce_ref(x: torch.Tensor, op: str, dim=None, keepdim: bool = False,
               dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """torch's own reduction, computed in fp32 for fp16/bf16 inputs (cupipe accumulates in fp32)
    and in fp64 for fp64 outputs, then cast to the result dtype."""
    out_dtype = dtype if dtype is not None else x.dtype
    if x.dtype == torch.float64 or out_dtype == torch.float64:
        acc = torch.float64
    else:
        acc = torch.float32
    xa = x.to(acc)
    f = getattr(torch, op)
    if dim is None:
        if keepdim:
            y = f(xa, dim=list(range(x.dim())), keepdim=True) if x.dim() else f(xa)
        else:
            y = f(xa)
    else:
        y = f(xa, dim, keepdim)
    return y.to(out_dtype)


# ----------------------------------------------------------------------------- a model

class Smoother(torch.nn.Module):
    """Every op in one differentiable module: blur (stencil2d, reflect) -> row profile (stencil1d
    along W, circular, through torch.ops) -> per-image statistics (reduce: mean, amax, sum) and a
    stream_copy. Returns (a scalar total, the per-row peaks)."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.w2 = torch.nn.Parameter(torch.rand(3, 5, generator=g, dtype=torch.float64).float())
        self.w1 = torch.nn.Parameter(torch.rand(5, generator=g, dtype=torch.float64).float())

    def forward(self, x):
        y = cupipe.stencil2d(x, self.w2, boundary="reflect")
        y = torch.tanh(y)
        z = torch.ops.cupipe.stencil1d(y, self.w1, dim=-1, boundary="circular")
        m = cupipe.reduce(z, "mean", [-2, -1], keepdim=True)
        peak = cupipe.reduce(z * z, "amax", -1)
        total = cupipe.reduce(z - m, "sum", None)
        c = cupipe.stream_copy(peak)
        return total + c.sum(), c


def assert_runs_like_eager(eager: Smoother, run, run_params, x: torch.Tensor, what: str, *,
                           fwd_tol: float, grad_tol: float) -> None:
    """``run`` (a compiled or exported Smoother, with its weights ``run_params`` = [w2, w1])
    against ``eager`` on ``x``: the outputs within ``fwd_tol`` (the per-row peaks within a tenth
    of it), then the gradients of ``total + peaks.sum()`` w.r.t. x, w2 and w1 within
    ``grad_tol`` (weights: 10x the atol, as their gradients sum over every output)."""
    xe = x.clone().requires_grad_()
    xr = x.clone().requires_grad_()
    te, pe = eager(xe)
    tr, pr = run(xr)
    assert_close(tr, te, atol=fwd_tol, rtol=fwd_tol, what=f"{what} forward total")
    assert_close(pr, pe, atol=fwd_tol / 10, rtol=fwd_tol / 10, what=f"{what} forward peak")
    ge = torch.autograd.grad(te + pe.sum(), [xe, eager.w2, eager.w1])
    gr = torch.autograd.grad(tr + pr.sum(), [xr, *run_params])
    for name, a, b in zip(("x", "w2", "w1"), gr, ge):
        atol = grad_tol if name == "x" else 10 * grad_tol
        assert_close(a, b, atol=atol, rtol=grad_tol, what=f"{what} grad {name}")
