"""build_config.py: the keys that decide whether a prebuilt kernel object may be linked instead of
compiling its .cu (a wrong "match" would link stale code), on small trees of their own; and
tools/kernel_objects.py, the command that builds the objects, on the same functions."""
from __future__ import annotations

import json
import lzma
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import build_config as bc  # noqa: E402

FLAGS = ["-O3", "-gencode=arch=compute_90a,code=sm_90a"]


def _tree(root: Path) -> Path:
    """csrc/kernels/a.cu -> kernels/h.cuh -> engine/e.cuh (and <cuda.h>, not the project's);
    csrc/kernels/b.cu includes nothing of the project; csrc/ops/x.cpp is not a kernel."""
    (root / "csrc" / "kernels").mkdir(parents=True)
    (root / "csrc" / "engine").mkdir()
    (root / "csrc" / "ops").mkdir()
    (root / "csrc" / "kernels" / "a.cu").write_text('#include "kernels/h.cuh"\n#include <cuda.h>\nint a;\n')
    (root / "csrc" / "kernels" / "h.cuh").write_text('#pragma once\n  #  include "engine/e.cuh"\nint h;\n')
    (root / "csrc" / "engine" / "e.cuh").write_text('#pragma once\n#include "e2.cuh"\nint e;\n')  # beside it
    (root / "csrc" / "engine" / "e2.cuh").write_text("int e2;\n")
    (root / "csrc" / "kernels" / "b.cu").write_text("int b;\n")
    (root / "csrc" / "ops" / "x.cpp").write_text('#include "kernels/h.cuh"\n')
    return root


def test_project_deps_follow_quoted_includes_transitively(tmp_path):
    root = _tree(tmp_path)
    deps = [p.as_posix() for p in bc.project_deps(root / "csrc/kernels/a.cu", root)]
    assert deps == ["csrc/engine/e.cuh", "csrc/engine/e2.cuh", "csrc/kernels/a.cu", "csrc/kernels/h.cuh"]
    assert [p.as_posix() for p in bc.project_deps(root / "csrc/kernels/b.cu", root)] == ["csrc/kernels/b.cu"]


def test_project_deps_of_the_real_kernels():
    """The stencil kernels depend on the engine and the stencil headers; device_info does not."""
    deps = {p.as_posix() for p in bc.project_deps(bc.ROOT / "csrc/kernels/stencil_tma.cu")}
    assert {"csrc/kernels/stencil.cuh", "csrc/kernels/stencil/kernel.cuh", "csrc/kernels/stencil/family.cuh",
            "csrc/kernels/stencil/consumer_mma.cuh", "csrc/engine/rings.cuh", "csrc/engine/mbarrier.cuh"} <= deps
    assert "csrc/kernels/stencil.cuh" not in {p.as_posix() for p in bc.project_deps(bc.ROOT / "csrc/kernels/device_info.cu")}
    assert all(p.name.endswith(".cu") for p in bc.kernel_sources())
    assert len(bc.kernel_sources()) >= 20


def test_key_changes_with_every_input_and_only_those(tmp_path):
    root = _tree(tmp_path)
    a = root / "csrc/kernels/a.cu"
    key = bc.object_key(a, FLAGS, "13.0", root)
    assert key == bc.object_key(a, list(FLAGS), "13.0", root)  # deterministic
    assert key != bc.object_key(a, FLAGS + ["-lineinfo"], "13.0", root)
    assert key != bc.object_key(a, FLAGS[::-1], "13.0", root)
    assert key != bc.object_key(a, FLAGS, "13.1", root)
    (root / "csrc/kernels/b.cu").write_text("int b2;\n")  # not a dependency
    (root / "csrc/ops/x.cpp").write_text("// edited\n")
    assert key == bc.object_key(a, FLAGS, "13.0", root)
    e2 = root / "csrc/engine/e2.cuh"  # two includes down
    e2.write_text("int e2; \n")
    assert key != bc.object_key(a, FLAGS, "13.0", root)


