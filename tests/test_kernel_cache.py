"""Kernel instances and first-use compilation (cupipe/_kernels.py, cupipe/_kernel_cache.py): which
instances the build compiles, the cache's key, hits and misses, concurrent compiles, corrupt files,
an unwritable cache dir and a missing nvcc. The compile tests need nvcc and a CUDA build (CI has
both: it compiles cubins, it cannot launch them); the GPU tests load and launch them."""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import cupipe
from cupipe import _C, _kernel_cache as kc, _kernels as ks
from conftest import sass_functions

ROOT = Path(__file__).resolve().parent.parent
ARCH = "sm_90"
# A cheap instance to compile (a few seconds), and one that is never built ahead of time.
CHEAP = ks.stream_copy_instances("cg", 7, widths=(8,))[0]

needs_nvcc = pytest.mark.skipif(
    kc.nvcc_path() is None or not cupipe.build_info.get("kernel_flags"),
    reason="needs nvcc and a CUDA build of cupipe (the recorded kernel flags)")


def test_instance_ids_are_unique_and_defaults_are_instances():
    every = ks.all_instances()
    ids = [i.id for i in every]
    assert len(ids) == len(set(ids))
    assert {i.id for i in ks.default_instances()} <= set(ids)
    # every stencil family that family.cuh compiles, for each (mechanism, stages, dtype)
    assert len(ks.select(every, op="stencil", mechanism="tma", stages=2, dtype="float16")) == 13
    assert len(ks.select(every, op="stencil", mechanism="sync", stages=5, dtype="float64")) == 5
    assert CHEAP.id not in {i.id for i in ks.default_instances()}
    hopper = {i.id for i in ks.default_instances("9.0")}
    assert hopper < {i.id for i in ks.default_instances("8.0;9.0+PTX")} == {i.id for i in ks.default_instances()}


def test_translation_unit_compiles_only_the_rings_its_ids_name():
    """CUPIPE_ENGINE_MECHANISMS (engine/rings.cuh): the mechanisms the ids name, a first-use file
    (which knows only the id) and an ahead-of-time file alike."""
    tu = ks.translation_unit
    assert tu(ks.stencil_instances("tma", 2, "float32", ["Box"])).startswith("#define CUPIPE_ENGINE_MECHANISMS 0x80\n")
    assert tu([CHEAP]).startswith("#define CUPIPE_ENGINE_MECHANISMS 0x10\n")
    both = ks.reduce_instances("pipeline", 3, "float32") + ks.reduce_instances("specialized", 3, "float32")
    assert tu(both).startswith("#define CUPIPE_ENGINE_MECHANISMS 0x42\n")
    bare = [ks.Instance("", i.header, i.id, "", 0, "", "") for i in ks.wgrad_instances("float16")[:1]]
    assert tu(bare).startswith("#define CUPIPE_ENGINE_MECHANISMS 0x00\n")


def test_select_keeps_the_kernels_every_configuration_needs():
    got = ks.select(ks.all_instances(), op="reduce", mechanism="tma", stages=3, dtype="bfloat16")
    kinds = sorted(i.family for i in got)
    # the two main passes, the stage-less wide rows of tma, and the partials passes of both types
    assert "rows" in kinds and "cols" in kinds and "wide_rows" in kinds
    assert sum(k.startswith("reduce_partials") or k.startswith("reduce_col_partials") for k in kinds) == 6
    assert all(i.mechanism in ("tma", "") for i in got)


def _table_choices():
    """(op, dtype, mechanism, stages) the tuning table resolves "auto" to, over a grid of shapes."""
    out = set()
    for sm in (80, 90):
        for dt, (_, esz) in ks.DTYPES.items():
            for outer, r, inner in [(1, 1 << 20, 1), (64, 2048, 1), (64, 16384, 1), (8, 100, 64), (8, 100, 1024),
                                    (8, 100, 2048), (8, 100, 1000), (4, 3, 100000)]:
                for rows16 in (False, True):
                    m, s, _ = _C.resolve_config("reduce", sm, "auto", 0, 0, outer=outer, r=r, inner=inner, esz=esz,
                                                rows16=rows16 and inner * esz % 16 == 0)
                    kind = "rows" if inner == 1 else f"cols_direct{ks.cols_direct_loads(s)}" if m == "sync" else "cols"
                    out.add(("reduce", dt, m, s, kind))
            for ry in range(0, 5):
                for rx in range(0, 5):
                    for rows16 in (False, True):
                        for step in (1, 3, 16, 200):
                            m, s, _ = _C.resolve_config("stencil2d", sm, "auto", 0, 0, ry=ry, rx=rx, esz=esz,
                                                        rows16=rows16, step=step)
                            out.add(("stencil", dt, m, s, None))
        m, s, _ = _C.resolve_config("stream_copy", sm, "auto", 0, 0)
        out.add(("stream_copy", "", m, s, None))
    return out


