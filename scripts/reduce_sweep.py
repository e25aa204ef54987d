"""Reduction timings for tuning: the suite's reductions next to eager torch in one run, timed
both ways (queued: back-to-back calls, the GPU's time; synced: a synchronize after every call,
which adds the host's dispatch time), then a mechanism x stages sweep of chosen cases.

    python scripts/reduce_sweep.py [--configs primitives/2,primitives/4,...] [--cases cols,all]
                                   [--tiles 16384,32768]

--tiles adds the swept cases at those stage sizes (bytes per stage, through _reduce_ex).
"""
import argparse

import torch

import cupipe
from cupipe.timing import time_ms

p = argparse.ArgumentParser()
p.add_argument("--configs", default="primitives/2,primitives/3,primitives/4,pipeline_thread/4,barrier/4,tma/4")
p.add_argument("--cases", default="cols", help="comma-separated substrings of the cases to sweep")
p.add_argument("--tiles", default="", help="comma-separated stage sizes in bytes for the sweep")
p.add_argument("--reps", type=int, default=50)
args = p.parse_args()
configs = [(c.split("/")[0], int(c.split("/")[1])) for c in args.configs.split(",")]

torch.manual_seed(0)
N = 1 << 28
x = torch.randn(N, device="cuda")
xb = x.to(torch.bfloat16)
cases = [  # name, input, cupipe args, eager reference
    ("sum all", x, ("sum", None, None), lambda: x.sum()),
    ("sum rows (4194304,64)", x.view(4194304, 64), ("sum", [-1], None), lambda: x.view(4194304, 64).sum(-1)),
    ("sum cols (32768,8192)", x.view(32768, 8192), ("sum", [0], None), lambda: x.view(32768, 8192).sum(0)),
    ("sum cols (8192,32768)", x.view(8192, 32768), ("sum", [0], None), lambda: x.view(8192, 32768).sum(0)),
    ("sum all bf16->fp32", xb, ("sum", None, torch.float32), lambda: xb.sum(dtype=torch.float32)),
    ("amax all", x, ("amax", None, None), lambda: x.amax()),
]


def ours(v, a, m="auto", s=0):
    op, dim, dt = a
    return lambda: cupipe.reduce(v, op, dim, dtype=dt, mechanism=m, stages=s)


print("case | torch queued ms | cupipe queued ms | x torch | torch synced ms | cupipe synced ms | x torch | max abs err")
for name, v, a, ref in cases:
    tq, oq = time_ms(ref, reps=args.reps), time_ms(ours(v, a), reps=args.reps)
    ts, os_ = time_ms(ref, reps=args.reps, queued=False), time_ms(ours(v, a), reps=args.reps, queued=False)
    err = (ours(v, a)().double() - ref().double()).abs().max().item()
    print(f"{name} | {tq:.4f} | {oq:.4f} | {tq / oq:.3f} | {ts:.4f} | {os_:.4f} | {ts / os_:.3f} | {err:.2e}")

print("\nsweep (queued ms): case | torch | " + " | ".join(f"{m}/{s}" for m, s in configs))
for name, v, a, ref in cases:
    if not any(w in name for w in args.cases.split(",")):
        continue
    row = [time_ms(ours(v, a, m, s), reps=args.reps) for m, s in configs]
    print(f"{name} | {time_ms(ref, reps=args.reps):.4f} | " + " | ".join(f"{t:.4f}" for t in row))
    for tile in [int(t) for t in args.tiles.split(",") if t]:
        op, dim, _ = a
        row = []
        for m, s in configs:
            try:
                row.append(f"{time_ms(lambda: torch.ops.cupipe._reduce_ex(v, op, dim, False, m, s, tile), reps=args.reps):.4f}")
            except RuntimeError:  # the stages do not fit shared memory at this size
                row.append("-")
        print(f"  {name} at {tile} B per stage | | " + " | ".join(row))
