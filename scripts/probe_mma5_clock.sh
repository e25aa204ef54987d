#!/usr/bin/env bash
# Builds scripts/probe_mma5_clock.cu into .probe_bin/mma5_clock (sm_90a) against a copy of
# csrc/kernels/stencil.cuh with the probe's two hooks at the start and end of stencil_kernel (the
# library carries none). CPU machine: ~1 minute; run the binary on the GPU machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/kernels" .probe_bin
python3 - csrc/kernels/stencil.cuh "$tmp/kernels/stencil.cuh" <<'PY'
import sys
src, dst = sys.argv[1], sys.argv[2]
s = open(src).read()
head = "                   StencilGeom g, Boundary boundary, const __grid_constant__ CUtensorMap tmap) {\n"
tail = "  } else {\n    engine::run_ring(ring, mine, load, consume);\n  }\n}\n"
assert s.count(head) == 1 and s.count(tail) == 1, "stencil_kernel's first or last lines moved: update the hooks"
s = s.replace(head, head + "  CUPIPE_PROBE_BLOCK_BEGIN\n")
s = s.replace(tail, tail[:-2] + "  CUPIPE_PROBE_BLOCK_END\n}\n")
open(dst, "w").write("#define CUPIPE_PROBE_HOOKED 1\n" + s)
PY
nvcc -O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -I"$tmp" -Icsrc \
  -o .probe_bin/mma5_clock scripts/probe_mma5_clock.cu csrc/kernels/device_info.cu
echo "built .probe_bin/mma5_clock"
