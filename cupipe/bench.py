"""cupipe benchmark CLI: ``python -m cupipe.bench`` (or ``cupipe-bench``).

Every figure is a median of many CUDA-event-timed repetitions on fresh random data, and every
ratio is against PyTorch measured in the same run: the device's copy bandwidth (``y.copy_(x)``,
bytes read + written), eager ops, and ``torch.compile`` of the same computation.

    python -m cupipe.bench --suite engine      # mechanism x stages for stream_copy + latency study
    python -m cupipe.bench --suite ops         # the DESIGN.md performance suite
    python -m cupipe.bench --quick --out DIR   # fewer reps / configs; JSON + CSV written to DIR
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F

import cupipe

MECHS = ["sync", "pipeline", "pipeline_thread", "primitives", "cg", "barrier", "specialized", "tma"]


def time_ms(fn: Callable[[], object], reps: int = 30, warmup: int = 3) -> float:
    """Median milliseconds of `fn` over `reps` CUDA-event-timed calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def gbps(nbytes: float, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9


def _compile(fn):
    try:
        return torch.compile(fn, fullgraph=True)
    except Exception as e:  # pragma: no cover
        print(f"  (torch.compile unavailable: {e})")
        return None


def _try_time(fn, reps):
    try:
        return time_ms(fn, reps)
    except Exception as e:  # compile failures surface at first call
        print(f"  (skipped: {type(e).__name__}: {str(e).splitlines()[0][:120]})")
        return float("nan")


class Results:
    def __init__(self):
        self.rows: List[Dict] = []

    def add(self, **kw):
        self.rows.append(kw)
        if os.environ.get("CUPIPE_BENCH_STREAM"):  # one line per measurement, as it comes
            print("  " + "  ".join(f"{k}={_fmt(v)}" for k, v in kw.items()), flush=True)

    def print_table(self, title: str, keys: List[str]):
        rows = [r for r in self.rows if r.get("table") == title]
        if not rows:
            return
        print(f"\n== {title}")
        widths = {k: max(len(k), *(len(_fmt(r.get(k))) for r in rows)) for k in keys}
        print("  ".join(k.ljust(widths[k]) for k in keys))
        for r in rows:
            print("  ".join(_fmt(r.get(k)).ljust(widths[k]) for k in keys))


def _fmt(v):
    if isinstance(v, float):
        return "nan" if math.isnan(v) else (f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}")
    return "" if v is None else str(v)


def copy_bandwidth(n: int, reps: int) -> float:
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    ms = time_ms(lambda: y.copy_(x), reps)
    return gbps(2 * x.numel() * 4, ms)


def suite_engine(res: Results, quick: bool, reps: int, copy_bw: float):
    n = 1 << 28
    x = torch.randn(n, device="cuda")
    mechs = [m for m in MECHS if m != "tma" or torch.cuda.get_device_capability() >= (9, 0)]
    stages_list = [1, 2, 4, 8] if quick else [1, 2, 3, 4, 6, 8]
    for m in mechs:
        for s in stages_list:
            ms = _try_time(lambda: cupipe.stream_copy(x, mechanism=m, stages=s, vec_bytes=16), reps)
            bw = gbps(2 * n * 4, ms)
            res.add(table="stream_copy 2^28 fp32 (vec 16)", mechanism=m, stages=s, ms=ms, GBps=bw,
                    vs_copy=bw / copy_bw)
    for m in ["primitives", "pipeline", "cg"]:
        for v in [4, 8]:
            ms = _try_time(lambda: cupipe.stream_copy(x, mechanism=m, stages=4, vec_bytes=v), reps)
            bw = gbps(2 * n * 4, ms)
            res.add(table="stream_copy copy width", mechanism=m, stages=4, vec=v, GBps=bw, vs_copy=bw / copy_bw)
    # Latency-bound: one block per SM, so only the ring's depth keeps bytes in flight.
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    xs = torch.randn(1 << 24, device="cuda")
    for m in ["sync", "primitives", "pipeline", "tma"] if "tma" in mechs else ["sync", "primitives", "pipeline"]:
        for s in [1, 2, 3, 4, 6, 8]:
            ms = _try_time(lambda: torch.ops.cupipe._stream_copy_ex(xs, m, s, 16, 8192, sms), reps)
            bw = gbps(2 * xs.numel() * 4, ms)
            res.add(table="latency-bound: 1 block/SM, 8 KiB tiles, 2^24 fp32", mechanism=m, stages=s, GBps=bw,
                    vs_copy=bw / copy_bw)


def _slicing_stencil2d(x, w, ry, rx):
    H, W = x.shape[-2:]
    xp = F.pad(x, (rx, rx, ry, ry))
    out = None
    for a in range(2 * ry + 1):
        for c in range(2 * rx + 1):
            t = w[a, c] * xp[..., a:a + H, c:c + W]
            out = t if out is None else out + t
    return out


def _slicing_stencil1d(x, w, r):
    n = x.shape[-1]
    xp = F.pad(x, (r, r))
    out = None
    for k in range(2 * r + 1):
        t = w[k] * xp[..., k:k + n]
        out = t if out is None else out + t
    return out


def _check_close(got, ref, what):
    """The benchmark refuses to time a wrong answer. References are computed without TF32
    (cuDNN convolutions default to it on Ampere and newer, which is less accurate than fp32)."""
    prev = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        torch.testing.assert_close(got.float(), ref().float(), rtol=1e-3, atol=1e-3,
                                   msg=lambda m: f"{what}: {m}")
    finally:
        torch.backends.cudnn.allow_tf32 = prev


def suite_ops(res: Results, quick: bool, reps: int, copy_bw: float, use_compile: bool):
    tbl = "performance suite"
    # ---- reductions
    cases = [("sum all", (1 << 28,), None, torch.float32), ("sum rows", (8192, 32768), -1, torch.float32),
             ("sum rows", (4194304, 64), -1, torch.float32), ("sum rows", (4096, 4096), -1, torch.float32),
             ("sum cols", (32768, 8192), 0, torch.float32), ("sum all bf16", (1 << 28,), None, torch.bfloat16),
             ("amax all", (1 << 28,), None, torch.float32)]
    if quick:
        cases = [c for c in cases if c[1] in ((1 << 28,), (4194304, 64), (32768, 8192))]
    for name, shape, dim, dtype in cases:
        x = torch.randn(shape, device="cuda", dtype=dtype)
        op = "amax" if name.startswith("amax") else "sum"
        nbytes = x.numel() * x.element_size()
        if op == "sum" and dtype == torch.bfloat16:
            eager = lambda: x.sum(dtype=torch.float32)
            ours = lambda: cupipe.reduce(x, "sum", dim, dtype=torch.float32)
        elif dim is None:
            eager = (lambda: x.amax()) if op == "amax" else (lambda: x.sum())
            ours = lambda: cupipe.reduce(x, op)
        else:
            eager = lambda: x.sum(dim)
            ours = lambda: cupipe.reduce(x, "sum", dim)
        nred = x.numel() if dim is None else x.shape[dim]
        torch.testing.assert_close(ours().float(), eager().float(), rtol=1e-3, atol=1e-4 * math.sqrt(nred),
                                   msg=lambda m: f"{name} {tuple(shape)}: {m}")
        t_ours, t_eager = _try_time(ours, reps), _try_time(eager, reps)
        t_comp = _try_time(_compile(eager), reps) if use_compile else float("nan")
        best = min(t for t in (t_eager, t_comp) if not math.isnan(t))
        res.add(table=tbl, workload=f"{name} {tuple(shape)} {str(dtype)[6:]}", ms=t_ours, GBps=gbps(nbytes, t_ours),
                vs_copy=gbps(nbytes, t_ours) / copy_bw, eager_ms=t_eager, compiled_ms=t_comp,
                speedup_vs_best=best / t_ours)
    # ---- stencils
    H = W = 8192
    x = torch.randn(H, W, device="cuda")
    star = torch.tensor([[0, 1, 0], [1, -4, 1], [0, 1, 0]], device="cuda", dtype=torch.float32)
    st_cases = [("5-point star", star), ("3x3 box", torch.randn(3, 3, device="cuda")),
                ("5x5 box", torch.randn(5, 5, device="cuda")), ("9x9 box", torch.randn(9, 9, device="cuda"))]
    if quick:
        st_cases = st_cases[:3]
    for name, w in st_cases:
        r = (w.shape[0] - 1) // 2
        ours = lambda: cupipe.stencil2d(x, w)
        conv = lambda: F.conv2d(x[None, None], w[None, None], padding=r)
        _check_close(ours(), lambda: conv()[0, 0], f"stencil2d {name}")
        t_ours, t_conv = _try_time(ours, reps), _try_time(conv, reps)
        t_comp = float("nan")
        if use_compile:
            f = _compile(lambda: _slicing_stencil2d(x, w, r, r))
            t_comp = _try_time(f, reps)
        nbytes = 2 * x.numel() * 4
        best = min(t for t in (t_conv, t_comp) if not math.isnan(t))
        res.add(table=tbl, workload=f"stencil2d {name} {H}x{W}", ms=t_ours, GBps=gbps(nbytes, t_ours),
                vs_copy=gbps(nbytes, t_ours) / copy_bw, eager_ms=t_conv, compiled_ms=t_comp,
                speedup_vs_best=best / t_ours)
    x1 = torch.randn(1 << 28, device="cuda")
    w1 = torch.randn(9, device="cuda")
    ours = lambda: cupipe.stencil1d(x1, w1)
    conv = lambda: F.conv1d(x1[None, None], w1[None, None], padding=4)
    _check_close(ours(), lambda: conv()[0, 0], "stencil1d r=4")
    t_ours, t_conv = _try_time(ours, reps), _try_time(conv, reps)
    t_comp = _try_time(_compile(lambda: _slicing_stencil1d(x1, w1, 4)), reps) if use_compile else float("nan")
    nbytes = 2 * x1.numel() * 4
    best = min(t for t in (t_conv, t_comp) if not math.isnan(t))
    res.add(table=tbl, workload="stencil1d r=4 2^28", ms=t_ours, GBps=gbps(nbytes, t_ours),
            vs_copy=gbps(nbytes, t_ours) / copy_bw, eager_ms=t_conv, compiled_ms=t_comp, speedup_vs_best=best / t_ours)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="cupipe-bench", description=__doc__.splitlines()[0])
    ap.add_argument("--suite", choices=["engine", "ops", "all"], default="all")
    ap.add_argument("--quick", action="store_true", help="fewer configurations and repetitions")
    ap.add_argument("--reps", type=int, default=0, help="timed repetitions per measurement")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile baselines")
    ap.add_argument("--out", default=None, help="directory for results.json / results.csv")
    args = ap.parse_args(argv)
    if not cupipe.cuda_available():
        print("cupipe-bench: no CUDA device (or cupipe built without CUDA); nothing to measure.")
        return 0
    reps = args.reps or (10 if args.quick else 30)
    dev = torch.cuda.get_device_name()
    print(f"device: {dev} | torch {torch.__version__} | cupipe {cupipe.__version__} | "
          f"{time.strftime('%Y-%m-%d')} | median of {reps} reps")
    copy_bw = copy_bandwidth(1 << 28, reps)
    print(f"copy bandwidth (y.copy_(x), 2^28 fp32, read+write): {copy_bw:.0f} GB/s")
    res = Results()
    if args.suite in ("engine", "all"):
        suite_engine(res, args.quick, reps, copy_bw)
        res.print_table("stream_copy 2^28 fp32 (vec 16)", ["mechanism", "stages", "ms", "GBps", "vs_copy"])
        res.print_table("stream_copy copy width", ["mechanism", "stages", "vec", "GBps", "vs_copy"])
        res.print_table("latency-bound: 1 block/SM, 8 KiB tiles, 2^24 fp32", ["mechanism", "stages", "GBps", "vs_copy"])
    if args.suite in ("ops", "all"):
        suite_ops(res, args.quick, reps, copy_bw, not args.no_compile)
        res.print_table("performance suite", ["workload", "ms", "GBps", "vs_copy", "eager_ms", "compiled_ms",
                                              "speedup_vs_best"])
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        meta = {"device": dev, "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"), "copy_GBps": copy_bw}
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump({"meta": meta, "rows": res.rows}, f, indent=1)
        keys = sorted({k for r in res.rows for k in r})
        with open(os.path.join(args.out, "results.csv"), "w", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=keys)
            wr.writeheader()
            wr.writerows(res.rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
