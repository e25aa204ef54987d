"""Back-to-back timing for the scripts that set the op beside a standalone probe: the probes'
probe_median_ms (scripts/probe_common.cuh) in Python. cupipe.timing.time_ms, the suite's way,
puts a spin before every call; this launches the calls one after another with an event between
each two, as a probe does."""
import torch


def back_to_back_ms(fn, reps=30):
    """Median of reps calls launched back to back with an event between each two: no spin before a
    call, no synchronization between calls (one untimed call and a synchronization first)."""
    fn()
    torch.cuda.synchronize()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]
    events[0].record()
    for e in events[1:]:
        fn()
        e.record()
    torch.cuda.synchronize()
    return sorted(a.elapsed_time(b) for a, b in zip(events, events[1:]))[reps // 2]
