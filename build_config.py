"""The build's nvcc configuration, loaded by setup.py: the project's nvcc flags, the
TORCH_CUDA_ARCH_LIST parser and nvcc's location and version. setup.py records the flags of a kernel
compile in cupipe/_build_info.py, so that a kernel compiled on first use (cupipe/_kernel_cache.py)
gets exactly the flags of the ones built ahead of time.

Standard library only (torch is imported lazily by torch_nvcc_flags), so setup.py can load it
before anything else.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import List, Optional

ROOT = Path(__file__).resolve().parent

# The project's own nvcc flags (setup.py adds the include dir, the define and torch's flags).
NVCC_FLAGS = [
    "-O3",
    "-std=c++17",
    "--expt-relaxed-constexpr",
    "-Xptxas=-warn-spills",
    # torch adds the __CUDA_NO_HALF*__ defines to every nvcc command; the kernels need the half
    # operators back.
    "-U__CUDA_NO_HALF_OPERATORS__",
    "-U__CUDA_NO_HALF_CONVERSIONS__",
    "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
    "-U__CUDA_NO_HALF2_OPERATORS__",
]
DEFINES = ["-DCUPIPE_WITH_CUDA=1"]


def nvcc_flags(debug: bool = False) -> List[str]:
    """The project's nvcc flags (setup.py's extra_compile_args["nvcc"])."""
    return NVCC_FLAGS + (["-lineinfo"] if debug else [])


def torch_nvcc_flags() -> List[str]:
    """torch's flags for every nvcc command of an extension (torch.utils.cpp_extension's
    COMMON_NVCC_FLAGS), which precede the project's."""
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS

    return list(COMMON_NVCC_FLAGS)


def kernel_flags(debug: bool = False) -> List[str]:
    """The flags of a kernel's nvcc command that concern its device code, in the order torch's
    build writes them (its common flags, then ours), without the architectures, the host
    compiler's -fPIC, the include dir, the input and the output: what a first-use compile adds
    its one architecture and -cubin to."""
    return torch_nvcc_flags() + DEFINES + nvcc_flags(debug)


def nvcc_path() -> str:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    cand = Path(home) / "bin" / "nvcc"
    return str(cand) if cand.exists() else (shutil.which("nvcc") or "nvcc")


def nvcc_version(nvcc: Optional[str] = None) -> str:
    """nvcc's full version ("13.0.88"), or "" when there is no nvcc."""
    try:
        out = subprocess.run([nvcc or nvcc_path(), "--version"], capture_output=True, text=True).stdout
    except OSError:
        return ""
    m = re.search(r"\bV(\d+\.\d+\.\d+)", out)
    return m.group(1) if m else ""
