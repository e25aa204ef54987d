"""Usage: from nvml_clock import hold, settled, sample   (a helper module of tools/stencil_extras.py)

The SM clock, board power, temperature and clock-event reasons from NVML through ctypes (the
driver's libnvidia-ml, no nvidia-ml-py needed), and hold(): a GPU call kept busy while they are
read, to tell a kernel's cycles from the clock the board gives it. Without NVML every reading is
None and callers print times alone."""
import ctypes
import time

REASONS = {0x1: "idle", 0x2: "app-clocks", 0x4: "sw-power-cap", 0x8: "hw-slowdown", 0x10: "sync-boost",
           0x20: "sw-thermal", 0x40: "hw-thermal", 0x80: "hw-power-brake", 0x100: "display"}

try:
    _nvml = ctypes.CDLL("libnvidia-ml.so.1")
    if _nvml.nvmlInit_v2() != 0:
        raise OSError("nvmlInit_v2 failed")
    _handle = ctypes.c_void_p()
    _reasons_fn = getattr(_nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        _nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    _bound_index = None
except (OSError, AttributeError):
    _nvml = None


def _bind(index):
    global _bound_index
    if _bound_index != index:
        if _nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(_handle)) != 0:
            raise OSError(f"no NVML handle for device {index}")
        _bound_index = index


def sample(index=0):
    """(SM MHz, W, deg C, reasons bitmask) of device `index` now, or None without NVML. (NVML's
    index is the driver's; it matches torch's where CUDA_VISIBLE_DEVICES is unset, as on the
    device machine.)"""
    if _nvml is None:
        return None
    _bind(index)
    mhz, mw, temp, reasons = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint(), ctypes.c_ulonglong()
    _nvml.nvmlDeviceGetClockInfo(_handle, 1, ctypes.byref(mhz))  # NVML_CLOCK_SM
    _nvml.nvmlDeviceGetPowerUsage(_handle, ctypes.byref(mw))
    _nvml.nvmlDeviceGetTemperature(_handle, 0, ctypes.byref(temp))  # NVML_TEMPERATURE_GPU
    _reasons_fn(_handle, ctypes.byref(reasons))
    return mhz.value, mw.value / 1000.0, temp.value, reasons.value


def reason_names(mask):
    return "+".join(n for bit, n in REASONS.items() if mask & bit) or "none"


def hold(fn, seconds, chunk):
    """Run fn back to back for `seconds` in chunks of `chunk` calls (CUDA events around each chunk),
    reading NVML after each: a list of (ms per call, MHz, W, C, reasons); the NVML fields are None
    without NVML."""
    import torch

    fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    rows = []
    t0 = time.time()
    while time.time() - t0 < seconds:
        a.record()
        for _ in range(chunk):
            fn()
        b.record()
        b.synchronize()
        rows.append((a.elapsed_time(b) / chunk,) + (sample() or (None,) * 4))
    return rows


def median(values):
    v = sorted(values)
    return v[len(v) // 2] if v else float("nan")


def settled(rows):
    """The second half of a hold (after the clock has found its level): median ms per call, median
    MHz, median W, the reasons seen. MHz and W are None without NVML."""
    tail = rows[len(rows) // 2:]
    ms = median(r[0] for r in tail)
    if tail[0][1] is None:
        return ms, None, None, ""
    reasons = sorted({reason_names(r[4]) for r in tail})
    return ms, median(r[1] for r in tail), median(r[2] for r in tail), ",".join(reasons)
