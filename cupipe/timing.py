"""Timing helpers shared by the benchmark CLI, the tuner and the examples: medians of many
repetitions, CUDA events on the GPU (the device runs asynchronously, so host clocks would time
the launch, not the work), perf_counter on the CPU."""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch


_cycles_per_ms = {}  # device index -> GPU clock cycles per millisecond, as torch.cuda._sleep spins


def _gpu_cycles_per_ms() -> float:
    dev = torch.cuda.current_device()
    if dev not in _cycles_per_ms:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(10_000)  # clocks up
        a.record()
        torch.cuda._sleep(2_000_000)
        b.record()
        b.synchronize()
        _cycles_per_ms[dev] = 2_000_000 / max(a.elapsed_time(b), 1e-3)
    return _cycles_per_ms[dev]


def _l2_evictor() -> torch.Tensor:
    """A buffer of twice the device's L2 size, written once: reading it leaves the L2 holding
    only its clean lines (reading, not writing, so no dirty line is written back during the
    next timed call)."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    buf = torch.ones(max(2 * props.L2_cache_size, 1 << 20) // 4, device="cuda")
    buf.amax()
    return buf


def time_ms(fn: Callable[[], object], reps: int = 30, warmup: int = 3, *, queued: bool = True,
            cold_l2: bool = False) -> float:
    """Median milliseconds of `fn` over `reps` CUDA-event-timed calls, after `warmup` calls.

    queued (the default): the GPU's time for the call. Each call is bracketed by a pair of events
    and preceded on the stream by a short spin kernel (`torch.cuda._sleep`) that lasts longer than
    the host needs to issue the events and the call, so the GPU never waits for the host inside an
    interval: the interval holds the call's kernels and the gaps between them, not the host's
    dispatch time (Python wrapper, dispatcher, allocations, the event records themselves). Without
    the spin a call whose GPU work is shorter than the host's dispatch would be timed at the host's
    pace, which differs from machine to machine. Host time per call is a separate measure.
    queued=False synchronizes after every call: an idle GPU waits for each dispatch, so the
    interval adds the host's dispatch time (what a lone call costs from an idle device).

    cold_l2: each call starts with none of its inputs in L2 (a read of twice the L2's size before
    it), as in a model where other work ran in between; by default the inputs of the previous
    repetition may still be partly in L2, which favours inputs near the L2's size (64 MiB on a
    50 MiB L2)."""
    evictor = _l2_evictor() if cold_l2 else None
    host_ms = 0.0
    for _ in range(warmup):
        t0 = time.perf_counter()
        fn()
        host_ms = (time.perf_counter() - t0) * 1e3  # the last warm-up call: compilation is done
    torch.cuda.synchronize()
    times = []
    if queued:
        # The spin outlasts the host's issue: twice the call's host time plus a margin for the two
        # event records, capped (the constants below, in ms).
        lead = int(min(2 * host_ms + 0.05, 5.0) * _gpu_cycles_per_ms())
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(reps)]
        for a, b in events:
            if evictor is not None:
                evictor.amax()
            torch.cuda._sleep(lead)
            a.record()
            fn()
            b.record()
        torch.cuda.synchronize()
        times = [a.elapsed_time(b) for a, b in events]
    else:
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if evictor is not None:
                evictor.amax()
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
