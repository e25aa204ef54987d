"""Is the fp32 9x9 box's time the SM clock's? The op (cupipe.stencil2d, 8192^2, zero boundary) held
busy for a few seconds in chunks of back-to-back calls, the SM clock, board power, temperature and
NVML's clock-event reasons read after each chunk; the same for the 8192^3 SGEMM (TF32 off) that the
extras take as the FP32 limit. A kernel bound by its clock keeps ms x MHz (cycles) constant while
the clock moves; the reasons say what moved it. With a command after `--`, that command runs instead
while NVML is sampled every 20 ms (e.g. the probe: scripts/probe_stencil_wide.cu).

    python scripts/box9_clock.py [seconds per case = 3]
    python scripts/box9_clock.py -- /tmp/probe_wide 4000
"""
import subprocess
import sys
import time

from nvml_clock import hold, reason_names, sample


def summarize(rows):
    """rows: (ms per call or None, MHz, W, C, reasons). Group by MHz; print each clock's share,
    median ms and ms x MHz (kilocycles per call)."""
    by_mhz = {}
    for ms, mhz, w, c, r in rows:
        by_mhz.setdefault(mhz, []).append((ms, w, c, r))
    for mhz in sorted(by_mhz, reverse=True):
        g = by_mhz[mhz]
        ms = sorted(x[0] for x in g if x[0] is not None)
        med = ms[len(ms) // 2] if ms else float("nan")
        reasons = sorted({reason_names(x[3]) for x in g})
        print(f"    {mhz:5d} MHz  {len(g):4d} samples  ms {med:8.4f}  kcycles {med * mhz:8.1f}  "
              f"W {sorted(x[1] for x in g)[len(g) // 2]:5.0f}  C {max(x[2] for x in g):3d}  {','.join(reasons)}")


def watch(cmd):
    if sample() is None:
        sys.exit("box9_clock: no NVML (libnvidia-ml.so.1) on this machine")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    rows = []
    while proc.poll() is None:
        rows.append((None,) + sample())
        time.sleep(0.02)
    print(proc.stdout.read(), end="")
    print(f"clocks while `{' '.join(cmd)}` ran:")
    summarize(rows)
    return proc.returncode


def main():
    import torch

    import cupipe

    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    if sample() is None:
        sys.exit("box9_clock: no NVML (libnvidia-ml.so.1) on this machine")
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    n = 8192
    x = torch.randn(n, n, device="cuda")
    w = torch.randn(9, 9, device="cuda")
    x_probe = torch.randint(0, 65536, (n, n), device="cuda").float() / 32768.0 - 1.0  # the probe's values
    zeros = torch.zeros(n, n, device="cuda")
    cases = [("9x9 randn (suite)", lambda: cupipe.stencil2d(x, w), 100, 81 * 2 * n * n),
             ("9x9 probe data", lambda: cupipe.stencil2d(x_probe, w), 100, 81 * 2 * n * n),
             ("SGEMM randn", lambda: x @ x, 2, 2 * n ** 3),
             ("9x9 zeros", lambda: cupipe.stencil2d(zeros, w), 100, 81 * 2 * n * n)]
    for name, fn, chunk, flops in cases:
        fn()
        torch.cuda.synchronize()
        time.sleep(2.0)  # idle first: every case starts from the same rested clock
        idle = sample()
        rows = hold(fn, seconds, chunk)
        first, last = rows[0], rows[-1]
        print(f"{name}: idle {idle[0]} MHz {idle[2]} C; {len(rows)} chunks of {chunk}; first chunk "
              f"{first[0]:.4f} ms at {first[1]} MHz, last {last[0]:.4f} ms at {last[1]} MHz; "
              f"best {min(r[0] for r in rows):.4f} ms = {flops / min(r[0] for r in rows) / 1e9:.1f} TFLOP/s")
        summarize(rows)
        trace = " ".join(f"{r[0]:.3f}@{r[1]}" for r in rows[::max(1, len(rows) // 12)])
        print(f"    trace (ms@MHz): {trace}", flush=True)


if __name__ == "__main__":
    if "--" in sys.argv:
        sys.exit(watch(sys.argv[sys.argv.index("--") + 1:]))
    main()
