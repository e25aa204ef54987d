"""Usage: python3 tools/stencil_extras.py        (GPU; tools/gpu_check.sh steps `extras` and `profile`)

The stencil measurements the benchmark suite does not make:
  1. the fp32 9x9 box against the device's FP32 rate measured in the same run (an 8192^3 matmul,
     TF32 off), also held busy for 2 s with NVML's clock beside it (tools/nvml_clock.py);
  2. fp16/bf16 stencils against copy bandwidth (the 7x7 and 9x9 boxes on the tensor cores);
  3. a training step: stencil2d forward + backward against F.conv2d's on the same data.
"""
import torch
import torch.nn.functional as F

import cupipe
from cupipe.timing import time_ms
from nvml_clock import hold, settled

torch.manual_seed(0)
dev = "cuda"
H = W = 8192
img = torch.randn(H, W, device=dev)
buf = torch.empty_like(img)
copy_ms = time_ms(lambda: buf.copy_(img), reps=50)
copy_gbs = 2 * img.nbytes / copy_ms / 1e6
print(f"copy_ 8192^2 fp32: {copy_ms:.3f} ms, {copy_gbs:.0f} GB/s")

# 1. The 9x9 box against the FP32 arithmetic rate (CUDA cores: TF32 off).
torch.backends.cuda.matmul.allow_tf32 = False
a = torch.randn(8192, 8192, device=dev)
mm_ms = time_ms(lambda: a @ a, reps=10)
flops_rate = 2 * 8192 ** 3 / (mm_ms * 1e-3)
w9 = torch.randn(9, 9, device=dev)
ms9 = time_ms(lambda: cupipe.stencil2d(img, w9), reps=30)
floor9 = 81 * 2 * H * W / flops_rate * 1e3  # ms at the measured fp32 rate
print(f"fp32 matmul 8192^3 (TF32 off): {mm_ms:.3f} ms = {flops_rate / 1e12:.1f} TFLOP/s")
print(f"stencil2d 9x9 box 8192^2 fp32: {ms9:.4f} ms; arithmetic floor at that rate {floor9:.4f} ms "
      f"({floor9 / ms9:.3f}x of the limit); memory floor {2 * img.nbytes / copy_gbs / 1e6:.3f} ms")
# The same two held busy for 2 s each (back to back, NVML read after every chunk of calls): the
# 9x9 reaches the board's power cap and its clock drops, so compare rates per clock cycle (against
# the SGEMM's, and against the FP32 peak: SMs x 128 FMA lanes x 2 flops x clock), not per second.
sg_ms, sg_mhz, sg_w, sg_why = settled(hold(lambda: a @ a, 2.0, 2))
b9_ms, b9_mhz, b9_w, b9_why = settled(hold(lambda: cupipe.stencil2d(img, w9), 2.0, 100))
flops_mm, flops9 = 2 * 8192 ** 3, 81 * 2 * H * W
in_time = (flops9 / b9_ms) / (flops_mm / sg_ms)
if sg_mhz is None:
    print(f"stencil2d 9x9 held 2 s: {b9_ms:.3f} ms, {in_time:.2f}x of the SGEMM's rate (held too); no NVML for clocks")
else:
    per_cycle = (flops9 / (b9_ms * b9_mhz)) / (flops_mm / (sg_ms * sg_mhz))
    props = torch.cuda.get_device_properties(dev)
    lanes = 64 if (props.major, props.minor) in ((7, 0), (7, 5), (8, 0)) else 128  # FP32 lanes per SM
    peak = flops9 / (b9_ms * 1e-3) / (props.multi_processor_count * lanes * 2 * b9_mhz * 1e6)
    print(f"stencil2d 9x9 held 2 s: {b9_ms:.3f} ms at {b9_mhz} MHz, {b9_w:.0f} W ({b9_why}); SGEMM held "
          f"{sg_ms:.3f} ms at {sg_mhz} MHz, {sg_w:.0f} W ({sg_why}); {in_time:.2f}x of the SGEMM's rate in time, "
          f"{per_cycle:.2f}x per clock cycle, {peak:.2f}x of the FP32 peak at its clock")