def test_the_default_instances_cover_every_choice_of_the_table():
    """What mechanism="auto" can pick is built ahead of time: a table change that picks a new
    (mechanism, stages), or a reduction kernel (rows, cols) at one the set lacks for it, fails here
    until DEFAULT_CHOICES and default_instances() follow it."""
    defaults = ks.default_instances("8.0;9.0")
    for op, dt, m, s, kind in sorted(_table_choices(), key=str):
        assert (m, s) in ks.DEFAULT_CHOICES[op], (op, m, s)
        got = ks.select(defaults, op=op, dtype=dt or None, mechanism=m, stages=s)
        assert [i for i in got if kind in (None, i.family)], (op, dt, m, s, kind)


def test_every_state_choice_of_the_table_is_an_instance():
    """The state ops' kernels compile on first use, by the id their launcher composes: whatever the
    table picks for them (their own choices: reduce_op) is an instance of the list."""
    every = ks.all_instances()
    for sm in (80, 90):
        for dt, (_, esz) in ks.DTYPES.items():
            for outer, r, inner in [(64, 2048, 1), (8, 100, 64), (8, 100, 1000)]:
                for rows16 in (False, True):
                    m, s, _ = _C.resolve_config("reduce", sm, "auto", 0, 0, outer=outer, r=r, inner=inner, esz=esz,
                                                rows16=rows16 and (inner if inner > 1 else r) * esz % 16 == 0,
                                                reduce_op="var")
                    fam = "state_moments"
                    if m == "sync":
                        fam = f"state_{'cols' if inner > 1 else 'rows'}_direct{ks.cols_direct_loads(s)}_moments"
                    got = ks.select(every, op="reduce", dtype=dt, mechanism=m, stages=s)
                    assert [i for i in got if i.family == fam], (sm, dt, m, s, fam)


def test_translation_unit_is_the_instance_macro_over_the_header():
    text = ks.translation_unit([CHEAP])
    assert '#include "kernels/instance.h"' in text and f'#include "{CHEAP.header}"' in text
    assert f"CUPIPE_KERNEL_INSTANCE({CHEAP.id})" in text


def test_key_changes_with_every_input():
    base = dict(instance_id=CHEAP.id, header=CHEAP.header, arch=ARCH, flags=["-O3"], nvcc_ver="13.0.88",
                digest="d" * 64)
    k0 = kc.kernel_key(**base)
    assert kc.kernel_key(**base) == k0
    for field, other in [("instance_id", CHEAP.id.replace("7", "6")), ("header", "kernels/x.cuh"), ("arch", "sm_80"),
                         ("flags", ["-O2"]), ("nvcc_ver", "13.1.0"), ("digest", "e" * 64)]:
        assert kc.kernel_key(**dict(base, **{field: other})) != k0, field


def test_source_digest_follows_the_headers(tmp_path):
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "a.cuh").write_text("int a;\n")
    d0 = kc.source_digest(str(tmp_path))
    kc.source_digest.cache_clear()
    (tmp_path / "kernels" / "a.cuh").write_text("int b;\n")
    assert kc.source_digest(str(tmp_path)) != d0
    kc.source_digest.cache_clear()


def test_instance_digest_follows_exactly_the_included_headers(tmp_path):
    """A first-use instance's key covers its file and the headers it includes, transitively
    (beside the includer first, then the root), and no other header."""
    for name, text in {"kernels/k.cuh": '#include "engine/e.cuh"\n#include "near.h"\n#include <cuda.h>\n',
                       "kernels/near.h": "int near;\n", "engine/e.cuh": "int e;\n",
                       "kernels/other.cuh": "int other;\n"}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    src = '#include "kernels/k.cuh"\nCUPIPE_KERNEL_INSTANCE(k<1>)\n'

    def digest(source=src):
        kc._closure_digest.cache_clear()
        kc.source_digest.cache_clear()
        return kc.instance_digest(source, str(tmp_path))

    d0 = digest()
    assert digest() == d0 and digest(src.replace("k<1>", "k<2>")) != d0
    (tmp_path / "kernels" / "other.cuh").write_text("int changed;\n")
    assert digest() == d0
    for name in ("engine/e.cuh", "kernels/near.h", "kernels/k.cuh"):
        (tmp_path / name).write_text((tmp_path / name).read_text() + "// changed\n")
        d1 = digest()
        assert d1 != d0, name
        d0 = d1
    # an include it cannot follow: every header counts
    computed = '#define H "kernels/k.cuh"\n#include H\n'
    d2 = digest(computed)
    (tmp_path / "kernels" / "other.cuh").write_text("int again;\n")
    assert digest(computed) != d2


