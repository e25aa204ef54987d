"""Does the fp32 9x9 box's time depend on its data? The op (cupipe.stencil2d, 8192^2, zero
boundary) on the suite's data (randn plane, randn weights) and on the data of
scripts/probe_stencil_wide.cu (uniform inputs with 16 significant bits, weights (i*37 % 17 - 8)/4.1),
each held busy for ~1 s while NVML reads the SM clock and the board power (scripts/nvml_clock.py;
until the twenty-eighth run nvidia-smi's power.draw, which read 370-450 W under the 9x9 where NVML
read ~700 W and the power cap after each chunk), beside the
8192^3 SGEMM (TF32 off) that the extras take as the FP32 limit, on the same two kinds of data.
Each case is timed three ways: cupipe.timing.time_ms queued (a spin before each call, the suite's
way) and synchronized, and back to back like the probe; the last column is the output's address
(MiB), to tell a placement effect from a timing one. (The twenty-seventh run's tables came from the
first two columns alone; the back-to-back column and the address were added after it.)
The twenty-eighth run's answer: the same address in every case and back-to-back times as spread as
the others; the spread is the board's power cap (scripts/box9_clock.py, BENCHMARKS.md).

    ROUNDS=3 python scripts/box9_data_ab.py
"""
import os

import torch

import cupipe
from cupipe.timing import time_ms
from nvml_clock import hold, settled
from queued_timing import back_to_back_ms

torch.manual_seed(0)
dev = "cuda"
N = 8192
torch.backends.cuda.matmul.allow_tf32 = False


def sixteen_bit_uniform(*shape):
    # probe_fill_random's values: (h & 0xffff) / 32768 - 1
    return torch.randint(0, 65536, shape, device=dev).float() / 32768.0 - 1.0


x_randn = torch.randn(N, N, device=dev)
x_probe = sixteen_bit_uniform(N, N)
x_unif = torch.rand(N, N, device=dev) * 2 - 1  # full mantissas, same range as the probe's
w_randn = torch.randn(9, 9, device=dev)
w_probe = torch.tensor([((i * 37) % 17 - 8) / 4.1 for i in range(81)], device=dev).view(9, 9)
x_zero = torch.zeros(N, N, device=dev)  # a bound: no toggling in the multipliers

cases = {
    "9x9 randn x, randn w (suite)": lambda: cupipe.stencil2d(x_randn, w_randn),
    "9x9 16-bit uniform x, probe w": lambda: cupipe.stencil2d(x_probe, w_probe),
    "9x9 16-bit uniform x, randn w": lambda: cupipe.stencil2d(x_probe, w_randn),
    "9x9 full uniform x, probe w": lambda: cupipe.stencil2d(x_unif, w_probe),
    "9x9 randn x, probe w": lambda: cupipe.stencil2d(x_randn, w_probe),
    "9x9 zeros x, randn w": lambda: cupipe.stencil2d(x_zero, w_randn),
    "SGEMM randn": lambda: x_randn @ x_randn,
    "SGEMM 16-bit uniform": lambda: x_probe @ x_probe,
}

# Rounds in alternating order, so that a drift over the run (clocks, temperature) shows as a drift, not
# as a difference between data.
rounds = int(os.environ.get("ROUNDS", "3"))
names = list(cases)
print(f"{'round':5s} {'case':34s} {'ms queued':>10s} {'ms synced':>10s} {'ms b2b':>8s} {'TFLOP/s':>8s} {'MHz':>6s} "
      f"{'W':>6s} {'out MiB':>8s}")
for r in range(rounds):
    for name in (names if r % 2 == 0 else names[::-1]):
        fn = cases[name]
        reps = 10 if name.startswith("SGEMM") else 50
        q, sy = time_ms(fn, reps=reps), time_ms(fn, reps=reps, queued=False)
        b2b = back_to_back_ms(fn, reps=reps)
        _, mhz, watts, _ = settled(hold(fn, 1.0, 2 if name.startswith("SGEMM") else 20))
        mhz, watts = mhz or float("nan"), watts or float("nan")  # None without NVML
        flops = 2 * N ** 3 if name.startswith("SGEMM") else 81 * 2 * N * N
        out_mib = fn().data_ptr() / 2 ** 20  # where the caching allocator put this call's output
        print(f"{r:5d} {name:34s} {q:10.4f} {sy:10.4f} {b2b:8.4f} {flops / q / 1e9:8.1f} {mhz:6.0f} {watts:6.0f} "
              f"{out_mib:8.0f}", flush=True)
