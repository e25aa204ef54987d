"""The 2-D heat equation on a grid split by rows across ranks, with cupipe.distributed.

    torchrun --nproc-per-node=2 examples/distributed_heat.py                  # CPU: gloo
    torchrun --nproc-per-node=2 examples/distributed_heat.py --rows-per-rank 16384 --cols 16384 \
        --steps 64 --halo-width 8 --no-check                                  # GPUs: NCCL

Each rank owns a contiguous block of rows (uneven splits allowed: ``torch.tensor_split`` sizes)
and advances ``u <- u + alpha * laplacian(u)`` with ``cupipe.distributed.heat_steps``, which
exchanges halos with the neighbour ranks once every ``--halo-width`` k steps (default: as many as
the ranks' rows allow; 1: every step), which run as one fused pass (``stencil2d(..., steps=k)`` on
the block and its halos). The
initial grid is a function of the global row/column index, so no rank ever holds the whole grid.

Backend: NCCL when CUDA is available (one GPU per rank: LOCAL_RANK), else gloo on the CPU.
NVLink multicast (NVLS) is switched off by default (NCCL_NVLS_ENABLE=0 etc.; override by
setting the variables yourself).

For grids up to ``--check-max`` elements the result is gathered to every rank and compared on
rank 0 with a single-process run of the same steps (``cupipe.stencil2d`` on the whole grid); the
script exits 1 on a mismatch. Rank 0 prints the time per step (median over ``--reps`` timed
runs of ``--steps`` steps, after ``--warmup`` steps).
"""
from __future__ import annotations

import os

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
               ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_k, _v)

import argparse  # noqa: E402
import datetime  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import cupipe  # noqa: E402
import cupipe.distributed as cd  # noqa: E402


def initial_rows(row0: int, nrows: int, rows: int, cols: int, dtype, device) -> torch.Tensor:
    """Rows row0 .. row0+nrows-1 of the initial grid: a smooth wave plus a hot square."""
    i = torch.arange(row0, row0 + nrows, device=device, dtype=torch.float64)[:, None]
    j = torch.arange(cols, device=device, dtype=torch.float64)[None, :]
    u = torch.sin(2 * torch.pi * i / rows) * torch.cos(4 * torch.pi * j / cols)
    hot = ((i - rows / 2).abs() < rows / 8) & ((j - cols / 3).abs() < cols / 8)
    return (u + 2.0 * hot).to(dtype)


def _auto_choice():
    """What overlap="auto" settled on for this run's one workload (None: it did not measure)."""
    done = [t.choice for t in cd._overlap_auto.values() if t.choice is not None]
    return done[0] if len(done) == 1 else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=512,
                    help="global rows (ignored with --rows-per-rank)")
    ap.add_argument("--rows-per-rank", type=int, default=0, help="weak scaling: rows per rank")
    ap.add_argument("--cols", type=int, default=512)
    ap.add_argument("--steps", type=int, default=50, help="steps per timed run")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3, help="timed runs (median reported)")
    ap.add_argument("--alpha", type=float, default=0.2)
    ap.add_argument("--boundary", default="reflect", choices=list(cupipe.BOUNDARIES))
    ap.add_argument("--halo-width", type=int, default=None,
                    help="rows a halo, steps a pass (default: as many as the ranks' rows allow; 1: every step)")
    ap.add_argument("--overlap", nargs="?", const="on", default="auto", choices=["auto", "on", "off"],
                    help="overlap halo exchange and interior: on, off, or auto (the default: the "
                         "first steps time both and keep the faster; --overlap alone: on)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--check-max", type=int, default=1 << 22,
                    help="compare with a single-process run when rows*cols <= this")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--cpu", action="store_true", help="use gloo on the CPU even with GPUs")
    ap.add_argument("--free-sms", type=int, default=cd.OVERLAP_FREE_SMS,
                    help="with --overlap on CUDA: SMs the interior stencil leaves to NCCL")
    args = ap.parse_args()
    cd.OVERLAP_FREE_SMS = args.free_sms

    use_cuda = not args.cpu and torch.cuda.is_available() and cupipe.cuda_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        dist.init_process_group("nccl", device_id=device,
                                timeout=datetime.timedelta(seconds=300))
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    dtype = getattr(torch, args.dtype)

    rows = args.rows_per_rank * world if args.rows_per_rank else args.rows
    sizes = cd.split_sizes(rows, world)
    row0 = sum(sizes[:rank])
    u0 = initial_rows(row0, sizes[rank], rows, args.cols, dtype, device)
    overlap = {"auto": "auto", "on": True, "off": False}[args.overlap]
    kw = dict(boundary=args.boundary, halo_width=args.halo_width, overlap=overlap)

    def sync():
        if use_cuda:
            torch.cuda.synchronize()
        dist.barrier()

    with torch.no_grad():
        u = cd.heat_steps(u0, args.warmup, args.alpha, **kw)
        times = []
        for _ in range(args.reps):
            sync()
            t0 = time.perf_counter()
            u = cd.heat_steps(u, args.steps, args.alpha, **kw)
            sync()
            times.append((time.perf_counter() - t0) / max(args.steps, 1))
        per_step = statistics.median(times)
        total_steps = args.warmup + args.reps * args.steps

        if rank == 0:
            cells = rows * args.cols
            print(f"{world} rank(s), backend {dist.get_backend()}, device {device.type}; grid "
                  f"{rows} x {args.cols} {args.dtype} (rows per rank {sizes}); boundary "
                  f"{args.boundary}, halo_width {args.halo_width or 'auto'}, overlap {args.overlap}"
                  + (f" (chose {'on' if chosen else 'off'})" if (chosen := _auto_choice()) is not None else "")
                  + (f" (free SMs {args.free_sms})" if args.overlap != "off" and use_cuda else ""))
            print(f"per-step time: {per_step * 1e3:.3f} ms (median of {args.reps} runs of "
                  f"{args.steps} steps; {cells / per_step / 1e9:.2f} Gcell/s)")

        status = 0
        if not args.no_check and rows * args.cols <= args.check_max:
            full = cd.gather(u, dim=0)
            if rank == 0:
                ref = initial_rows(0, rows, rows, args.cols, dtype, device)
                w = cd.heat_kernel(args.alpha, device=device)
                for _ in range(total_steps):
                    ref = cupipe.stencil2d(ref, w, boundary=args.boundary)
                err = (full.double() - ref.double()).abs().max().item()
                tol = 1e-10 if dtype == torch.float64 else 1e-4
                ok = err <= tol
                print(f"check against single-process run: {'PASS' if ok else 'FAIL'} "
                      f"(max abs diff {err:.3g}, tol {tol:g}, {total_steps} steps)")
                status = 0 if ok else 1
            flag = torch.tensor([status], device=device if use_cuda else "cpu")
            dist.broadcast(flag, src=0)
            status = int(flag.item())
    dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main())
