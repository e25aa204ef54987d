"""Usage: python3 tools/older_code_check.py   (GPU, on a build for an older architecture's PTX:)
           TORCH_CUDA_ARCH_LIST="8.0+PTX" pip install --no-build-isolation --no-deps -e .

A build whose kernels run on this GPU as an older architecture's PTX (e.g. no sm_90 code on an
H100, the driver JIT-compiles compute_80): cuda_device_info reports the kernels' architecture
(code_sm) below the device's, mechanism='tma' is refused with a ValueError before any launch (tma
is a trap in such code), auto (the older architecture's table) gives eager PyTorch's results for
every op, and the CUDA context is still usable afterwards. Exits non-zero on the first failure.
"""
from __future__ import annotations

import sys
import time

import torch
import torch.nn.functional as F

import cupipe


def timed(name, fn):
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    print(f"  {name}: {time.perf_counter() - t0:.1f} s (first call, JIT included)")
    return out


def main() -> int:
    info = cupipe._C.cuda_device_info(torch.cuda.current_device())
    print("build:", cupipe.build_info.get("arch_list"), "| device:", torch.cuda.get_device_name(), info)
    if info["code_sm"] >= 90 or info["code_sm"] >= info["sm"]:
        print("this build has code for the device's architecture: nothing to check here")
        return 1
    assert not cupipe.tma_available(), "tma_available() must be False"

    x = torch.randn(3, 70, 90, device="cuda")
    w2, w1 = torch.randn(5, 5, device="cuda"), torch.randn(9, device="cuda")
    for name, fn in [("stream_copy", lambda: cupipe.stream_copy(x, mechanism="tma")),
                     ("stencil1d", lambda: cupipe.stencil1d(x, w1, mechanism="tma")),
                     ("stencil2d", lambda: cupipe.stencil2d(x, w2, mechanism="tma")),
                     ("reduce", lambda: cupipe.reduce(x, mechanism="tma"))]:
        try:
            fn()
        except ValueError as e:
            assert "needs kernels compiled for sm_90" in str(e), str(e)
            print(f"  {name}(mechanism='tma'): ValueError: {e}")
        else:
            raise AssertionError(f"{name}(mechanism='tma') ran on a build without sm_90 code")

    g = torch.Generator(device="cuda").manual_seed(0)
    big = torch.randn(1 << 24, device="cuda", generator=g)
    assert torch.equal(timed("stream_copy auto", lambda: cupipe.stream_copy(big)), big)
    # Whole-tensor sums take a partials pass, launched as a dependent kernel only where the
    # kernels hold griddepcontrol (code_sm >= 90): here a plain launch, ordered by the stream.
    for _ in range(3):
        s = timed("reduce sum (all) auto", lambda: cupipe.reduce(big, "sum"))
        torch.testing.assert_close(s, big.double().sum().float(), rtol=1e-5, atol=1e-3)
    rows = torch.randn(4096, 4096, device="cuda", generator=g)
    torch.testing.assert_close(timed("reduce rows auto", lambda: cupipe.reduce(rows, "sum", -1)),
                               rows.sum(-1), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(cupipe.reduce(rows, "amax", 0), rows.amax(0), rtol=0, atol=0)
    plane = torch.randn(2, 1000, 1030, device="cuda", generator=g)
    ref = F.conv2d(plane.double()[:, None], w2.double()[None, None], padding=2)[:, 0].float()
    torch.testing.assert_close(timed("stencil2d 5x5 fp32 auto", lambda: cupipe.stencil2d(plane, w2)), ref,
                               rtol=1e-5, atol=1e-4)
    half = plane.half()
    ref = F.conv2d(half.double()[:, None], w2.double()[None, None], padding=2)[:, 0]
    torch.testing.assert_close(timed("stencil2d 5x5 fp16 auto", lambda: cupipe.stencil2d(half, w2)).double(), ref,
                               rtol=2e-3, atol=2e-3)
    ref = F.conv1d(plane.double().reshape(-1, 1, 1030), w1.double()[None, None], padding=4).reshape(plane.shape)
    torch.testing.assert_close(timed("stencil1d r=4 auto", lambda: cupipe.stencil1d(plane, w1)), ref.float(),
                               rtol=1e-5, atol=1e-4)
    assert torch.equal(cupipe.stream_copy(x), x)  # the context is still usable
    print("older_code_check: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