def test_arch_of_follows_the_build_list(monkeypatch):
    monkeypatch.setitem(cupipe.build_info, "arch_list", "9.0a")
    assert kc.arch_of(90) == "sm_90a" and kc.arch_of(80) == "sm_80"
    monkeypatch.setitem(cupipe.build_info, "arch_list", "8.0;9.0+PTX")
    assert kc.arch_of(90) == "sm_90" and kc.arch_of(120) == "sm_120"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUPIPE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _cache_files(cache):
    return sorted(p for p in cache.rglob("*.cubin"))


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@needs_nvcc
def test_a_miss_compiles_and_a_hit_reads_the_cache(cache):
    seen = _Lines()
    logging.getLogger("cupipe").addHandler(seen)
    try:
        data, compiled = kc._cubin(CHEAP.id, CHEAP.header, ARCH)
        assert compiled and data[:4] == b"\x7fELF"
        (line,) = seen.lines  # one line per compile: what and where
        assert "compiling" in line and CHEAP.id in line and str(cache) in line
        (f,) = _cache_files(cache)
        assert f.parent.parent.name == ARCH
        again, compiled = kc._cubin(CHEAP.id, CHEAP.header, ARCH)
        assert not compiled and again == data
        assert len(seen.lines) == 1
    finally:
        logging.getLogger("cupipe").removeHandler(seen)


