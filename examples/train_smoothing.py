"""Train a tiny torch.nn.Module built on cupipe ops, under torch.compile.

The module is a learnable 3x3 smoothing filter (cupipe.stencil2d) whose loss is a cupipe.reduce:
given noisy images x and the same images blurred by an unknown 3x3 kernel, it learns that
kernel. Forward and backward go through the cupipe ops (their autograd formulas are
registered), and torch.compile(fullgraph=True) traces them through their fake kernels, with no
graph breaks.

    python examples/train_smoothing.py                       # GPU if there is one, else CPU
    python examples/train_smoothing.py --steps 2 --backend aot_eager   # a fast smoke test
    python examples/train_smoothing.py --backend none        # eager, no compile

``--backend inductor`` (the default) generates and compiles C++/Triton code, which takes a while
on a small CPU machine; ``aot_eager`` traces the same graph (dynamo + AOTAutograd, forward and
backward) without code generation.
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

import cupipe


class LearnableSmoothing(torch.nn.Module):
    """y = stencil2d(x, w) with a learnable (2r+1)x(2r+1) kernel w (initialised to a box filter);
    ``loss(x, target)`` is the mean squared error, reduced with cupipe.reduce."""

    def __init__(self, radius: int = 1, boundary: str = "reflect"):
        super().__init__()
        k = 2 * radius + 1
        self.weight = torch.nn.Parameter(torch.full((k, k), 1.0 / (k * k)))
        self.boundary = boundary

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cupipe.stencil2d(x, self.weight, boundary=self.boundary)

    def loss(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        err = self(x) - target
        per_image = cupipe.reduce(err * err, "mean", dim=[-2, -1])   # (batch,)
        return cupipe.reduce(per_image, "mean")                      # scalar


def make_data(batch: int, n: int, device, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, n, n, generator=g)
    true_w = torch.tensor([[0.05, 0.10, 0.05], [0.10, 0.40, 0.10], [0.05, 0.10, 0.05]])
    target = torch.nn.functional.conv2d(
        torch.nn.functional.pad(x[:, None], (1, 1, 1, 1), mode="reflect"), true_w[None, None])[:, 0]
    return x.to(device), target.to(device), true_w.to(device)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=0, help="image side (default 512 GPU, 64 CPU)")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--backend", default="inductor",
                    help="torch.compile backend: inductor, aot_eager, eager; 'none' = no compile")
    ap.add_argument("--cpu", action="store_true", help="run on the CPU even if a GPU is present")
    args = ap.parse_args(argv)

    on_gpu = cupipe.cuda_available() and not args.cpu
    device = "cuda" if on_gpu else "cpu"
    n = args.size or (512 if on_gpu else 64)
    torch.backends.cudnn.allow_tf32 = False
    x, target, true_w = make_data(args.batch, n, device)
    model = LearnableSmoothing().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)

    loss_fn = model.loss
    if args.backend != "none":
        loss_fn = torch.compile(model.loss, backend=args.backend, fullgraph=True)
    print(f"LearnableSmoothing on {device}: batch {args.batch} x {n}x{n}, {args.steps} steps, "
          f"torch.compile backend: {args.backend}")

    with torch.no_grad():
        eager0 = model.loss(x, target).item()
    t0 = time.perf_counter()
    first = last = None
    for step in range(args.steps):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(x, target)
        loss.backward()
        opt.step()
        last = loss.item()
        if first is None:
            first = last
            what = "first call, includes compiling" if args.backend != "none" else "first call"
            print(f"step {step:4d}  loss {last:.6f}   ({what}: {time.perf_counter() - t0:.1f} s; "
                  f"eager loss {eager0:.6f})")
        elif step % max(1, args.steps // 6) == 0 or step == args.steps - 1:
            print(f"step {step:4d}  loss {last:.6f}")
    err = (model.weight.detach() - true_w).abs().max().item()
    print(f"learned kernel:\n{model.weight.detach().cpu().numpy().round(3)}")
    print(f"max |learned - true| = {err:.4f}")

    ok = abs(first - eager0) <= 1e-5 * max(1.0, abs(eager0))
    if not ok:
        print(f"MISMATCH: compiled loss {first} != eager loss {eager0}")
    if args.steps >= 2 and not last < first:
        print("MISMATCH: the loss did not decrease")
        ok = False
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
