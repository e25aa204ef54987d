"""Stencil timings for tuning the consumer: the 2-D and 1-D cases of the suite in fp32 and fp16,
for a few mechanism x stage configurations, next to y.copy_(x) of the same bytes (one run).

    python scripts/stencil_sweep.py [--configs primitives/2,tma/4,...] [--cases 3x3,1d] [--once]

--cases keeps the cases whose name contains one of the words; --once launches each kept case once
with its first configuration (for ncu's kernel filter) and prints nothing.
"""
import argparse

import torch

import cupipe
from cupipe.timing import time_ms

p = argparse.ArgumentParser()
p.add_argument("--configs", default="auto/0,primitives/2,primitives/3,primitives/4,tma/2,tma/4,barrier/2")
p.add_argument("--cases", default="", help="comma-separated substrings of the case names to keep")
p.add_argument("--once", action="store_true")
args = p.parse_args()
configs = [(c.split("/")[0], int(c.split("/")[1])) for c in args.configs.split(",")]

torch.manual_seed(0)
dev = "cuda"
img = torch.randn(8192, 8192, device=dev)
sig = torch.randn(1 << 28, device=dev)
# Weights built once: a tensor made inside the timed call would time its kernels (or a
# host-to-device copy) with every stencil (the sweeps before the sixth run's last did, ~3 us).
star = torch.tensor([[0., 1, 0], [1, -4, 1], [0, 1, 0]], device=dev)
box = {k: torch.ones(k, k, device=dev) / (k * k) for k in (3, 5, 7, 9)}
row9 = torch.ones(9, device=dev) / 9
box16 = {k: w.half() for k, w in box.items()}
boxbf = {k: w.bfloat16() for k, w in box.items()}
cases = [
    ("2d 3x3 f32", img, lambda x, m, s: cupipe.stencil2d(x, box[3], mechanism=m, stages=s)),
    ("2d 5pt f32", img, lambda x, m, s: cupipe.stencil2d(x, star, mechanism=m, stages=s)),
    ("2d 5x5 f32", img, lambda x, m, s: cupipe.stencil2d(x, box[5], mechanism=m, stages=s)),
    ("2d 9x9 f32", img, lambda x, m, s: cupipe.stencil2d(x, box[9], mechanism=m, stages=s)),
    ("2d 3x3 f16", img.half(), lambda x, m, s: cupipe.stencil2d(x, box[3], mechanism=m, stages=s)),
    ("2d 5pt f16", img.half(), lambda x, m, s: cupipe.stencil2d(x, star, mechanism=m, stages=s)),
    ("2d 5x5 f16", img.half(), lambda x, m, s: cupipe.stencil2d(x, box[5], mechanism=m, stages=s)),
    ("2d 7x7 f16", img.half(), lambda x, m, s: cupipe.stencil2d(x, box[7], mechanism=m, stages=s)),
    ("2d 9x9 f16", img.half(), lambda x, m, s: cupipe.stencil2d(x, box[9], mechanism=m, stages=s)),
    ("2d 3x3 bf16", img.bfloat16(), lambda x, m, s: cupipe.stencil2d(x, box[3], mechanism=m, stages=s)),
    ("2d 5x5 bf16", img.bfloat16(), lambda x, m, s: cupipe.stencil2d(x, box[5], mechanism=m, stages=s)),
    # Weights in x's dtype (as F.conv2d takes them): exact in it, one weight term on the tensor cores.
    ("2d 5x5 f16 w16", img.half(), lambda x, m, s: cupipe.stencil2d(x, box16[5], mechanism=m, stages=s)),
    ("2d 7x7 f16 w16", img.half(), lambda x, m, s: cupipe.stencil2d(x, box16[7], mechanism=m, stages=s)),
    ("2d 9x9 f16 w16", img.half(), lambda x, m, s: cupipe.stencil2d(x, box16[9], mechanism=m, stages=s)),
    ("2d 5x5 bf16 wbf16", img.bfloat16(), lambda x, m, s: cupipe.stencil2d(x, boxbf[5], mechanism=m, stages=s)),
    ("2d 9x9 bf16 wbf16", img.bfloat16(), lambda x, m, s: cupipe.stencil2d(x, boxbf[9], mechanism=m, stages=s)),
    ("1d r4 f32", sig, lambda x, m, s: cupipe.stencil1d(x, row9, mechanism=m, stages=s)),
    ("1d r4 f16", sig.half(), lambda x, m, s: cupipe.stencil1d(x, row9, mechanism=m, stages=s)),
    ("1d r4 bf16", sig.bfloat16(), lambda x, m, s: cupipe.stencil1d(x, row9, mechanism=m, stages=s)),
]
# fp16/bf16 run on the tensor cores where they can (csrc/kernels/stencil_mma.cuh); run the script
# again with CUPIPE_STENCIL_MMA=0 for the CUDA-core consumers.
if args.cases:
    cases = [c for c in cases if any(w in c[0] for w in args.cases.split(","))]
if args.once:
    for name, x, fn in cases:
        fn(x, *configs[0])
    torch.cuda.synchronize()
    raise SystemExit
copy_ms = {}
print("case | copy_ ms | " + " | ".join(f"{m}/{s}" for m, s in configs) + " | best x copy_")
for name, x, fn in cases:
    key = x.nbytes
    if key not in copy_ms:
        y = torch.empty_like(x)
        copy_ms[key] = time_ms(lambda: y.copy_(x), reps=30)
    row = []
    for m, s in configs:
        row.append(time_ms(lambda: fn(x, m, s), reps=20))
    print(f"{name} | {copy_ms[key]:.3f} | " + " | ".join(f"{t:.3f}" for t in row)
          + f" | {copy_ms[key] / min(row):.2f}")
