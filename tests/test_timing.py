"""cupipe.timing.time_ms: queued timing reports the GPU's time for a call even when the host takes
longer to issue the call than the GPU takes to run it; synced timing includes the host."""
from __future__ import annotations

import time

import pytest
import torch

from cupipe.timing import _gpu_cycles_per_ms, time_ms

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _host_slow_call(gpu_ms: float, host_ms: float):
    cycles = int(gpu_ms * _gpu_cycles_per_ms())

    def fn():
        t0 = time.perf_counter()
        while (time.perf_counter() - t0) * 1e3 < host_ms:  # the host's dispatch, busy like Python's
            pass
        torch.cuda._sleep(cycles)
    return fn


def test_queued_timing_is_the_gpu_time_of_a_host_bound_call():
    fn = _host_slow_call(gpu_ms=0.02, host_ms=0.3)
    queued = time_ms(fn, reps=20)
    synced = time_ms(fn, reps=20, queued=False)
    assert 0.015 < queued < 0.06, queued  # the 0.02 ms kernel, not the host's 0.3 ms
    assert synced > 0.25, synced  # an idle GPU waits for the host


def test_queued_timing_of_gpu_bound_calls():
    fn = _host_slow_call(gpu_ms=0.2, host_ms=0.0)
    assert 0.17 < time_ms(fn, reps=20) < 0.26


def test_cold_l2_timing_reads_from_dram():
    """A buffer of a quarter of the L2 stays there between repetitions unless cold_l2 evicts it:
    the cold read is slower (DRAM against L2 bandwidth). Queued timing only: synced intervals add
    the host's dispatch, which would dilute the difference. Other processes on the GPU (a parallel
    test run) only add time and evict the L2 at random, so each side keeps its fastest of five."""
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    x = torch.randn(l2 // 4 // 4, device="cuda")
    warm = min(time_ms(x.sum, reps=30) for _ in range(5))
    cold = min(time_ms(x.sum, reps=30, cold_l2=True) for _ in range(5))
    assert cold > 1.15 * warm, (warm, cold)
