"""Timing helpers shared by the benchmark CLI, the tuner and the examples: medians of many
repetitions, CUDA events on the GPU (the device runs asynchronously, so host clocks would time
the launch, not the work), perf_counter on the CPU."""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch


def time_ms(fn: Callable[[], object], reps: int = 30, warmup: int = 3, *, queued: bool = True) -> float:
    """Median milliseconds of `fn` over `reps` CUDA-event-timed calls, after `warmup` calls.

    queued (the default): the calls go back to back with a pair of events around each and one
    synchronize at the end, as in triton's do_bench, so while the GPU runs one call the host
    issues the next: each interval is the GPU's time for the call, not the host's time to
    dispatch it (Python wrapper, dispatcher, allocations). queued=False synchronizes after every
    call: an idle GPU waits for each dispatch, so the interval adds the host's dispatch time
    (what a lone call costs from an idle device)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    if queued:
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(reps)]
        for a, b in events:
            a.record()
            fn()
            b.record()
        torch.cuda.synchronize()
        times = [a.elapsed_time(b) for a, b in events]
    else:
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
    return statistics.median(times)


def time_ms_cpu(fn: Callable[[], object], reps: int = 30, warmup: int = 3) -> float:
    """Median milliseconds of `fn` over `reps` calls timed with time.perf_counter (CPU path)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)
