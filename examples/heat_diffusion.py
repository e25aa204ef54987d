"""2-D heat equation stepped with cupipe.stencil2d, checked and timed against eager PyTorch.

Explicit (forward-Euler) time stepping of du/dt = alpha * laplacian(u) on a square grid is one
5-point stencil per step:

    u <- u + a * (u[i-1,j] + u[i+1,j] + u[i,j-1] + u[i,j+1] - 4 u[i,j]),  a = alpha dt / dx^2

i.e. cupipe.stencil2d(u, [[0, a, 0], [a, 1-4a, a], [0, a, 0]]), stable for a <= 1/4, and n
steps are cupipe.stencil2d(u, w, steps=n). The boundary is the stencil's (applied at every step): ``zero`` holds the edges at 0 (a cold frame), ``replicate`` makes
them insulating (no heat flows out), ``circular`` wraps around (a torus).

    python examples/heat_diffusion.py                      # GPU if there is one, else CPU
    python examples/heat_diffusion.py --size 4096 --steps 2000 --png heat.png
    python examples/heat_diffusion.py --cpu --size 128 --steps 50

Prints the difference from the eager implementation and both speeds; writes a PNG of the
initial and final fields when matplotlib is installed.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import cupipe


def initial_field(n: int, device) -> torch.Tensor:
    """A hot disc, a hot bar and a cold spot on a lukewarm plate (deterministic)."""
    y, x = torch.meshgrid(torch.linspace(0, 1, n), torch.linspace(0, 1, n), indexing="ij")
    u = torch.full((n, n), 0.2)
    u[((x - 0.3) ** 2 + (y - 0.35) ** 2) < 0.12 ** 2] = 1.0
    u[(abs(y - 0.72) < 0.04) & (abs(x - 0.6) < 0.25)] = 0.8
    u[((x - 0.75) ** 2 + (y - 0.3) ** 2) < 0.06 ** 2] = 0.0
    return u.to(device)


def heat_weights(a: float, device) -> torch.Tensor:
    return torch.tensor([[0.0, a, 0.0], [a, 1.0 - 4.0 * a, a], [0.0, a, 0.0]], device=device)


def step_eager(u, a: float, boundary: str):
    """The same step written the usual way in PyTorch: pad, then shifted slices."""
    mode = "constant" if boundary == "zero" else boundary
    p = F.pad(u[None, None], (1, 1, 1, 1), mode=mode)[0, 0]
    lap = p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:] - 4.0 * u
    return u + a * lap


def run(step, u, steps):
    for _ in range(steps):
        u = step(u)
    return u


def timed(fn, on_gpu: bool, reps: int = 3) -> float:
    """Median seconds of fn() (CUDA events on a GPU, perf_counter on the CPU), after a warm-up."""
    fn()
    times = []
    for _ in range(reps):
        if on_gpu:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def save_png(path, u0, u1, steps, boundary, device_label):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib is not installed: no PNG written; pip install matplotlib)")
        return False
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6), layout="constrained")
    for ax, u, title in ((axes[0], u0, "initial temperature"),
                         (axes[1], u1, f"after {steps} steps (cupipe.stencil2d)")):
        im = ax.imshow(u.float().cpu().numpy(), cmap="inferno", vmin=0.0, vmax=1.0,
                       origin="lower", extent=(0, 1, 0, 1))
        ax.set_title(title)
        ax.set_xlabel("x")
        ax.set_ylabel("y")
    fig.colorbar(im, ax=axes, label="temperature (arbitrary units)", shrink=0.9)
    n = u0.shape[-1]
    fig.suptitle(f"2-D heat equation, {n}x{n} grid, boundary={boundary!r} ({device_label})")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=0, help="grid side (default 4096 on a GPU, 256 on CPU)")
    ap.add_argument("--steps", type=int, default=0, help="time steps (default 1000 GPU, 100 CPU)")
    ap.add_argument("--a", type=float, default=0.2, help="alpha*dt/dx^2, at most 0.25 (stability)")
    ap.add_argument("--boundary", default="replicate", choices=list(cupipe.BOUNDARIES))
    ap.add_argument("--cpu", action="store_true", help="run on the CPU even if a GPU is present")
    ap.add_argument("--png", default="heat_diffusion.png", help="output image ('' for none)")
    ap.add_argument("--no-timing", action="store_true", help="skip the speed comparison")
    args = ap.parse_args(argv)
    if not 0 < args.a <= 0.25:
        ap.error("--a must be in (0, 0.25] for the explicit scheme to be stable")

    on_gpu = cupipe.cuda_available() and not args.cpu
    device = "cuda" if on_gpu else "cpu"
    n = args.size or (4096 if on_gpu else 256)
    steps = args.steps or (1000 if on_gpu else 100)
    label = torch.cuda.get_device_name() if on_gpu else "CPU"
    print(f"heat diffusion: {n}x{n} fp32, {steps} steps, a={args.a}, boundary={args.boundary}, "
          f"on {label}")

    u0 = initial_field(n, device)
    w = heat_weights(args.a, device)
    ours = lambda: cupipe.stencil2d(u0, w, boundary=args.boundary, steps=steps)
    eager = lambda: run(lambda u: step_eager(u, args.a, args.boundary), u0, steps)

    u1, u_ref = ours(), eager()
    err = (u1 - u_ref).abs().max().item()
    heat0, heat1 = u0.double().sum().item(), u1.double().sum().item()
    print(f"max |cupipe - eager| after {steps} steps: {err:.3e}")
    print(f"mean temperature: {heat0 / n / n:.6f} -> {heat1 / n / n:.6f}"
          + ("  (insulated edges: conserved)" if args.boundary in ("replicate", "circular") else ""))
    ok = err < 1e-4

    if not args.no_timing:
        t_ours, t_eager = timed(ours, on_gpu), timed(eager, on_gpu)
        cells = n * n * steps
        print(f"cupipe.stencil2d: {t_ours / steps * 1e3:9.4f} ms/step  {cells / t_ours / 1e9:8.3f} Gcell/s")
        print(f"eager PyTorch   : {t_eager / steps * 1e3:9.4f} ms/step  {cells / t_eager / 1e9:8.3f} Gcell/s"
              f"   (cupipe speedup {t_eager / t_ours:.2f}x)")
        if not on_gpu:
            print("(CPU times: cupipe's CPU kernel is a plain reference loop, not the GPU engine)")

    if args.png and save_png(args.png, u0, u1, steps, args.boundary, label):
        print(f"wrote {args.png}")
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
