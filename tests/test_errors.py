"""The bad-input table: every bad call raises a specific Python exception whose message names the
op and the argument, and the process (and CUDA context) stays usable afterwards."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import torch

import cupipe
from conftest import HAS_CUDA, assert_close, make_input, stencil1d_ref, tma_supported


def _f(shape, dtype=torch.float32, device="cpu"):
    return make_input(shape, dtype, device, seed=0)


# (id, fn(device) -> None, exception type, regex the message must match)
BAD_CALLS = [
    # unsupported dtypes of x / weights / dtype=
    ("stencil1d-int32-x", lambda d: cupipe.stencil1d(_f((8,), torch.int32, d), _f((3,), device=d)),
     TypeError, r"cupipe\.stencil1d: x must be float32.*Int"),
    ("stencil2d-int32-x", lambda d: cupipe.stencil2d(_f((4, 4), torch.int32, d), _f((3, 3), device=d)),
     TypeError, r"cupipe\.stencil2d: x must be float32.*Int"),
    ("stencil1d-complex-x", lambda d: cupipe.stencil1d(_f((8,), torch.complex64, d), _f((3,), device=d)),
     TypeError, r"cupipe\.stencil1d: x must be"),
    ("reduce-int32-x", lambda d: cupipe.reduce(_f((8,), torch.int32, d)),
     TypeError, r"cupipe\.reduce: x must be float32.*Int"),
    ("reduce-bool-x", lambda d: cupipe.reduce(_f((8,), torch.bool, d), "amax"),
     TypeError, r"cupipe\.reduce: x must be"),
    ("stencil1d-int-weights", lambda d: cupipe.stencil1d(_f((8,), device=d), torch.ones(3, dtype=torch.int64, device=d)),
     TypeError, r"cupipe\.stencil1d: weights must be a floating-point"),
    ("stencil2d-int-weights", lambda d: cupipe.stencil2d(_f((4, 4), device=d), torch.ones(3, 3, dtype=torch.int32, device=d)),
     TypeError, r"cupipe\.stencil2d: weights must be a floating-point"),
    ("reduce-int-dtype", lambda d: cupipe.reduce(_f((8,), device=d), "sum", dtype=torch.int32),
     TypeError, r"cupipe\.reduce: dtype must be"),
    # weight shapes
    ("stencil1d-even-weights", lambda d: cupipe.stencil1d(_f((8,), device=d), _f((4,), device=d)),
     ValueError, r"cupipe\.stencil1d: weights must have odd length"),
    ("stencil1d-empty-weights", lambda d: cupipe.stencil1d(_f((8,), device=d), _f((0,), device=d)),
     ValueError, r"cupipe\.stencil1d: weights must have odd length"),
    ("stencil2d-even-weights", lambda d: cupipe.stencil2d(_f((8, 8), device=d), _f((4, 3), device=d)),
     ValueError, r"cupipe\.stencil2d: weights must have odd sizes"),
    ("stencil2d-even-weights-w", lambda d: cupipe.stencil2d(_f((8, 8), device=d), _f((3, 2), device=d)),
     ValueError, r"cupipe\.stencil2d: weights must have odd sizes"),
    ("stencil2d-3d-weights", lambda d: cupipe.stencil2d(_f((8, 8), device=d), _f((1, 3, 3), device=d)),
     ValueError, r"cupipe\.stencil2d: weights must be 2-D"),
    ("stencil2d-1d-weights", lambda d: cupipe.stencil2d(_f((8, 8), device=d), _f((3,), device=d)),
     ValueError, r"cupipe\.stencil2d: weights must be 2-D"),
    ("stencil1d-2d-weights", lambda d: cupipe.stencil1d(_f((8,), device=d), _f((3, 3), device=d)),
     ValueError, r"cupipe\.stencil1d: weights must be 1-D"),
    # x shapes
    ("stencil1d-0d-x", lambda d: cupipe.stencil1d(torch.tensor(1.0, device=d), _f((3,), device=d)),
     ValueError, r"cupipe\.stencil1d: x must have at least 1 dim"),
    ("stencil2d-1d-x", lambda d: cupipe.stencil2d(_f((8,), device=d), _f((3, 3), device=d)),
     ValueError, r"cupipe\.stencil2d: x must have at least 2 dims"),
    # unknown strings
    ("stencil1d-boundary", lambda d: cupipe.stencil1d(_f((8,), device=d), _f((3,), device=d), boundary="mirror"),
     ValueError, r"cupipe\.stencil1d: unknown boundary 'mirror'"),
    ("stencil2d-boundary", lambda d: cupipe.stencil2d(_f((8, 8), device=d), _f((3, 3), device=d), boundary="constant"),
     ValueError, r"cupipe\.stencil2d: unknown boundary 'constant'"),
    ("stencil1d-boundary-case", lambda d: cupipe.stencil1d(_f((8,), device=d), _f((3,), device=d), boundary="Zero"),
     ValueError, r"unknown boundary 'Zero'"),
    ("reduce-op", lambda d: cupipe.reduce(_f((8,), device=d), "max"),
     ValueError, r"cupipe\.reduce: unknown op 'max'"),
    ("reduce-op-prod", lambda d: cupipe.reduce(_f((8,), device=d), "prod"),
     ValueError, r"cupipe\.reduce: unknown op 'prod'"),
    ("stream_copy-mechanism", lambda d: cupipe.stream_copy(_f((8,), device=d), mechanism="async"),
     ValueError, r"cupipe\.stream_copy: unknown mechanism 'async'"),
    ("stencil1d-mechanism", lambda d: cupipe.stencil1d(_f((8,), device=d), _f((3,), device=d), mechanism="fast"),
     ValueError, r"cupipe\.stencil1d: unknown mechanism 'fast'"),
    ("stencil2d-mechanism", lambda d: cupipe.stencil2d(_f((8, 8), device=d), _f((3, 3), device=d), mechanism=""),
     ValueError, r"cupipe\.stencil2d: unknown mechanism ''"),
    ("reduce-mechanism", lambda d: cupipe.reduce(_f((8,), device=d), mechanism="TMA"),
     ValueError, r"cupipe\.reduce: unknown mechanism 'TMA'"),
    # reflect with size <= r
    ("stencil1d-reflect-small", lambda d: cupipe.stencil1d(_f((2, 3), device=d), _f((7,), device=d), boundary="reflect"),
     ValueError, r"cupipe\.stencil1d: boundary='reflect' needs size > radius.*size 3, radius 3"),
    ("stencil1d-reflect-small-dim0", lambda d: cupipe.stencil1d(_f((2, 9), device=d), _f((5,), device=d), dim=0, boundary="reflect"),
     ValueError, r"cupipe\.stencil1d: boundary='reflect' needs size > radius"),
    ("stencil2d-reflect-small-H", lambda d: cupipe.stencil2d(_f((2, 9), device=d), _f((5, 3), device=d), boundary="reflect"),
     ValueError, r"cupipe\.stencil2d: boundary='reflect' needs size > radius along H"),
    ("stencil2d-reflect-small-W", lambda d: cupipe.stencil2d(_f((9, 1), device=d), _f((3, 3), device=d), boundary="reflect"),
     ValueError, r"cupipe\.stencil2d: boundary='reflect' needs size > radius along W"),
    # dims
    ("stencil1d-dim-high", lambda d: cupipe.stencil1d(_f((4, 5), device=d), _f((3,), device=d), dim=2),
     IndexError, r"cupipe\.stencil1d: dim 2 is out of range"),
    ("stencil1d-dim-low", lambda d: cupipe.stencil1d(_f((4, 5), device=d), _f((3,), device=d), dim=-3),
     IndexError, r"cupipe\.stencil1d: dim -3 is out of range"),
    ("reduce-dim-high", lambda d: cupipe.reduce(_f((4, 5), device=d), "sum", 2),
     IndexError, r"cupipe\.reduce: dim 2 is out of range"),
    ("reduce-dim-low-list", lambda d: cupipe.reduce(_f((4, 5), device=d), "mean", [0, -3]),
     IndexError, r"cupipe\.reduce: dim -3 is out of range"),
    ("reduce-dim-0d", lambda d: cupipe.reduce(torch.tensor(1.0, device=d), "sum", 1),
     IndexError, r"cupipe\.reduce: dim 1 is out of range"),
    ("reduce-dim-repeated", lambda d: cupipe.reduce(_f((4, 5), device=d), "sum", [0, 0]),
     ValueError, r"cupipe\.reduce: dim 0 appears more than once"),
    ("reduce-dim-repeated-neg", lambda d: cupipe.reduce(_f((4, 5), device=d), "amax", [1, -1]),
     ValueError, r"cupipe\.reduce: dim 1 appears more than once"),
    ("reduce-dim-repeated-0d", lambda d: cupipe.reduce(torch.tensor(1.0, device=d), "sum", [0, -1]),
     ValueError, r"cupipe\.reduce: dim 0 appears more than once"),
    # stages / vec_bytes
    ("stream_copy-stages-neg", lambda d: cupipe.stream_copy(_f((8,), device=d), stages=-1),
     ValueError, r"cupipe\.stream_copy: stages must be 0 \(auto\) or 1\.\.8, got -1"),
    ("stream_copy-stages-9", lambda d: cupipe.stream_copy(_f((8,), device=d), stages=9),
     ValueError, r"cupipe\.stream_copy: stages must be .* got 9"),
    ("stencil1d-stages-neg", lambda d: cupipe.stencil1d(_f((8,), device=d), _f((3,), device=d), stages=-2),
     ValueError, r"cupipe\.stencil1d: stages must be"),
    ("stencil1d-stages-9", lambda d: cupipe.stencil1d(_f((8,), device=d), _f((3,), device=d), stages=9),
     ValueError, r"cupipe\.stencil1d: stages must be"),
    ("stencil2d-stages-neg", lambda d: cupipe.stencil2d(_f((8, 8), device=d), _f((3, 3), device=d), stages=-1),
     ValueError, r"cupipe\.stencil2d: stages must be"),
    ("stencil2d-stages-9", lambda d: cupipe.stencil2d(_f((8, 8), device=d), _f((3, 3), device=d), stages=9),
     ValueError, r"cupipe\.stencil2d: stages must be"),
    ("reduce-stages-neg", lambda d: cupipe.reduce(_f((8,), device=d), stages=-1),
     ValueError, r"cupipe\.reduce: stages must be"),
    ("reduce-stages-9", lambda d: cupipe.reduce(_f((8,), device=d), stages=9),
     ValueError, r"cupipe\.reduce: stages must be"),
    ("stream_copy-vec3", lambda d: cupipe.stream_copy(_f((8,), device=d), vec_bytes=3),
     ValueError, r"cupipe\.stream_copy: vec_bytes must be 0 \(auto\), 4, 8 or 16, got 3"),
    ("stream_copy-vec32", lambda d: cupipe.stream_copy(_f((8,), device=d), vec_bytes=32),
     ValueError, r"cupipe\.stream_copy: vec_bytes must be .* got 32"),
    ("stream_copy-vec-neg", lambda d: cupipe.stream_copy(_f((8,), device=d), vec_bytes=-4),
     ValueError, r"cupipe\.stream_copy: vec_bytes must be .* got -4"),
    # dtype= only for sum/mean/norm; correction= for var/std; ord= for norm; argmax over one dim
    ("reduce-amax-dtype", lambda d: cupipe.reduce(_f((8,), device=d), "amax", dtype=torch.float64),
     ValueError, r"cupipe\.reduce: dtype= is only accepted for op='sum', 'mean' and 'norm'.*amax"),
    ("reduce-var-dtype", lambda d: cupipe.reduce(_f((8,), device=d), "var", dtype=torch.float64),
     ValueError, r"cupipe\.reduce: dtype= is only accepted .*var"),
    ("reduce-sum-correction", lambda d: cupipe.reduce(_f((8,), device=d), "sum", correction=0),
     ValueError, r"cupipe\.reduce: correction= is only used by op='var' and 'std'"),
    ("reduce-var-ord", lambda d: cupipe.reduce(_f((8,), device=d), "var", ord=1),
     ValueError, r"cupipe\.reduce: ord= is only used by op='norm'"),
    ("reduce-norm-nan-ord", lambda d: cupipe.reduce(_f((8,), device=d), "norm", ord=float("nan")),
     ValueError, r"cupipe\.reduce: ord must be a number"),
    ("reduce-argmax-dims", lambda d: cupipe.reduce(_f((4, 8), device=d), "argmax", [0, 1]),
     ValueError, r"cupipe\.reduce: op='argmax' takes dim=None or one dim"),
    ("reduce-argmin-empty", lambda d: cupipe.reduce(_f((0, 8), device=d), "argmin", 0),
     ValueError, r"cupipe\.reduce: op='argmin' of an empty reduction is undefined"),
    ("reduce-amin-dtype", lambda d: cupipe.reduce(_f((8,), device=d), "amin", dtype=torch.float32),
     ValueError, r"cupipe\.reduce: dtype= is only accepted .*amin"),
    # empty amax
    ("reduce-amax-empty", lambda d: cupipe.reduce(_f((0, 4), device=d), "amax", 0),
     ValueError, r"cupipe\.reduce: op='amax' of an empty reduction"),
]


def _good_call(device):
    """A valid op after a failed one: its result must still be right."""
    x = make_input((4, 33), torch.float32, device, seed=1)
    w = make_input((5,), torch.float32, device, seed=2)
    y = cupipe.stencil1d(x, w, boundary="circular")
    assert_close(y, stencil1d_ref(x.double(), w.double(), -1, "circular").float(),
                 atol=1e-5, rtol=1e-5, what="good call after an error")
    s = cupipe.reduce(x, "sum", 1)
    assert_close(s, x.double().sum(1).float(), atol=1e-4, rtol=1e-5, what="good reduce")
    c = cupipe.stream_copy(x)
    assert torch.equal(c, x)
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


@pytest.mark.parametrize("name,fn,exc,match", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_input(device, name, fn, exc, match):
    with pytest.raises(exc, match=match):
        fn(device)
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize()
    _good_call(device)


@pytest.mark.parametrize("name,fn,exc,match", BAD_CALLS[:12], ids=[c[0] for c in BAD_CALLS[:12]])
def test_bad_input_inference_mode(device, name, fn, exc, match):
    """Also under inference_mode (the Autograd/ADInplaceOrView layers are skipped there): same
    error, same type."""
    with torch.inference_mode():
        with pytest.raises(exc, match=match):
            fn(device)
    _good_call(device)


def test_many_errors_in_a_row(device):
    """Many errors in a row leave the process (and CUDA context) usable."""
    for _ in range(3):
        for name, fn, exc, match in BAD_CALLS:
            with pytest.raises(exc):
                fn(device)
    _good_call(device)


def test_bad_input_requires_grad(device):
    """With inputs that require grad (the autograd layer must not swallow or change the error)."""
    x = make_input((8,), torch.float32, device).requires_grad_()
    w = make_input((4,), torch.float32, device).requires_grad_()
    with pytest.raises(ValueError, match="odd length"):
        cupipe.stencil1d(x, w)
    with pytest.raises(ValueError, match="unknown op"):
        cupipe.reduce(x, "median")
    with pytest.raises(ValueError, match="stages"):
        cupipe.stream_copy(x, stages=100)
    _good_call(device)


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device and a CUDA build of cupipe")
def test_device_mix():
    x = make_input((4, 16), torch.float32, "cuda")
    with pytest.raises(ValueError, match=r"cupipe\.stencil1d: weights must be on the same device as x"):
        cupipe.stencil1d(x, torch.ones(3))
    with pytest.raises(ValueError, match=r"cupipe\.stencil2d: weights must be on the same device as x"):
        cupipe.stencil2d(x, torch.ones(3, 3))
    with pytest.raises((ValueError, RuntimeError), match=r"device"):
        cupipe.stencil1d(x.cpu(), torch.ones(3, device="cuda"))
    _good_call("cuda")


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device and a CUDA build of cupipe")
def test_tma_where_unsupported():
    """'tma' on a GPU before sm_90, or on one whose kernels this build runs from older PTX (no
    sm_90 code, e.g. TORCH_CUDA_ARCH_LIST="8.0+PTX" on an H100: there the kernels' 'tma' is a
    trap), raises a ValueError that says which, before any launch; the context stays usable."""
    if tma_supported():
        pytest.skip("this GPU and build support tma")
    if torch.cuda.get_device_capability() < (9, 0):
        match = r"mechanism='tma' needs an sm_90 \(Hopper\) or newer GPU"
    else:
        match = r"mechanism='tma' needs kernels compiled for sm_90 or newer.*TORCH_CUDA_ARCH_LIST"
    x = make_input((4, 16), torch.float32, "cuda")
    for fn in (lambda: cupipe.stream_copy(x, mechanism="tma"),
               lambda: cupipe.stencil1d(x, torch.ones(3, device="cuda"), mechanism="tma"),
               lambda: cupipe.stencil2d(x, torch.ones(3, 3, device="cuda"), mechanism="tma"),
               lambda: cupipe.reduce(x, mechanism="tma")):
        with pytest.raises(ValueError, match=match):
            fn()
    _good_call("cuda")


@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("readelf") is None,
                    reason="reads the module's ELF dynamic section with readelf")
def test_module_shares_the_shared_libstdcxx():
    """The module uses torch's shared C++ runtime: a static copy of libstdc++ in it (no libstdc++
    among its needed libraries) crashed the interpreter on the first number formatted into an
    error message (setup.py's _torch_libstdcxx)."""
    out = subprocess.run(["readelf", "-d", cupipe._C.__file__], capture_output=True, text=True, check=True).stdout
    needed = [line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]
    assert any(n.startswith("libstdc++.so") for n in needed), needed


def test_error_message_with_numbers_raises_in_a_fresh_process():
    """A formatted error (numbers in the message) raises ValueError, in a process of its own so that
    a crash fails this test instead of the test worker."""
    code = ("import torch, cupipe\n"
            "try:\n"
            "    cupipe.stencil1d(torch.randn(3, 4), torch.ones(3), steps=0)\n"
            "except ValueError as e:\n"
            "    print('raised', e)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "steps must be >= 1, got 0" in p.stdout
