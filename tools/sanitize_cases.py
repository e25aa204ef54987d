"""Usage: [SAN_OPS=copy,stencil2d,stencil1d,stencil3d,steps,reduce,grad] compute-sanitizer --tool TOOL \
           python3 tools/sanitize_cases.py [stages [mechanisms]]

A reduced matrix of every op x mechanism on small inputs, for compute-sanitizer (memcheck,
racecheck, synccheck; tools/gpu_check.sh step `sanitize`). stages and mechanisms are comma-separated
(default: stages 1,2,3, every mechanism); SAN_OPS picks the ops (default: all; copy alone is the
engine's own matrix). Checks results too, so a run that "passes" the sanitizer with wrong answers
still fails."""
import os
import sys

import torch
import torch.nn.functional as F

import cupipe

mechs = ["sync", "pipeline", "pipeline_thread", "primitives", "cg", "barrier", "specialized"]
if cupipe.tma_available():
    mechs.append("tma")
stages = [int(s) for s in (sys.argv[1].split(",") if len(sys.argv) > 1 else ["1", "2", "3"])]
if len(sys.argv) > 2:  # a subset of mechanisms, e.g. one per synccheck run
    mechs = [m for m in sys.argv[2].split(",") if m in mechs]
ops = os.environ.get("SAN_OPS", "copy,stencil2d,stencil1d,stencil3d,steps,reduce,grad").split(",")
unknown = set(ops) - {"copy", "stencil2d", "stencil1d", "stencil3d", "steps", "reduce", "grad"}
if unknown:
    sys.exit(f"sanitize_cases: unknown SAN_OPS {sorted(unknown)}")
torch.manual_seed(0)
bad = 0


def check(ok, what):
    global bad
    if not ok:
        bad += 1
        print("MISMATCH", what, flush=True)


base = torch.randn(40000 + 3, device="cuda")
img = torch.randn(2, 40, 150, device="cuda")  # rows of 600 bytes: copied row by row
img16 = torch.randn(2, 33, 96, device="cuda")  # rows of 384 bytes: one box per tile
img_big = torch.randn(2, 150, 384, device="cuda")  # 16-byte rows, interior tiles: fixed 3x3/5x5
sig = torch.randn(3, 20000, device="cuda")     # 1-D rows: several 1-row tiles each, one interior
wide = torch.randn(1, 70, 900, device="cuda") / 3  # fused steps: a last band far past the edge
w5x5 = torch.randn(5, 5, device="cuda")
w3 = torch.randn(3, 3, device="cuda")
w5 = torch.randn(5, device="cuda")
w9 = torch.randn(9, 9, device="cuda")          # fp32: the wide consumer (16-byte rows), 3 passes otherwise
w_wide = torch.randn(3, 17, device="cuda")     # a 9-wide chunk and a partial one
w7 = torch.randn(7, 7, device="cuda")
img_h = torch.randn(2, 70, 264, device="cuda").half()  # the tensor-core consumers (5x5 at 2 stages: the
# narrow kernel; 7x7, 9x9: narrow at 2 stages, general otherwise), phased tiles
img_h[1, 30, 100] = float("inf")                       # ... and its exact path
img_b = img_h.bfloat16()                               # bf16: two weight terms, the same kernels
vol = torch.randn(2, 11, 37, 70, device="cuda")        # 3-D: chunks along depth, edge tiles, row copies
vol16 = torch.randn(1, 9, 30, 64, device="cuda")       # 16-byte rows: tma's tensor-map windows
w333 = torch.randn(3, 3, 3, device="cuda")
w535 = torch.randn(5, 3, 5, device="cuda")


# References in fp32 proper: cuDNN convolutions default to TF32 on sm_80+ (10-bit mantissas),
# whose error on a 5x5 box of randn data exceeds the checks' atol.
torch.backends.cudnn.allow_tf32 = False