# 2. Half precision: effective bandwidth (2-byte elements read and written once). The weights are
#    built once, outside the timed calls: built per call they would time a host-to-device copy too.
w_star = torch.tensor([[0., 1, 0], [1, -4, 1], [0, 1, 0]], device=dev)
w_box3, w_box5 = torch.ones(3, 3, device=dev) / 9, torch.ones(5, 5, device=dev) / 25
w_row9 = torch.ones(9, device=dev) / 9
w_box7, w_box9 = torch.ones(7, 7, device=dev) / 49, torch.ones(9, 9, device=dev) / 81
#    Two ratios: against the fp32 plane's copy_ bandwidth above, and against copy_ of the same
#    2-byte tensor timed here (the suite's vs_copy_same: the same bytes, the same launch shape).
for dt in (torch.float16, torch.bfloat16):
    x = img.to(dt)
    w_box5_x = w_box5.to(dt)
    sig = torch.randn(1 << 28, device=dev, dtype=dt)
    same_ms = {}
    for t in (x, sig):
        out = torch.empty_like(t)
        same_ms[t.numel()] = time_ms(lambda: out.copy_(t), reps=50)
        del out
    for name, fn, t in [
        ("stencil2d 5-point", lambda: cupipe.stencil2d(x, w_star), x),
        ("stencil2d 3x3", lambda: cupipe.stencil2d(x, w_box3), x),
        ("stencil2d 5x5", lambda: cupipe.stencil2d(x, w_box5), x),
        # Weights in x's dtype, as F.conv2d takes them for a 2-byte input: one weight term on the
        # tensor cores instead of two (csrc/kernels/stencil/consumer_mma.cuh).
        ("stencil2d 5x5 (weights in x's dtype)", lambda: cupipe.stencil2d(x, w_box5_x), x),
        ("stencil2d 7x7 (tensor cores)", lambda: cupipe.stencil2d(x, w_box7), x),
        ("stencil2d 9x9 (tensor cores)", lambda: cupipe.stencil2d(x, w_box9), x),
        ("stencil1d r=4 2^28", lambda: cupipe.stencil1d(sig, w_row9), sig),
    ]:
        ms = time_ms(fn, reps=30)
        gbs = 2 * t.nbytes / ms / 1e6
        print(f"{name} {str(dt).replace('torch.', '')}: {ms:.3f} ms, {gbs:.0f} GB/s, {gbs / copy_gbs:.2f}x copy_, "
              f"{same_ms[t.numel()] / ms:.2f}x copy_ of the same tensor ({same_ms[t.numel()]:.3f} ms)")
    del x, sig

# 3. Training step: gradients for x and for the weights, and each backward piece alone. The
#    weight gradient also as it was computed before its kernel (one torch pass per tap), for
#    the record of what the kernel bought.
def wgrad_per_tap(x, g, shape):
    ry, rx = shape[0] // 2, shape[1] // 2
    xp = F.pad(x[None, None], (rx, rx, ry, ry))[0, 0]
    return torch.stack([torch.stack([(g * xp[a:a + H, c:c + W]).sum() for c in range(shape[1])])
                        for a in range(shape[0])])


g = torch.randn(H, W, device=dev)
for shape in [(3, 3), (5, 5), (9, 9)]:
    w = torch.randn(*shape, device=dev)
    xr = img.clone().requires_grad_(True)
    wr = w.clone().requires_grad_(True)

    def step_ours():
        (cupipe.stencil2d(xr, wr) * g).sum().backward()

    def step_conv():
        (F.conv2d(xr[None, None], wr[None, None], padding=(shape[0] // 2, shape[1] // 2))[0, 0] * g).sum().backward()

    fwd = time_ms(lambda: cupipe.stencil2d(img, w), reps=30)
    ours = time_ms(step_ours, reps=20)
    conv = time_ms(step_conv, reps=10)
    wonly = wr.detach().clone().requires_grad_(True)
    ms_w = time_ms(lambda: (cupipe.stencil2d(img, wonly) * g).sum().backward(), reps=20)
    ms_wg = time_ms(lambda: torch.ops.cupipe._stencil2d_weight_grad(img, g, w, "zero"), reps=30)
    ms_gx = time_ms(lambda: cupipe.ops._stencil2d_input_grad(g, w, "zero"), reps=30)
    ms_gx_r = time_ms(lambda: cupipe.ops._stencil2d_input_grad(g, w, "reflect"), reps=30)
    ms_old = time_ms(lambda: wgrad_per_tap(img, g, shape), reps=3)
    err = (torch.ops.cupipe._stencil2d_weight_grad(img, g, w, "zero").double()
           - wgrad_per_tap(img.double(), g.double(), shape)).abs().max().item()
    print(f"training step {shape[0]}x{shape[1]} 8192^2 fp32: forward {fwd:.3f} ms; fwd+bwd (x and w) "
          f"{ours:.3f} ms ({ours / fwd:.1f}x forward); fwd+bwd (w only) {ms_w:.3f} ms; "
          f"F.conv2d fwd+bwd {conv:.3f} ms ({conv / ours:.1f}x ours)")
    print(f"  backward pieces {shape[0]}x{shape[1]}: weight grad kernel {ms_wg:.3f} ms "
          f"({2 * img.nbytes / ms_wg / 1e6:.0f} GB/s for x and g read once; per-tap torch passes "
          f"{ms_old:.3f} ms = {ms_old / ms_wg:.0f}x slower; max abs err vs fp64 {err:.2e}); "
          f"input grad zero {ms_gx:.3f} ms, reflect {ms_gx_r:.3f} ms")
