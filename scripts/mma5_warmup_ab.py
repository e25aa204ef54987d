"""Why a spaced call costs the two-term tensor-core 5x5 (fp16/bf16, fp32 weights) 1-2 us that the
one-term kernel (weights in x's dtype) and copy_ do not pay (twenty-ninth run,
scripts/mma5_op_probe_ab.py). The suite's timing (cupipe.timing.time_ms) puts a one-thread spin
before each call: every SM's tensor pipe sits idle for the spin. If the cost is the tensor pipe's
ramp after idling, a tensor-core kernel between the spin and the timed call (outside the timed
interval) removes it and a CUDA-core kernel there does not; if it grows with the idle time, the
spin's length moves it.

Each case is timed back to back (no spin), spaced with spins of 50 and 1000 us, and spaced (50 us)
with a kernel just before the call's first event: an fp16 matmul (tensor cores on every SM,
~30 us) or a 64 MiB copy (~35 us, CUDA cores). Two rounds, the order rotated.

--clocks: the SM clock, power and clock-event reasons NVML reads while each pattern (back to
back; spaced, 50 us) runs for 1.5 s, on a 16384^2 fp16 plane: whether a spaced call runs the
two-term kernel at a lower clock (ms x MHz: cycles per call).

--burst: the same 16384^2 cases timed as the tables time them (a burst of REPS calls, back to back
or spaced, after 0.3 s idle) while a thread reads NVML's SM clock every 0.5 ms: the clock each
pattern's burst runs at.

--sizes: instead, fp16 planes of 4096^2 .. 16384^2, back to back and spaced (50 us), the two-term
and one-term kernels and copy_: a fixed cost (set-up, the first tiles, the tail) stays the same
number of microseconds at every size, a cost spread over the call grows with it.

    python scripts/mma5_warmup_ab.py [--sizes | --clocks | --burst]
"""
import sys
import statistics

import torch

import cupipe
from cupipe import timing
from queued_timing import back_to_back_ms

REPS = 60
N = 8192


def spaced_ms(fn, lead_us, pre=None, reps=REPS):
    """Median of reps calls, each after a spin of lead_us on the stream and then `pre` (untimed)."""
    cycles = int(lead_us * 1e-3 * timing._gpu_cycles_per_ms())
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in events:
        torch.cuda._sleep(cycles)
        if pre is not None:
            pre()
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in events)


def assert_matches_conv2d(x, w):
    """The op against F.conv2d in fp32 (TF32 off) on the same 2-byte input: fp16's and bf16's own
    rounding of the result, relative to 1 + |ref|."""
    torch.backends.cudnn.allow_tf32 = False  # TF32 products err by ~1e-3: the reference's, not the op's
    out = cupipe.stencil2d(x, w).float()
    ref = torch.nn.functional.conv2d(x.float()[None, None], w.float()[None, None], padding=2)[0, 0]
    err = ((out - ref).abs() / (1 + ref.abs())).max().item()
    assert err < (2e-3 if x.dtype == torch.float16 else 1.6e-2), (tuple(x.shape), x.dtype, w.dtype, err)


def sizes_sweep():
    torch.manual_seed(0)
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}; fp16 5x5, ms, median of {REPS}")
    print(f"{'n':>6} {'case':18} {'b2b':>9} {'spin50':>9} {'extra us':>9}")
    for rnd in range(2):
        for n in (4096, 8192, 11584, 16384):
            for name, fn in fp16_cases(n):
                b = back_to_back_ms(fn, reps=REPS)
                s = spaced_ms(fn, 50)
                print(f"{n:6d} {name:18} {b:9.4f} {s:9.4f} {(s - b) * 1e3:9.2f}   round {rnd + 1}")
            torch.cuda.empty_cache()


def fp16_cases(n):
    """The two-term and one-term fp16 5x5 (weights converted once, both checked) and copy_ on an
    n x n plane of randn."""
    w = torch.randn(5, 5, device="cuda")
    wh = w.half()
    x = torch.randn(n, n, device="cuda", dtype=torch.float16)
    buf = torch.empty_like(x)
    assert_matches_conv2d(x, w)
    assert_matches_conv2d(x, wh)
    return [("2 terms", lambda: cupipe.stencil2d(x, w)), ("1 term", lambda: cupipe.stencil2d(x, wh)),
            ("copy_", lambda: buf.copy_(x))]


def rounds(cases):
    """(round, name, fn, pattern) over two rounds, the patterns' order turned round in the second."""
    for rnd in range(2):
        for name, fn in cases:
            for pattern in (("b2b", "spin50") if rnd == 0 else ("spin50", "b2b")):
                yield rnd, name, fn, pattern


