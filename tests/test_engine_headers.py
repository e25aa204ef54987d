"""The engine is header-only and torch-free: another extension can include it with nothing but
cupipe.include_dir() on its include path. Compiled with nvcc when nvcc is available (CI has it)."""
import os
import shutil
import subprocess

import pytest

import cupipe

NVCC = shutil.which("nvcc") or (os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc"))

USER_KERNEL = r"""
#include "engine/engine.cuh"
using namespace cupipe::engine;

// A user kernel: sums tiles streamed through a 3-stage LDGSTS ring.
template <Mechanism M>
__global__ void tile_sum(const float* x, float* out, int ntiles, int tile_elems) {
  extern __shared__ __align__(128) char smem[];
  __shared__ RawShared<typename Ring<M, 3, 16>::SharedState> ss;
  Ring<M, 3, 16> ring(ss.get(), smem, tile_elems * 4 + 32);
  float acc = 0.f;
  run_ring(ring, ntiles,
           [&](const auto& w, long long k) { w.copy(0, x + k * tile_elems, tile_elems * 4); },
           [&](const char* stage, long long, Team t) {
             for (int i = t.rank; i < tile_elems; i += t.size) acc += reinterpret_cast<const float*>(stage)[i];
           });
  atomicAdd(out, acc);
}
template __global__ void tile_sum<Mechanism::Primitives>(const float*, float*, int, int);
template __global__ void tile_sum<Mechanism::Specialized>(const float*, float*, int, int);
"""


def test_include_dir_has_the_engine():
    d = cupipe.include_dir()
    for name in ["engine.cuh", "rings.cuh", "stage_ring.cuh", "common.cuh", "mbarrier.cuh", "mechanism.h"]:
        assert os.path.isfile(os.path.join(d, "engine", name)), name


@pytest.mark.skipif(not os.path.isfile(NVCC), reason="nvcc not available")
def test_engine_compiles_in_a_user_extension(tmp_path):
    src = tmp_path / "user.cu"
    src.write_text(USER_KERNEL)
    cmd = [NVCC, "-std=c++17", "-O1", "-gencode=arch=compute_80,code=sm_80", "-I", cupipe.include_dir(),
           "-c", str(src), "-o", str(tmp_path / "user.o")]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
