"""Build cupipe._C: one extension module with the torch bindings (.cpp) and, whenever nvcc is
available, the CUDA launchers and the kernel instances built ahead of time. A GPU is never needed
to build.

Ahead of time the build compiles the kernel instances the tuning table can choose (each op, dtype
and kernel family: cupipe/_kernels.py, default_instances); every other configuration compiles on
first use (cupipe/_kernel_cache.py), from the headers this build snapshots into cupipe/include
with the flags it records in cupipe/_build_info.py.

Environment knobs:
  TORCH_CUDA_ARCH_LIST  architectures of the ahead-of-time kernels. Default: the GPU present at
                        build time, else "9.0" (Hopper, the GPUs cupipe is tuned on). On any other
                        GPU the kernels compile for it on first use.
  CUPIPE_AOT=all        build every kernel instance ahead of time (offline machines, wheels)
  MAX_JOBS              parallel compile jobs (ninja)
  CUPIPE_NO_CUDA=1      build the CPU-only module even when nvcc is present
  CUPIPE_DEBUG=1        -O0 -g host code and -lineinfo device code

The nvcc flags come from build_config.py, beside this file.
"""
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def _load_build_modules():
    """build_config.py (the nvcc flags) and cupipe/_kernels.py (the kernel instances), loaded from
    their files, whatever the working directory and sys.path (the package is not importable yet)."""
    import importlib.util

    mods = []
    for name, path in (("cupipe_build_config", ROOT / "build_config.py"), ("cupipe_kernels", ROOT / "cupipe" / "_kernels.py")):
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # (NamedTuple classes look their module up)
        spec.loader.exec_module(mod)
        mods.append(mod)
    return mods


build_config, kernel_set = _load_build_modules()


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


def _default_arch_list():
    """The GPU present at build time, else 9.0 (see the module's docstring)."""
    try:
        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability(0)
            return f"{major}.{minor}"
    except Exception:  # noqa: BLE001 - a broken driver at build time is not a build error
        pass
    return "9.0"


if not os.environ.get("TORCH_CUDA_ARCH_LIST"):
    os.environ["TORCH_CUDA_ARCH_LIST"] = _default_arch_list()
aot_all = os.environ.get("CUPIPE_AOT", "").lower() == "all"

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


def _write_build_info(aot_instances=0):
    """Record what this build was made with; cupipe/__init__.py compares it at import, and a
    first-use compile takes its flags from here."""
    info = {
        "torch_version": torch.__version__.split("+")[0],
        "torch_cuda": torch.version.cuda if with_cuda else None,
        "nvcc_version": _cuda_version_of_nvcc() if with_cuda else None,
        "with_cuda": with_cuda,
        "arch_list": os.environ["TORCH_CUDA_ARCH_LIST"] if with_cuda else None,
        "kernel_flags": build_config.kernel_flags(debug) if with_cuda else None,
        "aot": ("all" if aot_all else "default") if with_cuda else None,
        "aot_instances": aot_instances,
    }
    path = ROOT / "cupipe" / "_build_info.py"
    text = "# Written by setup.py at build time. Do not edit.\nBUILD_INFO = " + repr(info) + "\n"
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def _ship_headers():
    """Copy the engine and kernel headers into the package (cupipe/include): cupipe.include_dir()
    serves the engine from there, and first-use compiles build from exactly these headers (the
    module's launchers were compiled against them), for installed wheels as for checkouts."""
    import shutil as _sh

    for sub in ("engine", "kernels"):
        src_root, dst_root = ROOT / "csrc" / sub, ROOT / "cupipe" / "include" / sub
        want = {p.relative_to(src_root) for p in src_root.rglob("*") if p.suffix in (".h", ".cuh")}
        for rel in want:
            src, dst = src_root / rel, dst_root / rel
            if not dst.exists() or dst.read_bytes() != src.read_bytes():
                dst.parent.mkdir(parents=True, exist_ok=True)
                _sh.copy2(src, dst)
        if dst_root.exists():
            for p in dst_root.rglob("*"):
                if p.is_file() and p.relative_to(dst_root) not in want:
                    p.unlink()  # a header removed from csrc leaves the snapshot too


