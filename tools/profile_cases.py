"""Usage: python3 tools/profile_cases.py [--once]      (GPU; tools/gpu_check.sh step `profile`)

The suite's key kernels on fresh random data: without --once a timing table (median ms, GB/s, x
copy_) and stage-size sweeps of stream_copy and the reductions, which the benchmark CLI keeps at
their defaults; with --once each case launched once, for Nsight Compute's kernel filter:

    ncu --metrics ... python3 tools/profile_cases.py --once
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
hopper = cupipe.tma_available()
mechs = ["sync", "pipeline", "pipeline_thread", "primitives", "cg", "barrier", "specialized"] + (["tma"] if hopper else [])
for m, tile, s in itertools.product(mechs, [8192, 16384, 32768], [2, 4]):
    fn = lambda: torch.ops.cupipe._stream_copy_ex(x, m, s, 16, tile, 0)
    try:
        ms = time_ms(fn, reps=30)
    except RuntimeError as e:  # too much shared memory for this stage count
        print(f"  {m:11s} tile {tile:6d} stages {s}: {str(e)[:60]}")
        continue
    gbs = 2 * x.nbytes / ms / 1e6
    print(f"  {m:11s} tile {tile:6d} stages {s}: {gbs:6.0f} GB/s {gbs / (2 * x.nbytes / copy_ms / 1e6):5.2f}x")

print("\nreduce: stage bytes x mechanism x stages (ms; x = torch's ms / ours, torch eager or compiled, the faster)")
views = {
    "sum all": (x, None, lambda: x.sum()),
    "sum rows (4194304,64)": (x.view(4194304, 64), [-1], lambda: x.view(4194304, 64).sum(-1)),
    "sum rows (8192,32768)": (x.view(8192, 32768), [-1], lambda: x.view(8192, 32768).sum(-1)),
    "sum cols (32768,8192)": (x.view(32768, 8192), [0], lambda: x.view(32768, 8192).sum(0)),
}
rmechs = ["primitives", "pipeline_thread", "barrier", "specialized"] + (["tma"] if hopper else [])
for name, (v, dims, ref) in views.items():
    torch_ms = time_ms(ref, reps=50)
    try:
        torch._dynamo.reset()  # a static-shape kernel per view (the lambda's code object is shared)
        compiled = torch.compile(lambda t: t.sum(dims) if dims else t.sum(), dynamic=False)
        torch_ms = min(torch_ms, time_ms(lambda: compiled(v), reps=50))
    except Exception as e:  # noqa: BLE001 - the sweep still runs against eager
        print(f"  torch.compile failed for {name}: {str(e)[:60]}")
    want = ref()
    auto_ms = time_ms(lambda: cupipe.reduce(v, "sum", dims), reps=50)
    print(f"  {name}: torch best {torch_ms:.3f} ms, cupipe auto {auto_ms:.3f} ms ({torch_ms / auto_ms:.2f}x)")
    rows = []
    for m, s, tile in itertools.product(rmechs, [2, 4], [8192, 16384, 32768]):
        fn = lambda: torch.ops.cupipe._reduce_ex(v, "sum", dims, False, m, s, tile)
        try:
            got = fn()
        except RuntimeError as e:
            print(f"    {m:15s} {s} {tile:6d}: {str(e)[:60]}")
            continue
        if not torch.allclose(got, want, rtol=1e-4, atol=1e-2 * max(1.0, v.numel() / want.numel()) ** 0.5):
            print(f"    {m:15s} {s} {tile:6d}: WRONG RESULT")
            continue
        rows.append((time_ms(fn, reps=30), m, s, tile))
    rows.sort()
    for ms, m, s, tile in rows[:6]:
        print(f"    {m:15s} stages {s} tile {tile:6d}: {ms:.3f} ms {torch_ms / ms:5.2f}x")
    print(f"    ({len(rows)} configurations; slowest {rows[-1][0]:.3f} ms)" if rows else "    (none ran)")
