"""The 2-byte 5x5 box on the tensor cores by the kind of its weights and input (H x W = 8192^2):
fp32 weights (two weight terms; box 1/25 is scaled by 2^4 and unscaled in the epilogue, randn
weights are not) against the same weights in x's dtype (one term), on normal and uniform inputs,
each against copy_ of the same tensor timed in the same loop.

    python scripts/stencil_weight_terms.py
"""
import torch

import cupipe
from cupipe.timing import time_ms

torch.manual_seed(0)
H = W = 8192
weights = {"box 1/25": torch.ones(5, 5, device="cuda") / 25, "randn": torch.randn(5, 5, device="cuda")}
inputs = {"randn": torch.randn(H, W, device="cuda"), "uniform": torch.rand(H, W, device="cuda") * 2 - 1}
print(f"{'dtype':9} {'input':8} {'weights':9} {'w dtype':8} {'ms':>7} {'copy_ ms':>8} {'x copy_':>8}")
for dt in (torch.float16, torch.bfloat16):
    for iname, img in inputs.items():
        x = img.to(dt)
        buf = torch.empty_like(x)
        for wname, w in weights.items():
            for wd in (torch.float32, dt):
                wk = w.to(wd)
                ms = time_ms(lambda: cupipe.stencil2d(x, wk), reps=50)
                cms = time_ms(lambda: buf.copy_(x), reps=50)
                print(f"{str(dt)[6:]:9} {iname:8} {wname:9} {str(wd)[6:]:8} {ms:7.4f} {cms:8.4f} {cms / ms:8.3f}")
