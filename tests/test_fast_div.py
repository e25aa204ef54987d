"""kernels/fast_div.cuh (the stencil tile index's division by a launch-time divisor) against
integer division, compiled for the host: edge divisors (1, powers of two and their neighbours,
2^31 - 1) with edge and random numerators below 2^31, and random divisors."""
import os
import shutil
import subprocess

import pytest

CSRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "csrc")
CXX = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")

PROGRAM = r"""
#include "kernels/fast_div.cuh"
#include <cstdio>
#include <random>
using cupipe::kernels::FastDiv;
int main() {
  std::mt19937 g(1);
  long bad = 0;
  auto check = [&](uint32_t d, uint32_t n) {
    uint32_t q, r;
    FastDiv(d).divmod(n, q, r);
    if (q != n / d || r != n % d) { if (++bad < 5) std::printf("d=%u n=%u: %u %u\n", d, n, q, r); }
  };
  const uint32_t ds[] = {1, 2, 3, 5, 7, 31, 32, 33, 127, 128, 129, 1000, 4095, 4096, 4097, 65535, 65536,
                         65537, 1u << 20, (1u << 20) + 1, 1u << 30, (1u << 30) + 1, 2147483647u};
  for (uint32_t d : ds) {
    for (uint32_t n : {0u, 1u, d - 1, d, d + 1, 0x7ffffffeu, 0x7fffffffu}) if (n <= 0x7fffffffu) check(d, n);
    for (int i = 0; i < 20000; ++i) check(d, g() & 0x7fffffffu);
  }
  for (int i = 0; i < 2000; ++i) {
    const uint32_t d = i % 2 ? (g() % 100000) + 1 : (g() & 0x7fffffffu) | 1u;
    for (int j = 0; j < 200; ++j) check(d, g() & 0x7fffffffu);
  }
  std::printf("bad %ld\n", bad);
  return bad != 0;
}
"""


@pytest.mark.skipif(CXX is None, reason="no C++ compiler")
def test_fast_div_matches_integer_division(tmp_path):
    src = tmp_path / "fast_div_check.cpp"
    src.write_text(PROGRAM)
    exe = tmp_path / "fast_div_check"
    res = subprocess.run([CXX, "-std=c++17", "-O2", "-I", CSRC, str(src), "-o", str(exe)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == "bad 0", run.stdout[-2000:]
