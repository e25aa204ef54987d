"""Persistent stencil grids against their tile columns: the launcher's grid (one wave of resident
blocks, a few blocks fewer where the wave shares a factor with the tile columns) against the
plain wave (`blocks` given, taken as it is), on planes whose tile columns divide the wave (4096
wide: the 2-byte tensor-core tiles are 33 columns and 528 blocks of four per SM are 16 x 33) and on
8192-wide ones, in one run, next to y.copy_(x) of the same tensor.

    python scripts/stencil_grid_columns.py [--reps 50]

Every timed call's result is compared with F.conv2d first (fp32 accumulation; tolerances as the
tests'). `blocks_per_sm` is what the narrow kernels that run persistent here are resident at:
four 128-thread blocks per SM (the 2-byte tensor-core 5x5/7x7 and the fp32 9x9).
"""
import argparse

import torch
import torch.nn.functional as F

import cupipe  # noqa: F401  (registers torch.ops.cupipe)
from cupipe.timing import time_ms

p = argparse.ArgumentParser()
p.add_argument("--reps", type=int, default=50)
p.add_argument("--blocks-per-sm", type=int, default=4)
args = p.parse_args()
sms = torch.cuda.get_device_properties(0).multi_processor_count
wave = args.blocks_per_sm * sms

CASES = [  # (name, dtype, side, k)
    ("fp16 5x5", torch.float16, 4096, 5),
    ("bf16 5x5", torch.bfloat16, 4096, 5),
    ("fp16 7x7", torch.float16, 4096, 7),
    ("fp32 9x9", torch.float32, 4096, 9),
    ("fp16 5x5", torch.float16, 8192, 5),
    ("fp32 9x9", torch.float32, 8192, 9),
]
TOL = {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}

torch.manual_seed(0)
print(f"{'case':10} {'plane':>10} {'copy_ ms':>9} {'wave ms':>9} {'launcher ms':>12} {'gain':>6} {'x copy_':>8}")
for name, dt, side, k in CASES:
    x = torch.randn(side, side, device="cuda", dtype=dt)
    w = torch.randn(k, k, device="cuda", dtype=dt) / k
    ref = F.conv2d(x.float()[None, None], w.float()[None, None], padding=k // 2)[0, 0]
    out = {}
    for label, blocks in (("wave", wave), ("launcher", 0)):
        call = lambda b=blocks: torch.ops.cupipe._stencil2d_ex(x, w, "zero", "auto", 0, 0, b)
        y = call()
        err = ((y.float() - ref).abs() / (1 + ref.abs())).max().item()
        assert err <= TOL[dt], f"{name} {side}^2 {label}: error {err}"
        out[label] = time_ms(call, reps=args.reps)
    c = torch.empty_like(x)
    t_copy = time_ms(lambda: c.copy_(x), reps=args.reps)
    print(f"{name:10} {side:>5}^2    {t_copy:9.4f} {out['wave']:9.4f} {out['launcher']:12.4f} "
          f"{out['wave'] / out['launcher']:6.3f} {t_copy / out['launcher']:8.3f}")
