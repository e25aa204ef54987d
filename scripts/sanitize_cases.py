"""A reduced matrix of every op x mechanism on small inputs, for compute-sanitizer
(memcheck, racecheck, synccheck). Checks results too, so a run that "passes" the sanitizer
with wrong answers still fails."""
import sys

import torch
import torch.nn.functional as F

import cupipe

mechs = ["sync", "pipeline", "pipeline_thread", "primitives", "cg", "barrier", "specialized"]
if torch.cuda.get_device_capability() >= (9, 0):
    mechs.append("tma")
stages = [int(s) for s in (sys.argv[1].split(",") if len(sys.argv) > 1 else ["1", "2", "3"])]
torch.manual_seed(0)
bad = 0


def check(ok, what):
    global bad
    if not ok:
        bad += 1
        print("MISMATCH", what, flush=True)


base = torch.randn(40000 + 3, device="cuda")
img = torch.randn(2, 40, 150, device="cuda")
w3 = torch.randn(3, 3, device="cuda")
w5 = torch.randn(5, device="cuda")
for m in mechs:
    for s in stages:
        for off, vec in [(0, 16), (1, 4), (2, 8)]:
            x = base[off:off + 39999]
            check(torch.equal(cupipe.stream_copy(x, mechanism=m, stages=s, vec_bytes=vec), x), f"copy {m} {s} {off}")
        xb = torch.randint(0, 255, (4099,), dtype=torch.uint8, device="cuda")[1:]
        check(torch.equal(cupipe.stream_copy(xb, mechanism=m, stages=s), xb), f"copy u8 {m} {s}")
        for b in ["zero", "reflect", "circular"]:
            y = cupipe.stencil2d(img, w3, boundary=b, mechanism=m, stages=s)
            mode = "constant" if b == "zero" else b
            ref = F.conv2d(F.pad(img.reshape(-1, 1, 40, 150), (1, 1, 1, 1), mode=mode), w3[None, None]).reshape(img.shape)
            check(torch.allclose(y, ref, atol=1e-4), f"stencil2d {m} {s} {b}")
        y = cupipe.stencil1d(img, w5, dim=1, boundary="replicate", mechanism=m, stages=s)
        check(y.shape == img.shape, "stencil1d")
        for shape, dim in [((3, 20000), 1), ((300, 50), 1), ((2000, 33), 0), ((3, 600, 5), 1)]:
            x = torch.randn(shape, device="cuda")
            for op in ["sum", "amax"]:
                y = cupipe.reduce(x, op, dim, mechanism=m, stages=s)
                ref = getattr(torch, op)(x, dim)
                check(torch.allclose(y, ref, rtol=1e-4, atol=1e-3), f"reduce {m} {s} {shape} {op}")
torch.cuda.synchronize()
print(f"sanitize_cases: {len(mechs)} mechanisms x stages {stages}: {'OK' if bad == 0 else f'{bad} MISMATCHES'}")
sys.exit(1 if bad else 0)