def clocks(seconds=1.5, chunk=20, n=16384):
    import time

    from nvml_clock import median, reason_names, sample

    cases = fp16_cases(n)
    cycles = int(0.05 * timing._gpu_cycles_per_ms())
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}; fp16 5x5 {n}^2, {seconds} s per pattern")
    print(f"{'case':10} {'pattern':8} {'ms':>8} {'MHz':>6} {'W':>6} {'Mcycles':>8}  reasons")
    for rnd, name, fn, pattern in rounds(cases):
        fn()
        torch.cuda.synchronize()
        ms, mhz, watts, reasons = [], [], [], 0
        t0 = time.time()
        while time.time() - t0 < seconds:
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(2 * chunk)]
            for i in range(chunk):
                if pattern == "spin50":
                    torch.cuda._sleep(cycles)
                ev[2 * i].record()
                fn()
                ev[2 * i + 1].record()
            ev[-1].synchronize()
            # back to back: the interval from one call's end to the next call's end
            if pattern == "b2b":
                ms += [ev[2 * i - 1].elapsed_time(ev[2 * i + 1]) for i in range(1, chunk)]
            else:
                ms += [ev[2 * i].elapsed_time(ev[2 * i + 1]) for i in range(chunk)]
            smp = sample()
            if smp is not None:
                mhz.append(smp[0]); watts.append(smp[1]); reasons |= smp[3]
        half = len(mhz) // 2
        m = median(ms[len(ms) // 2:])
        f = median(mhz[half:]) if mhz else float("nan")
        print(f"{name:10} {pattern:8} {m:8.4f} {f:6.0f} {median(watts[half:]) if watts else float('nan'):6.0f} "
              f"{m * f / 1e3:8.4f}  {reason_names(reasons)}   round {rnd + 1}")


def burst(n=16384):
    import threading
    import time

    from nvml_clock import median, sample

    cases = fp16_cases(n)
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}; fp16 5x5 {n}^2, bursts of {REPS}")
    print(f"{'case':10} {'pattern':8} {'ms':>8} {'MHz med':>8} {'MHz min':>8} {'W max':>6} {'samples':>8}")
    for rnd, name, fn, pattern in rounds(cases):
        fn()
        torch.cuda.synchronize()
        time.sleep(0.3)
        samples, stop = [], threading.Event()

        def reader():
            while not stop.is_set():
                smp = sample()
                if smp is None:
                    return
                samples.append(smp)
                time.sleep(0.0005)

        th = threading.Thread(target=reader)
        th.start()
        ms = back_to_back_ms(fn, reps=REPS) if pattern == "b2b" else spaced_ms(fn, 50)
        stop.set()
        th.join()
        mhz = [s_[0] for s_ in samples]
        print(f"{name:10} {pattern:8} {ms:8.4f} {median(mhz) if mhz else float('nan'):8.0f} "
              f"{min(mhz) if mhz else float('nan'):8.0f} {max(s_[1] for s_ in samples) if samples else float('nan'):6.0f} "
              f"{len(samples):8d}   round {rnd + 1}")


def main():
    if "--burst" in sys.argv:
        return burst()
    if "--sizes" in sys.argv:
        return sizes_sweep()
    if "--clocks" in sys.argv:
        return clocks()
    torch.manual_seed(0)
    dev = "cuda"
    ma = torch.randn(2048, 2048, device=dev, dtype=torch.float16)
    mb = torch.randn(2048, 2048, device=dev, dtype=torch.float16)
    mm_out = torch.empty(2048, 2048, device=dev, dtype=torch.float16)
    pre_mm = lambda: torch.mm(ma, mb, out=mm_out)
    big = torch.randn(1 << 24, device=dev)  # 64 MiB read + written: ~30 us of CUDA-core copy
    big_out = torch.empty_like(big)
    pre_copy = lambda: big_out.copy_(big)
    mm_ms = back_to_back_ms(pre_mm, reps=30)
    cp_ms = back_to_back_ms(pre_copy, reps=30)
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}; pre-kernels: fp16 mm 2048^3 "
          f"{mm_ms * 1e3:.1f} us, copy 64 MiB {cp_ms * 1e3:.1f} us")
    w = torch.randn(5, 5, device=dev)
    cases = []
    for dt in (torch.float16, torch.bfloat16):
        x = torch.randn(N, N, device=dev).to(dt)
        buf = torch.empty_like(x)
        for wname, wk in (("fp32 w (2 terms)", w), ("x-dtype w (1 term)", w.to(dt))):
            assert_matches_conv2d(x, wk)
            cases.append((f"{str(dt)[6:]} 5x5 {wname}", lambda x=x, wk=wk: cupipe.stencil2d(x, wk)))
        cases.append((f"{str(dt)[6:]} copy_", lambda x=x, buf=buf: buf.copy_(x)))
    variants = [
        ("b2b", lambda fn: back_to_back_ms(fn, reps=REPS)),
        ("spin50", lambda fn: spaced_ms(fn, 50)),
        ("spin1000", lambda fn: spaced_ms(fn, 1000)),
        ("spin50+mm", lambda fn: spaced_ms(fn, 50, pre_mm)),
        ("spin50+copy", lambda fn: spaced_ms(fn, 50, pre_copy)),
    ]
    print(f"{'case':34}" + "".join(f"{v:>13}" for v, _ in variants) + "   (ms, median of %d)" % REPS)
    for rnd in range(2):
        order = variants[rnd:] + variants[:rnd]
        for name, fn in cases:
            got = {v: t(fn) for v, t in order}
            print(f"{name:34}" + "".join(f"{got[v]:13.4f}" for v, _ in variants) + f"   round {rnd + 1}")


if __name__ == "__main__":
    main()
