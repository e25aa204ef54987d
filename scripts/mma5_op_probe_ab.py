"""The 2-byte 5x5 box on the tensor cores in the op, set beside scripts/probe_stencil_blocks.cu
(PROBE_MMA=1, PROBE_K=5, PROBE_QUICK=1) in the same call: 8192^2, zero boundary, the probe's data
(uniform inputs with 16 significant bits) and randn, weights as the probe has them (PROBE_EXACT=0:
(i*37 % 17 - 8) / 4.1, |w| < 2, fp16 leaves them unscaled; PROBE_EXACT=2: a box 1/25, which fp16
scales by 2^5 and unscales in the epilogue) and in x's dtype (one weight term). Each case timed
the suite's way (cupipe.timing.time_ms: a spin before every call) and back to back (the probe's
way), with copy_ of the same tensor timed both ways beside it.

    python scripts/mma5_op_probe_ab.py            # then run the probes, e.g.
    for b in .probe_bin/*; do $b 50; done
"""
import torch

import cupipe
from cupipe.timing import time_ms
from queued_timing import back_to_back_ms

torch.manual_seed(0)
torch.backends.cudnn.allow_tf32 = False  # the reference: fp32 products
dev = "cuda"
N = 8192
w_probe = torch.tensor([((i * 37) % 17 - 8) / 4.1 for i in range(25)], device=dev).view(5, 5)
w_box = torch.ones(5, 5, device=dev) / 25
x16 = torch.randint(0, 65536, (N, N), device=dev).float() / 32768.0 - 1.0  # probe_fill_random's values
xn = torch.randn(N, N, device=dev)
print(f"{'dtype':9} {'x':7} {'weights':12} {'w dtype':8} {'suite ms':>9} {'b2b ms':>8} "
      f"{'copy suite':>10} {'copy b2b':>9} {'x copy suite':>12} {'x copy b2b':>10}")
for dt in (torch.float16, torch.bfloat16):
    for xname, xf in (("16-bit", x16), ("randn", xn)):
        x = xf.to(dt)
        buf = torch.empty_like(x)
        for wname, w in (("probe (0)", w_probe), ("box 1/25 (2)", w_box)):
            for wd in (torch.float32, dt):
                wk = w.to(wd)
                out = cupipe.stencil2d(x, wk)
                # The reference from the 2-byte input as the op sees it (x16's 16 bits do not fit fp16).
                ref = torch.nn.functional.conv2d(x.float()[None, None], wk.float()[None, None], padding=2)[0, 0]
                err = ((out.float() - ref).abs() / (1 + ref.abs())).max().item()
                assert err < (2e-3 if dt == torch.float16 else 1.6e-2), (dt, wname, err)
                fn = lambda: cupipe.stencil2d(x, wk)
                cp = lambda: buf.copy_(x)
                s, b = time_ms(fn, reps=50), back_to_back_ms(fn, reps=50)
                cs, cb = time_ms(cp, reps=50), back_to_back_ms(cp, reps=50)
                print(f"{str(dt)[6:]:9} {xname:7} {wname:12} {str(wd)[6:]:8} {s:9.4f} {b:8.4f} {cs:10.4f} {cb:9.4f} "
                      f"{cs / s:12.3f} {cb / b:10.3f}")
