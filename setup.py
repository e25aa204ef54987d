"""Build cupipe._C: one extension module with the torch bindings (.cpp) and, whenever nvcc is
available, the CUDA kernels (.cu). A GPU is never needed to build.

Environment knobs:
  TORCH_CUDA_ARCH_LIST  architectures (default "8.0;9.0+PTX")
  MAX_JOBS              parallel compile jobs (ninja)
  CUPIPE_NO_CUDA=1      build the CPU-only module even when nvcc is present
  CUPIPE_DEBUG=1        -O0 -g host code and -lineinfo device code
  CUPIPE_KERNEL_OBJECTS=DIR  link the kernel objects in DIR that match this tree (built elsewhere
                        by tools/kernel_objects.py) instead of compiling those .cu files

The nvcc flags and the prebuilt objects' keys come from build_config.py, beside this file.
"""
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def _load_build_config():
    """build_config.py (the nvcc flags and the prebuilt objects' keys), loaded from its file beside
    this one, whatever the working directory and sys.path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("cupipe_build_config", ROOT / "build_config.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


build_config = _load_build_config()


def _find_cuda_home():
    """torch guesses CUDA_HOME from `which nvcc`; a wrapper script in /usr/local/bin makes that
    guess /usr/local. Prefer an explicit CUDA_HOME, then the toolkit that holds nvcc for real."""
    if os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH"):
        return
    for cand in ("/usr/local/cuda",):
        if Path(cand, "bin", "nvcc").exists():
            os.environ["CUDA_HOME"] = cand
            return


_find_cuda_home()

from setuptools import setup  # noqa: E402
import torch  # noqa: E402
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension, CUDA_HOME  # noqa: E402

os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "8.0;9.0+PTX")

with_cuda = (
    os.environ.get("CUPIPE_NO_CUDA", "0") != "1"
    and CUDA_HOME is not None
    and shutil.which("nvcc", path=str(Path(CUDA_HOME) / "bin") + os.pathsep + os.environ.get("PATH", ""))
    is not None
    and torch.version.cuda is not None
)
debug = os.environ.get("CUPIPE_DEBUG", "0") == "1"


def _cuda_version_of_nvcc():
    return build_config.nvcc_version(str(Path(CUDA_HOME) / "bin" / "nvcc")) or "unknown"


def _write_build_info(prebuilt=0):
    """Record what this build was made with; cupipe/__init__.py compares it at import.
    prebuilt: how many kernel objects came from CUPIPE_KERNEL_OBJECTS."""
    info = {
        "torch_version": torch.__version__.split("+")[0],
        "torch_cuda": torch.version.cuda if with_cuda else None,
        "nvcc_version": _cuda_version_of_nvcc() if with_cuda else None,
        "with_cuda": with_cuda,
        "arch_list": os.environ["TORCH_CUDA_ARCH_LIST"] if with_cuda else None,
        "prebuilt_kernel_objects": prebuilt,
    }
    path = ROOT / "cupipe" / "_build_info.py"
    text = "# Written by setup.py at build time. Do not edit.\nBUILD_INFO = " + repr(info) + "\n"
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def _ship_engine_headers():
    """Copy the header-only engine into the package (cupipe/include/engine), so that
    cupipe.include_dir() works for installed wheels too, not only for source checkouts."""
    import shutil as _sh

    dst = ROOT / "cupipe" / "include" / "engine"
    dst.mkdir(parents=True, exist_ok=True)
    for src in (ROOT / "csrc" / "engine").iterdir():
        if src.suffix in (".h", ".cuh") and (not (dst / src.name).exists() or (dst / src.name).read_bytes() != src.read_bytes()):
            _sh.copy2(src, dst / src.name)


_ship_engine_headers()

cpp_sources = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc" / "ops").glob("*.cpp"))
cu_sources = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc" / "kernels").glob("*.cu"))

cxx_flags = ["-O0", "-g"] if debug else ["-O3"]
cxx_flags += ["-std=c++20", "-Wall", "-Wno-unused-function", "-Werror=return-type"]
define_macros = [("CUPIPE_WITH_CUDA", "1" if with_cuda else "0")]


def _prebuilt_kernel_objects(sources):
    """(objects to link, sources still to compile) under CUPIPE_KERNEL_OBJECTS: the objects whose
    key (build_config.py: sources, headers, flags, nvcc release) matches this tree,
    decompressed into build/kernel_objects; every other .cu compiles as usual."""
    kdir = os.environ.get("CUPIPE_KERNEL_OBJECTS")
    if not kdir:
        return [], sources
    arch = os.environ["TORCH_CUDA_ARCH_LIST"]
    flags = build_config.compile_flags(arch, debug)
    nvcc_release = build_config.release(_cuda_version_of_nvcc())
    found, rest = build_config.match(Path(kdir).resolve(), [ROOT / s for s in sources], flags, nvcc_release)
    objects = build_config.unpack(found, ROOT / "build" / "kernel_objects")
    print(f"cupipe: {len(objects)} kernel objects from {kdir} (arch {arch}, nvcc {nvcc_release}); "
          f"compiling {len(rest)}: {' '.join(p.name for p in rest) or '-'}", file=sys.stderr)
    return objects, [str(p.relative_to(ROOT)) for p in rest]


prebuilt = []
if with_cuda:
    prebuilt, cu_sources = _prebuilt_kernel_objects(cu_sources)
    ext = CUDAExtension(
        name="cupipe._C",
        sources=cpp_sources + cu_sources,
        include_dirs=[str(ROOT / "csrc")],
        define_macros=define_macros,
        extra_compile_args={"cxx": cxx_flags, "nvcc": build_config.nvcc_flags(debug)},
        extra_objects=prebuilt,
        depends=prebuilt,  # a changed object relinks the module
    )
else:
    ext = CppExtension(
        name="cupipe._C",
        sources=cpp_sources,
        include_dirs=[str(ROOT / "csrc")],
        define_macros=define_macros,
        extra_compile_args={"cxx": cxx_flags},
    )

_write_build_info(len(prebuilt))

if not with_cuda:
    print("cupipe: building WITHOUT CUDA (no nvcc/CUDA torch found or CUPIPE_NO_CUDA=1)", file=sys.stderr)

setup(
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