def ref3d(x, w, b):
    rz, ry, rx = ((k - 1) // 2 for k in w.shape)
    D, H, W = x.shape[-3:]
    mode = "constant" if b == "zero" else b
    xp = F.pad(x.reshape(-1, 1, D, H, W), (rx, rx, ry, ry, rz, rz), mode=mode)
    return F.conv3d(xp, w[None, None]).reshape(x.shape)


def ref2d(x, w, b):
    ry, rx = (w.shape[0] - 1) // 2, (w.shape[1] - 1) // 2
    H, W = x.shape[-2:]
    mode = "constant" if b == "zero" else b
    xp = F.pad(x.reshape(-1, 1, H, W), (rx, rx, ry, ry), mode=mode)
    return F.conv2d(xp, w[None, None]).reshape(x.shape)


for m in mechs:
    for s in stages:
        for off, vec in [(0, 16), (1, 4), (2, 8)] if "copy" in ops else []:
            x = base[off:off + 39999]
            check(torch.equal(cupipe.stream_copy(x, mechanism=m, stages=s, vec_bytes=vec), x), f"copy {m} {s} {off}")
        if "copy" in ops:
            xb = torch.randint(0, 255, (4099,), dtype=torch.uint8, device="cuda")[1:]
            check(torch.equal(cupipe.stream_copy(xb, mechanism=m, stages=s), xb), f"copy u8 {m} {s}")
            # Two persistent blocks of 4 KiB tiles: ~20 tiles each, so the ring wraps at every
            # stage count (the op's own grids give a block two tiles). Odd offset: head and tail.
            x = base[3:3 + 39997]
            y = torch.ops.cupipe._stream_copy_ex(x, m, s, 16, 4096, 2)
            check(torch.equal(y, x), f"copy ring wraps {m} {s}")
        for b in ["zero", "reflect", "circular"] if "stencil2d" in ops else []:
            for x, w in [(img, w3), (img, w9), (img16, w9), (img16, w_wide), (img_big, w3), (img_big, w5x5),
                         (img_big, w9)]:
                y = cupipe.stencil2d(x, w, boundary=b, mechanism=m, stages=s)
                ok = torch.allclose(y, ref2d(x, w, b), atol=1e-3)
                check(ok, f"stencil2d {m} {s} {b} {tuple(w.shape)}")
        for b in ["zero", "reflect"] if "stencil2d" in ops else []:
            # w7.half(): fp16 weights, the one-term tensor-core kernels; img_b: bf16, two terms
            for xh, w in [(img_h, w5x5), (img_h, w7), (img_h, w9), (img_h, w7.half()), (img_b, w5x5)]:
                y = cupipe.stencil2d(xh, w, boundary=b, mechanism=m, stages=s).float()
                os.environ["CUPIPE_STENCIL_MMA"] = "0"  # the CUDA-core consumer as the reference
                ref = cupipe.stencil2d(xh, w, boundary=b, mechanism=m, stages=s).float()
                del os.environ["CUPIPE_STENCIL_MMA"]
                fin = torch.isfinite(ref)
                ok = torch.equal(fin, torch.isfinite(y)) and torch.allclose(y[fin], ref[fin], rtol=2e-2, atol=0.25)
                check(ok, f"stencil2d {xh.dtype} {m} {s} {b} {tuple(w.shape)}")
        for b in ["zero", "reflect", "circular"] if "stencil3d" in ops else []:
            for x, w in [(vol, w333), (vol, w535), (vol16, w333)]:
                y = cupipe.stencil3d(x, w, boundary=b, mechanism=m, stages=s)
                check(torch.allclose(y, ref3d(x, w, b), atol=1e-3), f"stencil3d {m} {s} {b} {tuple(w.shape)}")
        # Fused steps against as many single calls: edge strips at both column edges, a last band
        # hanging far past the right edge (900 columns), rows along the rows alone (1-D).
        for b in ["zero", "circular", "replicate", "reflect"] if "steps" in ops else []:
            for x, w, k in [(img, w3, 5), (wide, w3, 3), (sig, w5, 6)]:
                f = cupipe.stencil1d if w.dim() == 1 else cupipe.stencil2d
                y = f(x, w, boundary=b, mechanism=m, stages=s, steps=k)
                ref = x
                for _ in range(k):
                    ref = f(ref, w, boundary=b, mechanism=m, stages=s)
                check(torch.allclose(y, ref, rtol=1e-4, atol=1e-4), f"steps {m} {s} {b} {tuple(x.shape)} k={k}")
        for x, dim in [(img, 1), (sig, 1)] if "stencil1d" in ops else []:
            y = cupipe.stencil1d(x, w5, dim=dim, boundary="replicate", mechanism=m, stages=s)
            xt = x.movedim(dim, -1)
            ref = F.conv1d(F.pad(xt.reshape(-1, 1, xt.shape[-1]), (2, 2), mode="replicate"),
                           w5[None, None]).reshape(xt.shape).movedim(-1, dim)
            check(torch.allclose(y, ref, atol=1e-4), f"stencil1d {m} {s} {x.shape} dim={dim}")
        for shape, dim in [((3, 20000), 1), ((300, 50), 1), ((300, 64), 1), ((2000, 33), 0), ((600, 256), 0), ((5000, 301), 0), ((3, 600, 5), 1),
                           ((9, 4096), 1),  # wide rows (reduce_wide_rows_kernel, a block per row)
                           ((20001,), 0),  # at one stage, 64 KiB chunks, the last ending in one element
                           ((9, 13, 64), (0, 2)), ((5, 3, 2000), (0, 2)),  # folded (sync): one chunk, two (partials)
                           ((2, 150, 4096), (0, 2)),  # folded, blocks walking two chunks (the sum kinds' fold kernel)
                           ((300, 64, 2), 1), ((1, 20000, 2), 1),  # rows of 8 bytes wrapped into vectors (sync), r split
                           ] if "reduce" in ops else []:
            x = torch.randn(shape, device="cuda")
            for op in ["sum", "amax", "var", "argmax"]:  # the scalar kernels, then two state kinds
                if op == "argmax" and isinstance(dim, tuple):
                    continue  # (one dim or all)
                y = cupipe.reduce(x, op, dim, mechanism=m, stages=s)
                ref = getattr(torch, op)(x, dim)
                ok = torch.equal(y, ref) if op == "argmax" else torch.allclose(y, ref, rtol=1e-4, atol=1e-3)
                check(ok, f"reduce {m} {s} {shape} {op}")
# The weight-gradient kernel (one mechanism of its own: primitives, 2 stages): persistent
# accumulators (3x3, 1-D), per-item warp flushes (9x9, 3x17), edge items (odd planes).
if "primitives" in mechs and "grad" in ops:
    for x, w in [(img, w3), (img16, w9), (img16, w_wide)]:
        g = torch.randn_like(x)
        for b in ["zero", "reflect"]:
            wd = w.double().requires_grad_(True)
            ref, = torch.autograd.grad(ref2d(x.double(), wd, b), wd, g.double())
            got = torch.ops.cupipe._stencil2d_weight_grad(x, g, w, b)
            check(torch.allclose(got.double(), ref, rtol=1e-4, atol=1e-2), f"weight grad {tuple(w.shape)} {b}")
    g = torch.randn_like(sig)
    got = torch.ops.cupipe._stencil1d_weight_grad(sig, g, w5, -1, "circular")
    ref = torch.stack([(g * sig.roll(2 - k, -1)).sum() for k in range(5)])
    check(torch.allclose(got, ref, rtol=1e-4, atol=1e-2), "weight grad 1-D circular")
torch.cuda.synchronize()
print(f"sanitize_cases: {','.join(ops)} x {','.join(mechs)} x stages {stages}: {'OK' if bad == 0 else f'{bad} MISMATCHES'}")
sys.exit(1 if bad else 0)
