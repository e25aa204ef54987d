"""Grid-size study: persistent grids (one wave of resident blocks, each streaming many tiles)
against oversubscribed ones (several waves, the hardware's block scheduler balancing the SMs),
for stream_copy, the suite's reductions and stencils, next to y.copy_(x) and torch in one run.

    python scripts/grid_sweep.py [--waves 0,2,4,8,32] [--copy sync/1,primitives/2,tma/2]
                                 [--reduce primitives/1,primitives/2] [--cases all,rows,cols]
                                 [--stencil 3x3:primitives/2,5x5:f16:auto/0,1d:barrier/2]

A wave count w asks for w x SMs blocks (0: the launcher's default, one wave of resident blocks).
Every timed call's result is checked against torch first.
"""
import argparse

import torch

import cupipe
from cupipe.timing import time_ms

p = argparse.ArgumentParser()
p.add_argument("--waves", default="0,1,2,4,8,16,32")
p.add_argument("--copy", default="sync/1,primitives/2,tma/2")
p.add_argument("--reduce", default="primitives/1,primitives/2")
p.add_argument("--cases", default="all,rows,cols")
p.add_argument("--stencil", default="3x3:primitives/2,1d:barrier/2,1d:pipeline/4")
p.add_argument("--reps", type=int, default=50)
args = p.parse_args()
waves = [int(w) for w in args.waves.split(",")]
sms = torch.cuda.get_device_properties(0).multi_processor_count


def configs(s):
    return [(c.split("/")[0], int(c.split("/")[1])) for c in s.split(",") if c]


torch.manual_seed(0)
N = 1 << 28
x = torch.randn(N, device="cuda")
y = torch.empty_like(x)
t_copy = time_ms(lambda: y.copy_(x), reps=args.reps)
gbs = 2 * x.numel() * 4 / t_copy / 1e6
print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, {sms} SMs")
print(f"copy_ 2^28 fp32: {t_copy:.4f} ms ({gbs:.0f} GB/s)")

print("\nstream_copy ms (x copy_): config | " + " | ".join(f"w={w}" for w in waves))
for m, s in configs(args.copy):
    row = []
    for w in waves:
        fn = lambda: torch.ops.cupipe._stream_copy_ex(x, m, s, 16, 0, w * sms)
        assert torch.equal(fn(), x), f"stream_copy {m}/{s} waves={w}"
        t = time_ms(fn, reps=args.reps)
        row.append(f"{t:.4f} ({t_copy / t:.3f})")
    print(f"{m}/{s} | " + " | ".join(row))

compiled_sum = torch.compile(lambda t: t.sum())
cases = [  # name, input, dims, eager torch
    ("all", x, None, lambda: x.sum()),
    ("all-compiled", x, None, lambda: compiled_sum(x)),
    ("rows", x.view(4194304, 64), [-1], lambda: x.view(4194304, 64).sum(-1)),
    ("cols", x.view(32768, 8192), [0], lambda: x.view(32768, 8192).sum(0)),
]
cases = [c for c in cases if any(w == c[0] for w in args.cases.split(","))]
print("\nreduce sum ms (x torch eager; read bytes / copy_'s read+write rate): case config | torch | "
      + " | ".join(f"w={w}" for w in waves))
for name, v, dims, ref in cases:
    t_ref = time_ms(ref, reps=args.reps)
    expect = ref()
    for m, s in configs(args.reduce):
        row = []
        for w in waves:
            fn = lambda: torch.ops.cupipe._reduce_ex(v, "sum", dims, False, m, s, 0, w * sms)
            err = (fn() - expect).abs().max().item() / max(1.0, expect.abs().max().item())
            assert err < 1e-4, f"reduce {name} {m}/{s} waves={w}: relative error {err}"
            t = time_ms(fn, reps=args.reps)
            row.append(f"{t:.4f} ({t_ref / t:.3f}; {t_copy / 2 / t:.3f})")
        print(f"{name} {m}/{s} | {t_ref:.4f} | " + " | ".join(row))

img = x[: 8192 * 8192].view(8192, 8192)
weights2d = {"3x3": torch.rand(3, 3), "5x5": torch.rand(5, 5), "9x9": torch.rand(9, 9),
             "5pt": torch.tensor([[0., 1, 0], [1, -4, 1], [0, 1, 0]])}
w9 = torch.rand(9, device="cuda")
print("\nstencil ms (x copy_ of the same bytes): case config | " + " | ".join(f"w={w}" for w in waves))
for spec in [c for c in args.stencil.split(",") if c]:
    # case[:dtype]:mechanism/stages, case one of 3x3 5pt 5x5 9x9 1d, dtype f32 (default) f16 bf16
    parts = spec.split(":")
    case, cfg = parts[0], parts[-1]
    dt = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[parts[1] if len(parts) == 3 else "f32"]
    m, s = cfg.split("/")[0], int(cfg.split("/")[1])
    if case == "1d":
        v = x.to(dt)
        ref = cupipe.stencil1d(v, w9, mechanism="sync", stages=1)
        call = lambda w: torch.ops.cupipe._stencil1d_ex(v, w9, -1, "zero", m, s, 0, w * sms)
    else:
        v = img.to(dt)
        wt = weights2d[case].cuda()
        ref = cupipe.stencil2d(v, wt, mechanism="sync", stages=1)
        call = lambda w: torch.ops.cupipe._stencil2d_ex(v, wt, "zero", m, s, 0, w * sms)
    out = torch.empty_like(v)
    base = time_ms(lambda: out.copy_(v), reps=args.reps)
    row = []
    for w in waves:
        torch.testing.assert_close(call(w), ref, atol=1e-4 if dt == torch.float32 else 1e-2, rtol=1e-5)
        t = time_ms(lambda: call(w), reps=args.reps)
        row.append(f"{t:.4f} ({base / t:.3f})")
    print(f"{spec} (copy_ {base:.4f}) | " + " | ".join(row))