@needs_nvcc
@pytest.mark.parametrize("damage", ["truncate", "flip", "empty"])
def test_a_corrupt_cache_file_is_compiled_again(cache, damage):
    data, _ = kc._cubin(CHEAP.id, CHEAP.header, ARCH)
    (f,) = _cache_files(cache)
    raw = bytearray(f.read_bytes())
    if damage == "truncate":
        raw = raw[: len(raw) // 2]
    elif damage == "flip":
        raw[len(raw) // 3] ^= 0xFF
    else:
        raw = bytearray()
    f.write_bytes(bytes(raw))
    again, compiled = kc._cubin(CHEAP.id, CHEAP.header, ARCH)
    assert compiled and again == data
    assert kc._read_valid(f) == data


@needs_nvcc
def test_an_instance_compiles_alike_from_any_file_name(tmp_path):
    """A first-use compile builds an instance from another file than the build did. A callee of
    internal linkage (static, anonymous namespace) is named after its file, and that name alone
    changed ptxas's code: the PTX of one default instance per header is the same under two names."""
    import concurrent.futures

    one_per_header = {}
    for inst in ks.default_instances("9.0"):
        one_per_header.setdefault(inst.header, inst)
    jobs = []
    for k, inst in enumerate(one_per_header.values()):
        text = ks.translation_unit([inst])
        for name in (f"a{k}.cu", f"stencil_kernel_primitives_{k:03d}.cu"):
            (tmp_path / name).write_text(text)
            jobs.append((inst.id, tmp_path / name))

    def ptx(src):
        cmd = [kc.nvcc_path(), f"-I{kc.include_dir()}", "-ptx", str(src), "-o", str(src.with_suffix(".ptx")),
               "-arch=" + ARCH] + kc.kernel_flags()
        subprocess.run(cmd, check=True, capture_output=True)
        return src.with_suffix(".ptx").read_text()

    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        texts = list(pool.map(ptx, [src for _, src in jobs]))
    assert len(one_per_header) >= 5
    for i in range(0, len(jobs), 2):
        iid = jobs[i][0]
        assert "_INTERNAL_" not in texts[i], iid
        assert texts[i] == texts[i + 1], iid


@needs_nvcc
def test_processes_compiling_the_same_kernel_at_once_all_succeed(cache):
    script = textwrap.dedent(f"""
        import sys, cupipe
        from cupipe import _kernel_cache as kc
        data, compiled = kc._cubin({CHEAP.id!r}, {CHEAP.header!r}, {ARCH!r})
        print("compiled" if compiled else "cached", len(data))
    """)
    env = dict(os.environ, CUPIPE_CACHE_DIR=str(cache))
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=str(ROOT)) for _ in range(3)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    words = sorted(o[0].split()[0] for o in outs)
    assert words == ["cached", "cached", "compiled"]  # the lock: one compile, the others read its file
    assert len({o[0].split()[1] for o in outs}) == 1
    assert len(_cache_files(cache)) == 1
    assert not [p for p in cache.rglob("*.tmp")]


def test_an_unwritable_cache_dir_names_the_variable(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("CUPIPE_CACHE_DIR", str(blocker / "cache"))  # a dir below a file: no one can create it
    if kc.nvcc_path() is None or not cupipe.build_info.get("kernel_flags"):
        with pytest.raises(kc.KernelCacheError):
            kc._writable_dir(kc.cache_dir())
        return
    with pytest.raises(kc.KernelCacheError, match="CUPIPE_CACHE_DIR"):
        kc.cubin(CHEAP.id, CHEAP.header, ARCH)


@pytest.mark.skipif(not cupipe.build_info.get("kernel_flags"), reason="needs a CUDA build of cupipe")
def test_no_nvcc_names_the_kernel_and_the_fixes(cache, monkeypatch):
    monkeypatch.setenv("CUPIPE_NVCC", str(cache / "no-such-nvcc"))
    with pytest.raises(kc.KernelCacheError) as e:
        kc.cubin(CHEAP.id, CHEAP.header, ARCH)
    msg = str(e.value)
    assert CHEAP.id in msg and "CUDA toolkit" in msg and "CUPIPE_AOT=all" in msg and "precompile" in msg


@needs_nvcc
def test_a_cache_made_with_nvcc_serves_a_machine_without(cache, monkeypatch):
    data, _ = kc._cubin(CHEAP.id, CHEAP.header, ARCH)
    monkeypatch.setenv("CUPIPE_NVCC", str(cache / "no-such-nvcc"))
    assert kc.cubin(CHEAP.id, CHEAP.header, ARCH) == data


@needs_nvcc
def test_precompile_fills_the_cache_for_an_arch_without_a_gpu(cache):
    got = cupipe.precompile("stream_copy", mechanism="cg", stages=[6, 7], arch=ARCH, jobs=2)
    assert got["instances"] == 6 and got["compiled"] == 6 and got["loaded"] == 0
    assert len(_cache_files(cache)) == 6
    again = cupipe.precompile("stream_copy", mechanism="cg", stages=[6, 7], arch=ARCH, jobs=2)
    assert again["compiled"] == 0 and again["cached"] == 6


def test_precompile_takes_stencil3d_radii():
    """stencil3d brings the 2-D kernels (rz = 0, weight gradients); radius narrows its own kernels to
    a depth radius and an in-plane class."""
    every = kc.instances_for("stencil3d", dtype="float32", mechanism="primitives", stages=2)
    assert {i.op for i in every} == {"stencil3d", "stencil", "stencil_wgrad"}
    assert len([i for i in every if i.op == "stencil3d"]) == len(ks.VOLUME_RZ) * len(ks.VOLUME_R) * 4
    got = kc.instances_for("stencil3d", dtype="float32", mechanism="primitives", stages=2,
                           radius=[(2, 1, 0), (1, 3, 2)])
    assert sorted(i.id for i in got if i.op == "stencil3d") == [
        f"stencil3d_kernel<engine::Mechanism::Primitives,2,float,{rz},{r},{odd},{star}>"
        for rz, r in ((1, 4), (2, 1)) for odd in ("false", "true") for star in ("false", "true")]
    assert {i.id for i in got if i.op != "stencil3d"} == {i.id for i in every if i.op != "stencil3d"}


def test_precompile_rejects_an_unknown_op():
    with pytest.raises(ValueError, match="unknown op"):
        cupipe.precompile("conv", arch=ARCH)


@pytest.mark.skipif(not cupipe.build_info.get("kernel_flags"), reason="needs a CUDA build of cupipe")
def test_the_module_holds_exactly_the_default_instances():
    want = {i.id for i in (ks.all_instances() if cupipe.build_info["aot"] == "all"
                           else ks.default_instances(cupipe.build_info["arch_list"]))}
    got = set(_C._ahead_of_time_kernels())
    assert got == want and cupipe.build_info["aot_instances"] == len(want)


# ----------------------------------------------------------------------------- on a GPU

cuda = pytest.mark.skipif(not cupipe.cuda_available(), reason="needs a CUDA device")
first_use_builds = pytest.mark.skipif(cupipe.build_info.get("aot") == "all",
                                      reason="CUPIPE_AOT=all: every instance is built in")


@cuda
@needs_nvcc
@first_use_builds
def test_a_first_use_kernel_runs(cache):
    x = torch.randn(1 << 20, device="cuda")
    y = cupipe.stream_copy(x, mechanism="cg", stages=7, vec_bytes=8)
    torch.testing.assert_close(y, x, rtol=0, atol=0)
    assert _C._kernel_origin(CHEAP.id) == "first-use"


@cuda
@needs_nvcc
def test_auto_calls_compile_nothing(tmp_path):
    """The default configurations of every op and dtype run on the built-in instances: a fresh
    process with an empty cache compiles nothing."""
    script = textwrap.dedent("""
        import torch, cupipe
        from cupipe import _C
        for dt in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
            x = torch.randn(3, 257, 1031, device="cuda").to(dt)
            cupipe.stream_copy(x)
            for w in (torch.randn(3, 3), torch.randn(5, 5), torch.randn(7, 7), torch.randn(9, 9), torch.randn(3, 7)):
                cupipe.stencil2d(x, w.to(dt).cuda())
            cupipe.stencil2d(x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x[:, :, 1:],
                             torch.randn(3, 3, device="cuda", dtype=dt))
            for d in (-1, -2, 0):
                cupipe.stencil1d(x, torch.randn(5, device="cuda", dtype=dt), dim=d)
            for d in (-1, -2, 0, [0, 2], None):
                cupipe.reduce(x, "sum", d)
            cupipe.reduce(torch.randn(1 << 22, device="cuda").to(dt), "amax")
        xg = torch.randn(2, 64, 64, device="cuda", requires_grad=True)
        wg = torch.randn(3, 3, device="cuda", requires_grad=True)
        cupipe.stencil2d(xg, wg).sum().backward()
        torch.cuda.synchronize()
        import glob, os
        print(len(glob.glob(os.path.join(os.environ["CUPIPE_CACHE_DIR"], "**", "*.cubin"), recursive=True)))
    """)
    env = dict(os.environ, CUPIPE_CACHE_DIR=str(tmp_path / "empty"), CUPIPE_NVCC=str(tmp_path / "no-nvcc"))
    p = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, cwd=str(ROOT))
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.split()[-1] == "0"


@cuda
@needs_nvcc
@first_use_builds
def test_graph_capture_needs_precompile_then_replays(cache):
    x = torch.randn(1 << 16, device="cuda")
    s = torch.cuda.Stream()
    g = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="precompile"):
        with torch.cuda.graph(g, stream=s):
            cupipe.stream_copy(x, mechanism="cg", stages=5, vec_bytes=4)
    got = cupipe.precompile("stream_copy", mechanism="cg", stages=5)
    assert got["loaded"] == got["instances"] - got["ahead_of_time"] > 0
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        y = cupipe.stream_copy(x, mechanism="cg", stages=5, vec_bytes=4)
    x.copy_(torch.randn_like(x))
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, x, rtol=0, atol=0)


