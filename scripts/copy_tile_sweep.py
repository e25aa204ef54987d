"""stream_copy over stage sizes and tiles per block: persistent grids (one wave of resident
blocks streaming many tiles) against short-lived blocks of one to a few tiles, the shape of an
elementwise kernel (y.copy_(x) runs one 16-byte vector per thread, 4 KiB per block), for every
mechanism, next to y.copy_(x) in the same run. Each result is checked against x first.

    python scripts/copy_tile_sweep.py [--configs sync/1,tma/1,...] [--tiles 2048,4096,8192] [--per 0,1,2,4]

--per: tiles per block (0: the launcher's persistent grid).
"""
import argparse

import torch

import cupipe  # noqa: F401  (registers the ops)
from cupipe.timing import time_ms

p = argparse.ArgumentParser()
p.add_argument("--configs", default="sync/1,sync/2,primitives/1,primitives/2,pipeline/1,pipeline_thread/1,cg/1,"
                                    "barrier/1,specialized/2,tma/1,tma/2")
p.add_argument("--tiles", default="2048,4096,8192,16384")
p.add_argument("--per", default="0,1,2,4")
p.add_argument("--reps", type=int, default=50)
args = p.parse_args()
configs = [(c.split("/")[0], int(c.split("/")[1])) for c in args.configs.split(",")]
tiles = [int(t) for t in args.tiles.split(",")]
pers = [int(t) for t in args.per.split(",")]

torch.manual_seed(0)
x = torch.randn(1 << 28, device="cuda")
y = torch.empty_like(x)
t_copy = time_ms(lambda: y.copy_(x), reps=args.reps)
print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}; copy_ 2^28 fp32 {t_copy:.4f} ms")
print("ms (x copy_): config tile | " + " | ".join(f"{p} tiles/block" if p else "persistent" for p in pers))
best = {}
for m, s in configs:
    for tile in tiles:
        row = []
        for per in pers:
            blocks = 0 if per == 0 else (x.nbytes + tile * per - 1) // (tile * per)
            fn = lambda: torch.ops.cupipe._stream_copy_ex(x, m, s, 16, tile, blocks)
            try:
                assert torch.equal(fn(), x), f"{m}/{s} tile {tile} per {per}"
            except RuntimeError as e:  # a stage that does not fit: say so and go on
                row.append("n/a")
                print(f"  {m}/{s} tile {tile} per {per}: {str(e).splitlines()[0][:100]}")
                continue
            t = time_ms(fn, reps=args.reps)
            row.append(f"{t:.4f} ({t_copy / t:.3f})")
            if t < best.get(m, (1e9,))[0]:
                best[m] = (t, s, tile, per)
        print(f"{m}/{s} {tile} | " + " | ".join(row))
print("best per mechanism: " + "; ".join(f"{m} {s}/{tile}B/{per or 'persistent'} {t_copy / t:.3f}x"
                                         for m, (t, s, tile, per) in best.items()))
print(f"copy_ again: {time_ms(lambda: y.copy_(x), reps=args.reps):.4f} ms")