def _kdir(root: Path, entries: dict) -> Path:
    kdir = root / ".kobj"
    kdir.mkdir()
    objects = {}
    for rel, (key, data) in entries.items():
        name = Path(rel).stem + ".o.xz"
        (kdir / name).write_bytes(lzma.compress(data))
        objects[rel] = {"key": key, "object": name}
    (kdir / bc.MANIFEST).write_text(json.dumps({"format": bc.FORMAT, "objects": objects}))
    return kdir


def test_match_links_current_objects_and_compiles_the_rest(tmp_path):
    root = _tree(tmp_path)
    a, b = root / "csrc/kernels/a.cu", root / "csrc/kernels/b.cu"
    kdir = _kdir(root, {"csrc/kernels/a.cu": (bc.object_key(a, FLAGS, "13.0", root), b"A-object"),
                        "csrc/kernels/b.cu": (bc.object_key(b, FLAGS, "13.0", root), b"B-object")})
    found, rest = bc.match(kdir, [a, b], FLAGS, "13.0", root)
    assert set(found) == {a, b} and rest == []
    paths = bc.unpack(found, root / "build" / "kobj")
    assert sorted(Path(p).read_bytes() for p in paths) == [b"A-object", b"B-object"]

    (root / "csrc/engine/e.cuh").write_text("#pragma once\nint e_changed;\n")  # a's header changes
    found, rest = bc.match(kdir, [a, b], FLAGS, "13.0", root)
    assert set(found) == {b} and rest == [a]
    found, rest = bc.match(kdir, [a, b], FLAGS, "12.9", root)  # another nvcc release: none
    assert found == {} and rest == [a, b]
    (kdir / "b.o.xz").unlink()  # listed but missing
    assert bc.match(kdir, [b], FLAGS, "13.0", root) == ({}, [b])


@pytest.mark.parametrize("text", [None, "not json", json.dumps({"format": 999, "objects": {}}),
                                  json.dumps({"format": bc.FORMAT, "objects": []})])
def test_a_bad_manifest_matches_nothing(tmp_path, text):
    root = _tree(tmp_path)
    kdir = root / ".kobj"
    kdir.mkdir()
    if text is not None:
        (kdir / bc.MANIFEST).write_text(text)
    a = root / "csrc/kernels/a.cu"
    assert bc.match(kdir, [a], FLAGS, "13.0", root) == ({}, [a])


@pytest.mark.parametrize("arch", ["9.0", "9.0a", "8.0;9.0+PTX", "8.0 8.6 9.0", "7.5;8.0+PTX;9.0a"])
def test_arch_flags_are_torchs(arch, monkeypatch):
    """The key's architecture flags are the ones torch's build passes for the same list."""
    cpp_ext = pytest.importorskip("torch.utils.cpp_extension")
    get = getattr(cpp_ext, "_get_cuda_arch_flags", None)
    if get is None:
        pytest.skip("torch has no _get_cuda_arch_flags")
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", arch)
    assert bc.arch_flags(arch) == sorted(set(get()))


def test_arch_flags_reject_nonsense():
    with pytest.raises(ValueError, match="cannot read"):
        bc.arch_flags("sm90")
    with pytest.raises(ValueError, match="empty"):
        bc.arch_flags(" ; ")


def test_compile_flags_are_torchs_then_the_projects():
    pytest.importorskip("torch.utils.cpp_extension")
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS
    flags = bc.compile_flags("9.0a")
    assert flags[:len(COMMON_NVCC_FLAGS)] == list(COMMON_NVCC_FLAGS)
    assert flags[-len(bc.nvcc_flags()):] == bc.nvcc_flags()
    assert "-gencode=arch=compute_90a,code=sm_90a" in flags and "-DCUPIPE_WITH_CUDA=1" in flags
    assert bc.compile_flags("9.0a", debug=True)[-1] == "-lineinfo"
    assert bc.release("13.0.88") == "13.0"


def test_the_command_uses_build_configs_functions():
    """tools/kernel_objects.py computes keys and flags with build_config's functions, not copies."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("kernel_objects_tool", ROOT / "tools" / "kernel_objects.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    for name in ("object_key", "match", "compile_flags", "project_deps", "kernel_sources", "release"):
        assert getattr(tool, name) is getattr(bc, name), name
    assert tool.ROOT == bc.ROOT == ROOT
