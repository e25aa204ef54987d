"""Host time per call of each op (Python wrapper, dispatch, launch; the GPU work is tiny), and
the suite's smallest reduction timed queued, where the host's time per call can exceed the
GPU's: (4096, 4096) fp32 (64 MiB) against eager torch.sum.

    python scripts/host_overhead.py
"""
import time

import torch

import cupipe
from cupipe.timing import time_ms

x = torch.randn(1024, device="cuda")
w3 = torch.randn(3, 3, device="cuda")
w1 = torch.randn(9, device="cuda")
img = torch.randn(64, 64, device="cuda")


def host_us(f, n=2000):
    for _ in range(50):
        f()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        f()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}")
print("host us per call (small inputs):")
for name, f in [("torch x.sum(-1)", lambda: img.sum(-1)), ("torch y.copy_(x)", lambda: x.clone()),
                ("cupipe.reduce sum rows", lambda: cupipe.reduce(img, "sum", -1)),
                ("cupipe.reduce sum all", lambda: cupipe.reduce(x)),
                ("torch.ops.cupipe.reduce", lambda: torch.ops.cupipe.reduce(img, "sum", [-1], False)),
                ("cupipe._C.call_reduce", lambda: cupipe._C.call_reduce(img, "sum", [-1], False, None, "auto", 0)),
                ("cupipe.stream_copy", lambda: cupipe.stream_copy(x)),
                ("cupipe.stencil2d 3x3", lambda: cupipe.stencil2d(img, w3)),
                ("cupipe.stencil1d r=4", lambda: cupipe.stencil1d(x, w1))]:
    print(f"  {name:28s} {host_us(f):6.1f}")
v = torch.randn(4096, 4096, device="cuda")
comp = torch.compile(lambda t: t.sum(-1))
te, tc = time_ms(lambda: v.sum(-1), reps=100), time_ms(lambda: comp(v), reps=100)
to = time_ms(lambda: cupipe.reduce(v, "sum", -1), reps=100)
tx = time_ms(lambda: torch.ops.cupipe._reduce_ex(v, "sum", [-1], False, "primitives", 2, 0, 0), reps=100)
print(f"(4096, 4096) sum(-1), queued ms: eager {te:.4f}, compiled {tc:.4f}, cupipe.reduce {to:.4f} "
      f"({min(te, tc) / to:.3f}x best torch), _reduce_ex {tx:.4f}")
