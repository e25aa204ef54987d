"""The suite's key kernels, each launched a few times on fresh random data, for Nsight Compute
(scripts/gpu_check.sh step `profile`) and for a quick timing table:

    python scripts/profile_cases.py            # median ms and GB/s of each case, with copy_
    ncu --metrics ... python scripts/profile_cases.py --once

Also sweeps stream_copy's tile size (bytes per stage) for the fastest mechanisms, which the
benchmark CLI keeps fixed.
"""
import argparse
import itertools

import torch

import cupipe
from cupipe.timing import time_ms

p = argparse.ArgumentParser()
p.add_argument("--once", action="store_true", help="one launch per case (for ncu)")
args = p.parse_args()
torch.manual_seed(0)
N = 1 << 28
x = torch.randn(N, device="cuda")
y = torch.empty_like(x)
img = torch.randn(8192, 8192, device="cuda")
cases = {
    "copy_": (lambda: y.copy_(x), 2 * x.nbytes),
    "stream_copy auto": (lambda: cupipe.stream_copy(x), 2 * x.nbytes),
    "sum all": (lambda: cupipe.reduce(x, "sum"), x.nbytes),
    "sum rows (4194304,64)": (lambda: cupipe.reduce(x.view(4194304, 64), "sum", -1), x.nbytes),
    "sum rows (8192,32768)": (lambda: cupipe.reduce(x.view(8192, 32768), "sum", -1), x.nbytes),
    "sum cols (32768,8192)": (lambda: cupipe.reduce(x.view(32768, 8192), "sum", 0), x.nbytes),
    "amax all": (lambda: cupipe.reduce(x, "amax"), x.nbytes),
    "stencil2d 3x3": (lambda: cupipe.stencil2d(img, torch.ones(3, 3, device="cuda") / 9), 2 * img.nbytes),
    "stencil2d 5x5": (lambda: cupipe.stencil2d(img, torch.ones(5, 5, device="cuda") / 25), 2 * img.nbytes),
    "stencil1d r=4": (lambda: cupipe.stencil1d(x, torch.ones(9, device="cuda") / 9), 2 * x.nbytes),
}
if args.once:
    for name, (fn, _) in cases.items():
        fn()
    torch.cuda.synchronize()
    raise SystemExit(0)
copy_ms = time_ms(cases["copy_"][0], reps=50)
print(f"{'case':32s} {'ms':>8s} {'GB/s':>8s} {'x copy_':>8s}")
for name, (fn, nbytes) in cases.items():
    ms = time_ms(fn, reps=50)
    gbs = nbytes / ms / 1e6
    print(f"{name:32s} {ms:8.3f} {gbs:8.0f} {gbs / (2 * x.nbytes / copy_ms / 1e6):8.2f}")

print("\nstream_copy 2^28 fp32: tile bytes x stages (GB/s, x copy_)")
mechs = ["sync", "primitives", "tma"] if torch.cuda.get_device_capability() >= (9, 0) else ["sync", "primitives"]
for m, tile, s in itertools.product(mechs, [4096, 8192, 16384, 32768], [2, 4]):
    fn = lambda: torch.ops.cupipe._stream_copy_ex(x, m, s, 16, tile, 0)
    try:
        ms = time_ms(fn, reps=30)
    except RuntimeError as e:  # too much shared memory for this stage count
        print(f"  {m:11s} tile {tile:6d} stages {s}: {str(e)[:60]}")
        continue
    gbs = 2 * x.nbytes / ms / 1e6
    print(f"  {m:11s} tile {tile:6d} stages {s}: {gbs:6.0f} GB/s {gbs / (2 * x.nbytes / copy_ms / 1e6):5.2f}x")