# A sample of ahead-of-time instances: every op, dtype and stencil family kind. Not BoxMma: its
# ahead-of-time file compiles the out-of-line exact path (mma_unit_exact) for other kernels too,
# and its first-use SASS differs in register assignment (docs/design.md, "Kernel instances").
SASS_SAMPLE = [
    "stream_copy_kernel<engine::Mechanism::Sync,1,16>",
    "stencil_kernel<engine::Mechanism::Tma,2,float,StencilFamily::Narrow3,2>",
    "stencil_kernel<engine::Mechanism::Tma,2,__nv_bfloat16,StencilFamily::Mma7,1>",
    "stencil_kernel<engine::Mechanism::Primitives,2,double,StencilFamily::Box,2>",
    "stencil_kernel<engine::Mechanism::Barrier,1,__half,StencilFamily::SteppedRow,2>",
    "reduce_cols_kernel<engine::Mechanism::Tma,3,float>",
    "reduce_rows_kernel<engine::Mechanism::Primitives,1,__nv_bfloat16>",
    "reduce_partials_kernel<float>",
    "stencil_wgrad_kernel<float,BoxBlocking<3>>",
]


@pytest.mark.skipif(shutil.which("cuobjdump") is None, reason="needs cuobjdump")
@needs_nvcc
def test_first_use_sass_equals_ahead_of_time(cache):
    """A first-use compile (one instance, the build's flags) gives the SASS the build gave."""
    arch = "sm_" + cupipe.build_info["arch_list"].split(";")[0].replace(".", "").replace("+PTX", "")
    if arch != "sm_90":
        pytest.skip("the module's cubins are compared for sm_90")
    heads = {i.id: i.header for i in ks.all_instances()}
    built = set(_C._ahead_of_time_kernels())
    for iid in SASS_SAMPLE:
        assert iid in built and iid in heads, iid
        kc.cubin(iid, heads[iid], arch)
    first_use = {}
    for f in _cache_files(cache):
        first_use.update(sass_functions(f))
    assert len(first_use) == len(SASS_SAMPLE)
    module = {}
    for name in first_use:
        module.update(sass_functions(_C.__file__, containing=name))
    for name, text in first_use.items():
        assert name in module, name
        assert module[name] == text, name


