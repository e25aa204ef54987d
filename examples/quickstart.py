"""cupipe quickstart: call every op, compare it with its eager PyTorch reference, and (on a GPU)
time it against that reference.

    python3 examples/quickstart.py            # CUDA when available, else CPU
    python3 examples/quickstart.py --cpu      # force the CPU kernels

On the CPU this finishes in a few seconds; timings are only printed on CUDA (median of 20
runs, torch.cuda.Event).
"""
from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F

import cupipe
from cupipe.timing import time_ms


def conv1d_ref(x, w, boundary):
    """Eager reference for stencil1d along the last dim: F.pad + F.conv1d."""
    r = (w.numel() - 1) // 2
    mode = "constant" if boundary == "zero" else boundary
    flat = x.reshape(-1, 1, x.shape[-1])
    return F.conv1d(F.pad(flat, (r, r), mode=mode), w.to(x.dtype)[None, None]).reshape(x.shape)


def conv2d_ref(x, w, boundary):
    """Eager reference for stencil2d: F.pad + F.conv2d over the last two dims."""
    ry, rx = (w.shape[0] - 1) // 2, (w.shape[1] - 1) // 2
    mode = "constant" if boundary == "zero" else boundary
    flat = x.reshape(-1, 1, x.shape[-2], x.shape[-1])
    return F.conv2d(F.pad(flat, (rx, rx, ry, ry), mode=mode), w.to(x.dtype)[None, None]).reshape(x.shape)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="run on the CPU even if a GPU is present")
    args = ap.parse_args(argv)

    # Full-precision fp32 references (cuDNN would otherwise run the convolutions in TF32).
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    device = "cuda" if cupipe.cuda_available() and not args.cpu else "cpu"
    on_gpu = device == "cuda"
    print(f"cupipe {cupipe.__version__}, torch {torch.__version__}, device: "
          + (torch.cuda.get_device_name() if on_gpu else "cpu (CUDA kernels not used)"))

    g = torch.Generator().manual_seed(0)
    # Sizes: big enough to time on a GPU, small enough to check in a few seconds on a CPU.
    n1, hw = ((1 << 26), 4096) if on_gpu else ((1 << 20), 512)
    v = torch.randn(n1, generator=g).to(device)
    img = torch.randn(hw, hw, generator=g).to(device)
    star = torch.tensor([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]], device=device)
    box5 = torch.full((5, 5), 1 / 25, device=device)
    w9 = torch.randn(9, generator=g).to(device)  # r = 4

    # (name, cupipe call, eager reference)
    cases = [
        ("stream_copy", lambda: cupipe.stream_copy(v), lambda: v.clone()),
        ("stencil1d r=4 circular", lambda: torch.ops.cupipe.stencil1d(v, w9, boundary="circular"),
         lambda: conv1d_ref(v, w9, "circular")),
        ("stencil2d 5-point zero", lambda: cupipe.stencil2d(img, star),
         lambda: conv2d_ref(img, star, "zero")),
        ("stencil2d 5x5 reflect", lambda: cupipe.stencil2d(img, box5, boundary="reflect"),
         lambda: conv2d_ref(img, box5, "reflect")),
        ("reduce sum (all)", lambda: cupipe.reduce(v, "sum"), lambda: v.sum()),
        ("reduce mean rows", lambda: cupipe.reduce(img, "mean", -1), lambda: img.mean(-1)),
        ("reduce amax cols", lambda: cupipe.reduce(img, "amax", 0), lambda: img.amax(0)),
        ("reduce sum bf16->fp32", lambda: cupipe.reduce(v.bfloat16(), "sum", dtype=torch.float32),
         lambda: v.bfloat16().sum(dtype=torch.float32)),
    ]

    # "rel err" is relative to the largest reference value (elementwise relative errors are
    # meaningless where the reference is ~0).
    header = f"{'op':<24}{'max abs err':>14}{'rel err':>12}"
    if on_gpu:
        header += f"{'cupipe ms':>12}{'eager ms':>12}{'speedup':>10}"
    print(header)
    print("-" * len(header))
    worst_rel = 0.0
    for name, ours, ref in cases:
        got, want = ours(), ref()
        abs_err = (got.double() - want.double()).abs().max().item()
        rel_err = abs_err / max(want.double().abs().max().item(), 1e-30)
        worst_rel = max(worst_rel, rel_err)
        line = f"{name:<24}{abs_err:>14.3e}{rel_err:>12.2e}"
        if on_gpu:
            t_ours, t_ref = time_ms(ours, reps=20), time_ms(ref, reps=20)
            line += f"{t_ours:>12.3f}{t_ref:>12.3f}{t_ref / t_ours:>9.2f}x"
        print(line)

    # Autograd: gradients flow through the ops like through their references.
    x = img[:64, :64].detach().requires_grad_()
    w = star.clone().requires_grad_()
    cupipe.reduce(cupipe.stencil2d(x, w, boundary="replicate") ** 2, "sum").backward()
    xr, wr = x.detach().clone().requires_grad_(), star.clone().requires_grad_()
    (conv2d_ref(xr, wr, "replicate") ** 2).sum().backward()
    gerr = max((x.grad - xr.grad).abs().max().item(), (w.grad - wr.grad).abs().max().item())
    grel = max((x.grad - xr.grad).abs().max().item() / xr.grad.abs().max().item(),
               (w.grad - wr.grad).abs().max().item() / wr.grad.abs().max().item())
    print(f"{'autograd (x, weights)':<24}{gerr:>14.3e}{grel:>12.2e}")

    ok = worst_rel < 1e-4 and grel < 1e-4
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
