"""cupipe: stage-pipelined async global->shared copies for NVIDIA GPUs, and the pipelined
stencils and reductions built on them, as torch ops (``torch.ops.cupipe.*``).

    import torch, cupipe
    y = cupipe.stencil2d(x, w, boundary="reflect")          # or torch.ops.cupipe.stencil2d
    s = cupipe.reduce(x, "sum", dim=-1)
"""
import logging as _logging
from pathlib import Path as _Path

import torch as _torch

__version__ = "0.1.0"


def _check_build():
    try:
        from ._build_info import BUILD_INFO
    except ImportError:  # pragma: no cover - only on a source tree that was never built
        raise ImportError(
            "cupipe's compiled module is not built. From the source tree run:\n"
            "    pip install --no-build-isolation -e .\n"
            "(--no-build-isolation builds against the torch you already have installed)"
        ) from None
    have_torch = _torch.__version__.split("+")[0]
    if BUILD_INFO["torch_version"] != have_torch:
        raise ImportError(
            f"cupipe was built against torch {BUILD_INFO['torch_version']} but torch {have_torch} "
            "is installed. Rebuild cupipe with the installed torch:\n"
            "    pip install --no-build-isolation --force-reinstall --no-deps -e ."
        )
    if BUILD_INFO["with_cuda"] and _torch.version.cuda is not None:
        built = BUILD_INFO["torch_cuda"].split(".")[0]
        have = _torch.version.cuda.split(".")[0]
        if built != have:
            raise ImportError(
                f"cupipe was built for CUDA {BUILD_INFO['torch_cuda']} but torch uses CUDA "
                f"{_torch.version.cuda}. Rebuild cupipe: pip install --no-build-isolation "
                "--force-reinstall --no-deps -e ."
            )
    return BUILD_INFO


build_info = _check_build()

try:
    from . import _C  # noqa: F401  (registers torch.ops.cupipe.*)
except ImportError as e:  # pragma: no cover
    raise ImportError(
        f"cupipe's compiled module failed to load ({e}). It was built with {build_info}; rebuild "
        "it against the installed torch: pip install --no-build-isolation --force-reinstall "
        "--no-deps -e ."
    ) from e
if not hasattr(_C, "layout_plan"):  # pragma: no cover - a module built from an older tree
    raise ImportError("cupipe's compiled module is older than its Python package; rebuild it: pip "
                      "install --no-build-isolation --force-reinstall --no-deps -e .")

from .ops import MECHANISMS, BOUNDARIES, REDUCE_OPS, reduce, stencil1d, stencil2d, stencil3d, stream_copy  # noqa: E402
from . import tuning  # noqa: E402
from .tuning import explain, tune  # noqa: E402
from ._kernel_cache import precompile  # noqa: E402

# First-use compiles say what they compile and where it is cached, once each (INFO, on stderr
# unless the application configures logging for "cupipe" itself).
_log = _logging.getLogger("cupipe")
if not _log.handlers:
    _handler = _logging.StreamHandler()
    _handler.setFormatter(_logging.Formatter("%(message)s"))
    _log.addHandler(_handler)
    _log.setLevel(_logging.INFO)
    _log.propagate = False


def include_dir() -> str:
    """Directory to add to an extension's include path to use the header-only engine
    (``#include "engine/engine.cuh"``; needs nvcc, sm_80+, no torch). A source checkout serves
    ``csrc/``; an installed package the copy that setup.py ships in ``cupipe/include``."""
    here = _Path(__file__).resolve().parent
    for cand in (here.parent / "csrc", here / "include"):
        if (cand / "engine" / "engine.cuh").is_file():
            return str(cand)
    raise FileNotFoundError("cupipe engine headers not found next to the package")


def cuda_available() -> bool:
    """True when cupipe was built with CUDA and a CUDA device is visible."""
    return bool(_C.with_cuda) and _torch.cuda.is_available()


def tma_available(device=None) -> bool:
    """True when ``mechanism="tma"`` runs on ``device`` (a CUDA device or index; default the
    current one): an sm_90 (Hopper) or newer GPU, and this build's kernels running there as sm_90
    code or newer. A build without it (``TORCH_CUDA_ARCH_LIST="8.0+PTX"`` on an H100) runs older
    PTX with no bulk copies, and the ops reject 'tma' there with a ValueError."""
    if not cuda_available():
        return False
    if device is None or isinstance(device, int):
        index = device
    else:
        device = _torch.device(device)
        if device.type != "cuda":
            return False
        index = device.index
    if index is None:
        index = _torch.cuda.current_device()
    # The kernels never run as a newer architecture than the device's: sm_90 code implies an sm_90+ GPU.
    return tuning.code_sm(_C.cuda_device_info(index)) >= 90


__all__ = [
    "stream_copy",
    "stencil1d",
    "stencil2d",
    "stencil3d",
    "reduce",
    "explain",
    "tune",
    "tuning",
    "precompile",
    "MECHANISMS",
    "BOUNDARIES",
    "REDUCE_OPS",
    "include_dir",
    "cuda_available",
    "tma_available",
    "build_info",
]