@cuda
def test_explain_lists_the_kernels_a_call_launches_and_compiles_none():
    x = torch.randn(64, 100, 1023, device="cuda")
    e = cupipe.explain("reduce", x, "sum", 1)   # columns of 4092 bytes: tma/1 (the table), built in
    assert e.kernels[0] == ("reduce_cols_kernel<engine::Mechanism::Tma,1,float>", "built ahead of time")
    # with each launch: a grid, the reduce kernels' 256 threads, their stage in shared memory
    assert len(e.launches) == len(e.kernels)
    blocks, threads, smem = e.launches[0]
    assert blocks > 0 and threads == 256 and smem >= 4096
    assert f"launch: {blocks} blocks of 256 threads" in str(e)
    # 16-byte aligned columns: the direct kernel (sync/3 on sm_90), no shared-memory stages; 512 or
    # more narrowed chunks, over a wave of the 16-load kernel, take 8 loads in flight
    e = cupipe.explain("reduce", torch.randn(64, 100, 1024, device="cuda"), "sum", 1)
    if e.mechanism == "sync":
        assert e.kernels[0] == ("reduce_cols_direct_kernel<8,float>", "built ahead of time")
        blocks, threads, smem = e.launches[0]
        assert blocks >= 512 and threads == 256 and smem == 0
    # the state ops there: the direct state kernel (fp32: sync/2, 8 loads in flight), on first use;
    # explain resolves the op's own choice, not the sum's
    e = cupipe.explain("reduce", torch.randn(64, 100, 1024, device="cuda"), "var", 1)
    if e.mechanism == "sync":
        assert e.stages == 2
        assert e.kernels[0][0] == "reduce_state_cols_direct_kernel<8,float,StateKind::Moments>"
        assert e.launches[0][1:] == (256, 0)
    # 4000 short outer slices (rows of four vectors): several a block while the blocks fill the GPU
    e = cupipe.explain("reduce", torch.randn(4000, 250, 16, device="cuda"), "var", 1)
    if e.mechanism == "sync":
        assert e.kernels[0][0] == "reduce_state_cols_direct_kernel<8,float,StateKind::Moments>"
        assert e.launches[0][0] <= 2000
    # along aligned rows of 64 bytes or more: the direct row kernel (sync/1, 4 loads in flight); 64
    # rows of 256 KiB take a block a part of a row, the same parts each
    e = cupipe.explain("reduce", torch.randn(64, 1 << 16, device="cuda"), "argmax", 1)
    if e.mechanism == "sync":
        assert e.stages == 1
        assert e.kernels[0][0] == "reduce_state_rows_direct_kernel<4,float,StateKind::Arg>"
        blocks, threads, smem = e.launches[0]
        assert blocks % 64 == 0 and threads == 256 and smem == 0
    kid = "stream_copy_kernel<engine::Mechanism::Specialized,8,4>"
    before = _C._kernel_origin(kid)
    (got, origin), = cupipe.explain("stream_copy", x, mechanism="specialized", stages=8, vec_bytes=4).kernels
    assert got == kid and _C._kernel_origin(kid) == before
    assert origin == "compiled on first use, loaded" if before == "first-use" else origin.startswith("first use:")
    assert "kernels: " + kid in str(cupipe.explain("stream_copy", x, mechanism="specialized", stages=8, vec_bytes=4))