_ship_headers()


def _aot_sources():
    """Write the ahead-of-time instance files (build/aot_kernels/*.cu, rewritten only when their
    text changes) and return their paths: the instances grouped by header and mechanism, in files
    of at most about the same compile cost so that the build's jobs finish together."""
    instances = kernel_set.all_instances() if aot_all else kernel_set.default_instances(os.environ["TORCH_CUDA_ARCH_LIST"])
    out_dir = ROOT / "build" / "aot_kernels"
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {}
    budget = 96  # about twelve stencil instances a file: each file parses the headers once
    # One header and one mechanism a file: a first-use compile of one of its instances parses
    # what the file parsed (the same rings), so the two compile alike.
    for header, mech in sorted({(i.header, i.mechanism) for i in instances}):
        group = sorted((i for i in instances if (i.header, i.mechanism) == (header, mech)), key=lambda i: i.id)
        chunk, cost, n = [], 0, 0
        stem = str(Path(header).relative_to("kernels").with_suffix("")).replace("/", "_") + (f"_{mech}" if mech else "")
        for inst in group + [None]:
            if inst is None or (chunk and cost + inst.cost > budget):
                files[out_dir / f"{stem}_{n:03d}.cu"] = kernel_set.translation_unit(chunk)
                chunk, cost, n = [], 0, n + 1
            if inst is not None:
                chunk.append(inst)
                cost += inst.cost
    for path, text in files.items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    for stale in set(out_dir.glob("*.cu")) - set(files):
        stale.unlink()
    return sorted(str(p.relative_to(ROOT)) for p in files), len(instances)


cpp_sources = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc" / "ops").glob("*.cpp"))
cu_sources = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc" / "kernels").glob("*.cu"))

# -g0: Python's own CFLAGS carry -g, and debug info for torch's templates took half the build.
cxx_flags = ["-O0", "-g"] if debug else ["-O3", "-g0"]
cxx_flags += ["-std=c++20", "-Wall", "-Wno-unused-function", "-Werror=return-type"]
define_macros = [("CUPIPE_WITH_CUDA", "1" if with_cuda else "0")]


def _torch_libstdcxx() -> list:
    """The shared libstdc++ this process (Python with torch) has loaded, linked by its path.

    The extension must share torch's C++ runtime. A module that carries its own static copy (the GPU
    image's default g++ builds one: no libstdc++ among its needed libraries) indexes locale facets
    with the other copy's ids: the first number formatted into an error message crashed the
    interpreter, in the module's own codecvt. Naming the loaded library first resolves the C++
    runtime to it, whatever the compiler would otherwise link for -lstdc++.
    """
    if not sys.platform.startswith("linux"):
        return []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 6 and os.path.basename(fields[-1]).startswith("libstdc++.so"):
                    return [fields[-1]]
    except OSError:
        pass
    return []


link_args = _torch_libstdcxx()


aot_count = 0
if with_cuda:
    aot_sources, aot_count = _aot_sources()
    ext = CUDAExtension(
        name="cupipe._C",
        sources=cpp_sources + cu_sources + aot_sources,
        include_dirs=[str(ROOT / "csrc")],
        define_macros=define_macros,
        extra_compile_args={"cxx": cxx_flags, "nvcc": build_config.nvcc_flags(debug)},
        extra_link_args=link_args,
    )
else:
    ext = CppExtension(
        name="cupipe._C",
        sources=cpp_sources,
        include_dirs=[str(ROOT / "csrc")],
        define_macros=define_macros,
        extra_compile_args={"cxx": cxx_flags},
        extra_link_args=link_args,
    )

_write_build_info(aot_count)

if not with_cuda:
    print("cupipe: building WITHOUT CUDA (no nvcc/CUDA torch found or CUPIPE_NO_CUDA=1)", file=sys.stderr)

setup(
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
