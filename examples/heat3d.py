"""3-D heat equation with cupipe.stencil3d: k fused-call steps checked against the exact decay of
a discrete eigenmode, then the diffusion number recovered from the result by gradient descent.

One explicit step of du/dt = alpha * laplacian(u) on a cubic grid is the 7-point stencil

    u <- u + a * (sum of the 6 neighbours - 6 u),   a = alpha dt / dx^2  (stable for a <= 1/6)

i.e. cupipe.stencil3d(u, w) with w = delta + a * L (L the 7-point Laplacian), and n steps are
cupipe.stencil3d(u, w, steps=n). With the zero boundary (u = 0 outside the N^3 grid) the mode
u0[i, j, l] = sin(pi (i+1) / (N+1)) sin(pi (j+1) / (N+1)) sin(pi (l+1) / (N+1)) is an eigenvector
of every step: after n steps u = lam^n u0 exactly, lam = 1 - 12 a sin^2(pi / (2 (N+1))). The
example checks that, then treats the result as a measurement and fits `a` to it through the
steps (autograd flows through stencil3d's weights, every step).

    python examples/heat3d.py                      # GPU if there is one, else CPU
    python examples/heat3d.py --size 256 --steps 200
    python examples/heat3d.py --cpu --size 16 --steps 10
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import torch

import cupipe


def heat_weights(a: torch.Tensor) -> torch.Tensor:
    """delta + a * L: a differentiable function of the diffusion number a (a 0-dim tensor)."""
    lap = torch.zeros(3, 3, 3, dtype=a.dtype, device=a.device)
    for d in range(3):
        for side in (0, 2):
            idx = [1, 1, 1]
            idx[d] = side
            lap[tuple(idx)] = 1.0
    lap[1, 1, 1] = -6.0
    delta = torch.zeros_like(lap)
    delta[1, 1, 1] = 1.0
    return delta + a * lap


def eigenmode(n: int, dtype, device) -> torch.Tensor:
    s = torch.sin(math.pi * torch.arange(1, n + 1, dtype=torch.float64) / (n + 1))
    return (s[:, None, None] * s[None, :, None] * s[None, None, :]).to(dtype=dtype, device=device)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=0, help="grid points per side (default 128 on a GPU, 16 on the CPU)")
    ap.add_argument("--steps", type=int, default=0, help="steps (default 100 on a GPU, 10 on the CPU)")
    ap.add_argument("--a", type=float, default=0.1, help="diffusion number alpha dt / dx^2 (<= 1/6)")
    ap.add_argument("--fit-iters", type=int, default=20, help="L-BFGS iterations of the fit")
    ap.add_argument("--cpu", action="store_true", help="run on the CPU even with a GPU")
    args = ap.parse_args()
    gpu = not args.cpu and torch.cuda.is_available() and cupipe.cuda_available()
    device = "cuda" if gpu else "cpu"
    n = args.size or (128 if gpu else 16)
    steps = args.steps or (100 if gpu else 10)
    dtype = torch.float32 if gpu else torch.float64

    # 1. k steps in one call against the exact decay of the eigenmode.
    a_true = torch.tensor(args.a, dtype=dtype, device=device)
    w = heat_weights(a_true)
    u0 = eigenmode(n, dtype, device)
    u = cupipe.stencil3d(u0, w, steps=steps)
    lam = 1.0 - 12.0 * args.a * math.sin(math.pi / (2 * (n + 1))) ** 2
    exact = lam ** steps * u0
    err = (u - exact).abs().max().item()
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    amp = ((u * u0).sum() / (u0 * u0).sum()).item()
    print(f"{n}^3 grid on {device} ({dtype}), a = {args.a}, {steps} steps in one stencil3d call: "
          f"mode amplitude {amp:.6f} (exact {lam ** steps:.6f}), max |error| {err:.2e}")

    if gpu:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    cupipe.stencil3d(u0, w, steps=steps)
    if gpu:
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(f"{dt / steps * 1e3:.3f} ms/step, {n ** 3 * steps / dt / 1e9:.2f} G cell-updates/s")

    # 2. Recover a from the result, starting from half of it: gradients flow through every step.
    measured = u.detach()
    a_fit = torch.tensor(args.a / 2, dtype=dtype, device=device, requires_grad=True)
    opt = torch.optim.LBFGS([a_fit], lr=1.0, max_iter=args.fit_iters, line_search_fn="strong_wolfe")
    evals = []

    def closure():
        opt.zero_grad()
        loss = ((cupipe.stencil3d(u0, heat_weights(a_fit), steps=steps) - measured) ** 2).mean()
        loss.backward()
        evals.append(loss.item())
        return loss
    opt.step(closure)
    print(f"fitted a = {a_fit.item():.6f} from a start of {args.a / 2} (true {args.a}): L-BFGS, "
          f"{len(evals)} forward + backward passes, loss {evals[-1]:.2e}")

    ok = err <= tol * max(1.0, steps / 10) and abs(a_fit.item() - args.a) < 1e-3 * args.a
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
