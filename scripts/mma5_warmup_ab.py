"""Why a spaced call costs the two-term tensor-core 5x5 (fp16/bf16, fp32 weights) 1-2 us that the
one-term kernel (weights in x's dtype) and copy_ do not pay (twenty-ninth run,
scripts/mma5_op_probe_ab.py). The suite's timing (cupipe.timing.time_ms) puts a one-thread spin
before each call: every SM's tensor pipe sits idle for the spin. If the cost is the tensor pipe's
ramp after idling, a tensor-core kernel between the spin and the timed call (outside the timed
interval) removes it and a CUDA-core kernel there does not; if it grows with the idle time, the
spin's length moves it.

Each case is timed back to back (no spin), spaced with spins of 50 and 1000 us, and spaced (50 us)
with a kernel just before the call's first event: an fp16 matmul (tensor cores on every SM,
~20 us) or a copy of the same bytes' time on the CUDA cores. Two rounds, the order rotated.

    python scripts/mma5_warmup_ab.py
"""
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


def main():
    torch.manual_seed(0)
    torch.backends.cudnn.allow_tf32 = False  # the reference: fp32 products (TF32 errs by ~1e-3)
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
            out = cupipe.stencil2d(x, wk)
            ref = torch.nn.functional.conv2d(x.float()[None, None], wk.float()[None, None], padding=2)[0, 0]
            err = ((out.float() - ref).abs() / (1 + ref.abs())).max().item()
            assert err < (2e-3 if dt == torch.float16 else 1.6e-2), (dt, wname, err)
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
