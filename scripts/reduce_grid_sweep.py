"""Reductions over stage sizes and grid sizes: the split the plans make today (one wave of
resident blocks) against grids of w x SMs blocks, for the suite's row cases, next to eager torch
and torch.compile in the same run. Each timed configuration is checked against torch first.

    python scripts/reduce_grid_sweep.py [--cases 4096x4096,all] [--configs primitives/2,primitives/1]
                                        [--tiles 8192,16384,32768] [--waves 0,3,6,12,24,48] [--cold]
--cold evicts L2 before every timed call (the 64 MiB case otherwise reads partly from L2).
"""
import argparse

import torch

import cupipe  # noqa: F401  (registers the ops)
from cupipe.timing import time_ms

p = argparse.ArgumentParser()
p.add_argument("--cases", default="4096x4096,8192x32768,4194304x64,all,amax,bf16")
p.add_argument("--configs", default="primitives/2,primitives/1")
p.add_argument("--tiles", default="8192,16384,32768", help="bytes per stage; 0: the plan's")
p.add_argument("--waves", default="0,3,6,12,24,48")
p.add_argument("--reps", type=int, default=50)
p.add_argument("--cold", action="store_true", help="evict L2 before every timed call (time_ms cold_l2)")
args = p.parse_args()
configs = [(c.split("/")[0], int(c.split("/")[1])) for c in args.configs.split(",")]
tiles = [int(t) for t in args.tiles.split(",")]
waves = [int(w) for w in args.waves.split(",")]
sms = torch.cuda.get_device_properties(0).multi_processor_count

torch.manual_seed(0)
x = torch.randn(1 << 28, device="cuda")
xb = x.to(torch.bfloat16)
cases = {  # name: (input, op, dims, dtype)
    "4096x4096": (x[: 1 << 24].view(4096, 4096), "sum", [-1], None),
    "8192x32768": (x.view(8192, 32768), "sum", [-1], None),
    "8192x2048": (x[: 1 << 24].view(8192, 2048), "sum", [-1], None),
    "4194304x64": (x.view(4194304, 64), "sum", [-1], None),
    "all": (x, "sum", None, None),
    "amax": (x, "amax", None, None),
    "bf16": (xb, "sum", None, torch.float32),
}
print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, {sms} SMs"
      + (", L2 evicted before every timed call" if args.cold else ""))
for name in args.cases.split(","):
    v, op, dims, dt = cases[name]
    if op == "amax":
        eager = lambda v=v: v.amax()
    elif dims is None:
        eager = lambda v=v, dt=dt: v.sum(dtype=dt)
    else:
        eager = lambda v=v: v.sum(-1)
    torch._dynamo.reset()  # a static-shape kernel per case (the lambdas share one code object)
    comp = torch.compile(eager, dynamic=False)
    expect = eager().float()
    t_e, t_c = time_ms(eager, reps=args.reps, cold_l2=args.cold), time_ms(comp, reps=args.reps, cold_l2=args.cold)
    t_best = min(t_e, t_c)
    t_auto = time_ms(lambda: cupipe.reduce(v, op, dims, dtype=dt), reps=args.reps, cold_l2=args.cold)
    print(f"\n{name}: eager {t_e:.4f} ms, compiled {t_c:.4f}, cupipe auto {t_auto:.4f} ({t_best / t_auto:.3f}x best torch)")
    print("config tile | " + " | ".join("plan" if w == 0 else f"w={w}" for w in waves) + "   (ms, x best torch)")
    for m, s in configs:
        for tile in tiles:
            row = []
            for w in waves:
                fn = lambda: torch.ops.cupipe._reduce_ex(v, op, dims, False, m, s, tile, w * sms)
                try:
                    got = fn()
                except RuntimeError:  # the stages do not fit shared memory at this size
                    row.append("n/a")
                    continue
                if dt is not None:
                    got = got.to(dt)
                err = (got.float() - expect).abs().max().item() / max(1.0, expect.abs().max().item())
                assert err < (1e-2 if dt is not None else 1e-4), f"{name} {m}/{s} tile {tile} w={w}: relative error {err}"
                t = time_ms(fn, reps=args.reps, cold_l2=args.cold)
                row.append(f"{t:.4f} ({t_best / t:.3f})")
            print(f"{m}/{s} {tile} | " + " | ".join(row))
