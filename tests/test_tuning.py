"""Tuning: the on-disk cache (round trip, corrupt files, concurrent writers), shape classes, the
wrappers' cache lookup, cupipe.explain and cupipe.tune's CPU behaviour. All on the CPU: CUDA
tensors are simulated with FakeTensorMode where the lookup needs one."""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import re
import warnings

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import cupipe
from cupipe import tuning

HAS_TABLE = hasattr(cupipe._C, "resolve_config")
needs_table = pytest.mark.skipif(not HAS_TABLE, reason="cupipe._C.resolve_config missing: rebuild")

ENTRY = {"mechanism": "tma", "stages": 3, "vec_bytes": 8, "ms": 0.5, "table_ms": 0.6,
         "table_config": "sync/2/vec16", "measured": "2026-11-22T00:00:00"}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh, empty cache directory for the test; the in-memory copy is reset around it."""
    monkeypatch.setenv("CUPIPE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CUPIPE_TUNING_CACHE", raising=False)
    tuning.reload_cache()
    yield tmp_path
    tuning.reload_cache()


# ----------------------------------------------------------------------------- the file

def test_cache_location(cache, monkeypatch):
    assert tuning.cache_path() == os.path.join(str(cache), "tuning.json")
    monkeypatch.delenv("CUPIPE_CACHE_DIR")
    assert tuning.cache_path() == os.path.join(os.path.expanduser("~"), ".cache", "cupipe",
                                               "tuning.json")


def test_cache_round_trip(cache):
    assert tuning.read_cache() == {}                       # no file yet: empty, no warning
    key = tuning.cache_key("stencil2d", "nd2:14x14:r1x1", torch.float32, "NVIDIA H200")
    tuning.store_entries({key: ENTRY})
    assert tuning.read_cache() == {key: ENTRY}
    other = tuning.cache_key("reduce", "nd1:29:dimsall", torch.bfloat16, "NVIDIA H100")
    tuning.store_entries({other: dict(ENTRY, mechanism="sync", stages=2)})   # merges
    got = tuning.read_cache()
    assert set(got) == {key, other} and got[other]["mechanism"] == "sync"
    doc = json.loads((cache / "tuning.json").read_text())
    assert doc["format"] == tuning.FORMAT_VERSION
    assert [p.name for p in cache.iterdir() if p.name.endswith(".tmp")] == []   # no temp left


def test_store_rejects_bad_entries(cache):
    with pytest.raises(ValueError, match="invalid tuning entry"):
        tuning.store_entries({"k": {"mechanism": "warp-drive", "stages": 2}})
    with pytest.raises(ValueError):
        tuning.store_entries({"k": {"mechanism": "sync", "stages": 9}})
    assert not (cache / "tuning.json").exists()


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe\x00garbage", b"[1, 2, 3]",
                                     b'{"format": 999, "entries": {}}', b""])
def test_corrupt_cache_is_ignored_with_a_warning(cache, content):
    (cache / "tuning.json").write_bytes(content)
    with pytest.warns(RuntimeWarning, match="ignoring the tuning cache"):
        assert tuning.read_cache() == {}
    # the wrappers' lookup also treats it as empty (one warning, then the in-memory copy)
    with pytest.warns(RuntimeWarning):
        assert tuning._entries() == {}
    # the next store replaces the corrupt file with a valid one
    with pytest.warns(RuntimeWarning):
        tuning.store_entries({"stream_copy|nd1:29|float32|X": ENTRY})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(tuning.read_cache()) == ["stream_copy|nd1:29|float32|X"]


def test_invalid_entries_inside_a_valid_file_are_dropped(cache):
    doc = {"format": tuning.FORMAT_VERSION,
           "entries": {"good": ENTRY, "bad": {"mechanism": "sync", "stages": "two"}}}
    (cache / "tuning.json").write_text(json.dumps(doc))
    assert list(tuning.read_cache()) == ["good"]


def _writer(cache_dir: str, worker: int, n: int) -> None:
    os.environ["CUPIPE_CACHE_DIR"] = cache_dir
    for i in range(n):
        tuning.store_entries({f"stream_copy|w{worker}:{i}|float32|GPU": dict(ENTRY, stages=1 + i % 8)})


def _reader(cache_dir: str, n: int, q) -> None:
    """Reads while the writers write; reports any read that saw a broken file."""
    path = os.path.join(cache_dir, "tuning.json")
    bad = 0
    for _ in range(n):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            tuning.read_cache(path)
        bad += len(w)
    q.put(bad)


def test_concurrent_writers_merge_and_readers_never_see_a_partial_file(cache):
    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    workers, per = 4, 15
    q = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(str(cache), w, per)) for w in range(workers)]
    procs.append(ctx.Process(target=_reader, args=(str(cache), 200, q)))
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert q.get(timeout=10) == 0, "a reader saw a half-written or corrupt cache file"
    got = tuning.read_cache()
    want = {f"stream_copy|w{w}:{i}|float32|GPU" for w in range(workers) for i in range(per)}
    assert set(got) == want                          # no writer lost another's entries
    assert [p.name for p in cache.iterdir() if p.name.endswith(".tmp")] == []


# ----------------------------------------------------------------------------- keys

def test_shape_class():
    sc = tuning.shape_class
    assert sc("stencil2d", (8192, 8192), radius=(1, 1)) == "nd2:14x14:r1x1"
    # log2 buckets: 5000 and 8000 share one, 4096 and 4095 do not
    assert sc("stream_copy", (5000,)) == sc("stream_copy", (8000,))
    assert sc("stream_copy", (4096,)) != sc("stream_copy", (4095,))
    assert sc("stream_copy", (4, 4)) != sc("stream_copy", (16,))          # ndim matters
    assert sc("stencil2d", (64, 64), radius=(1, 1)) != sc("stencil2d", (64, 64), radius=(2, 2))
    assert sc("stencil1d", (8, 100), dim=-1, radius=4) == sc("stencil1d", (8, 100), dim=1, radius=4)
    assert sc("stencil1d", (8, 100), dim=0, radius=4) != sc("stencil1d", (8, 100), dim=1, radius=4)
    assert sc("reduce", (64, 64), dim=None) == sc("reduce", (64, 64), dim=[]) == "nd2:7x7:dimsall"
    assert sc("reduce", (64, 64), dim=[-1]) == sc("reduce", (64, 64), dim=[1]) != \
        sc("reduce", (64, 64), dim=[0])
    assert sc("reduce", (), dim=None) == "nd0:scalar:dimsall"
    # the memory order when it is not the logical one: another view for the planner, another entry
    x = torch.empty(8, 16, 64, 64)
    assert sc("stencil2d", x.shape, radius=(1, 1), strides=x.stride()) == sc("stencil2d", x.shape, radius=(1, 1))
    cl = x.contiguous(memory_format=torch.channels_last)
    assert sc("stencil2d", cl.shape, radius=(1, 1), strides=cl.stride()) == "nd4:4x5x7x7:m0231:r1x1"
    t = x.transpose(2, 3)
    assert sc("reduce", t.shape, dim=[3], strides=t.stride()) == "nd4:4x5x7x7:m0132:dims3"
    assert sc("reduce", (1, 5), dim=[1], strides=(1, 1)) == "nd2:1x3:dims1"  # size-1 dims do not count
    with pytest.raises(ValueError, match="unknown op"):
        sc("conv", (3,))


# ----------------------------------------------------------------------------- the wrappers' lookup

class _Recorder:
    """Stands in for torch.ops.cupipe inside cupipe.ops: records what the wrapper passes on."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        def op(*args, **kw):
            self.calls.append((name, kw))
            return args[0]
        return op


@pytest.fixture
def fake_gpu(cache, monkeypatch):
    monkeypatch.setattr(tuning, "device_name", lambda device: "Fake GPU")
    rec = _Recorder()
    monkeypatch.setattr(cupipe.ops, "_ops", rec)
    with FakeTensorMode():
        yield rec


def _key(op, shape, dtype=torch.float32, **geo):
    return tuning.cache_key(op, tuning.shape_class(op, shape, **geo), dtype, "Fake GPU")


def test_wrappers_use_a_cached_entry_for_auto(fake_gpu):
    tuning.store_entries({
        _key("stencil2d", (64, 128), radius=(1, 1)): dict(ENTRY, mechanism="cg", stages=5),
        _key("stream_copy", (1000,)): dict(ENTRY, mechanism="tma", stages=3, vec_bytes=8),
        _key("reduce", (32, 64), dim=[1]): dict(ENTRY, mechanism="barrier", stages=6),
        _key("stencil1d", (32, 64), dim=0, radius=2): dict(ENTRY, mechanism="specialized", stages=7),
    })
    x = torch.empty(64, 128, device="cuda")
    w = torch.empty(3, 3, device="cuda")
    cupipe.stencil2d(x, w)
    assert fake_gpu.calls[-1][1]["mechanism"] == "cg" and fake_gpu.calls[-1][1]["stages"] == 5
    cupipe.stencil2d(x, w, stages=2)                       # an explicit stage count is kept
    assert fake_gpu.calls[-1][1]["mechanism"] == "cg" and fake_gpu.calls[-1][1]["stages"] == 2
    cupipe.stencil2d(x, w, mechanism="sync")               # explicit mechanism: no cache
    assert fake_gpu.calls[-1][1] == {"boundary": "zero", "mechanism": "sync", "stages": 0, "steps": 1}
    cupipe.stencil2d(x, torch.empty(5, 5, device="cuda"))  # another radius: no entry
    assert fake_gpu.calls[-1][1]["mechanism"] == "auto"
    cupipe.stencil2d(x.half(), w)                          # another dtype: no entry
    assert fake_gpu.calls[-1][1]["mechanism"] == "auto"
    # steps > 1 runs the fused kernel: tuned apart from the single step
    cupipe.stencil2d(x, w, steps=4)
    assert fake_gpu.calls[-1][1]["mechanism"] == "auto" and fake_gpu.calls[-1][1]["steps"] == 4
    tuning.store_entries({tuning.cache_key("stencil2d", tuning.shape_class("stencil2d", (64, 128), radius=(1, 1))
                                           + ":steps", torch.float32, "Fake GPU"): dict(ENTRY, mechanism="tma",
                                                                                        stages=4)})
    cupipe.stencil2d(x, w, steps=8)
    assert fake_gpu.calls[-1][1]["mechanism"] == "tma" and fake_gpu.calls[-1][1]["stages"] == 4
    cupipe.stencil2d(x, w)
    assert fake_gpu.calls[-1][1]["mechanism"] == "cg"

    cupipe.stream_copy(torch.empty(1000, device="cuda"))
    assert fake_gpu.calls[-1][1] == {"mechanism": "tma", "stages": 3, "vec_bytes": 8}
    cupipe.stream_copy(torch.empty(1000, device="cuda"), vec_bytes=16)
    assert fake_gpu.calls[-1][1] == {"mechanism": "tma", "stages": 3, "vec_bytes": 16}

    cupipe.reduce(torch.empty(32, 64, device="cuda"), "sum", -1)
    assert fake_gpu.calls[-1][1]["mechanism"] == "barrier"
    cupipe.reduce(torch.empty(32, 64, device="cuda"), "sum", 0)
    assert fake_gpu.calls[-1][1]["mechanism"] == "auto"
    # the state ops keep entries of their own, per state kind (var and std share the kernel)
    cupipe.reduce(torch.empty(32, 64, device="cuda"), "var", -1)
    assert fake_gpu.calls[-1][1]["mechanism"] == "auto"
    tuning.store_entries({tuning.cache_key("reduce", tuning.shape_class("reduce", (32, 64), dim=[1]) + ":moments",
                                           torch.float32, "Fake GPU"): dict(ENTRY, mechanism="cg", stages=2)})
    cupipe.reduce(torch.empty(32, 64, device="cuda"), "std", -1, correction=0)
    assert fake_gpu.calls[-1][1]["mechanism"] == "cg" and fake_gpu.calls[-1][1]["correction"] == 0
    cupipe.reduce(torch.empty(32, 64, device="cuda"), "argmax", -1)
    assert fake_gpu.calls[-1][1]["mechanism"] == "auto"
    cupipe.reduce(torch.empty(32, 64, device="cuda"), "sum", -1)
    assert fake_gpu.calls[-1][1]["mechanism"] == "barrier"

    cupipe.stencil1d(torch.empty(32, 64, device="cuda"), torch.empty(5, device="cuda"), dim=0)
    assert fake_gpu.calls[-1][1]["mechanism"] == "specialized"
    # malformed arguments pass through untouched, for the op to reject with its own message
    cupipe.stencil1d(torch.empty(32, 64, device="cuda"), torch.empty(5, 5, device="cuda"))
    assert fake_gpu.calls[-1][1]["mechanism"] == "auto"
    cupipe.stencil1d(torch.empty(32, 64, device="cuda"), torch.empty(5, device="cuda"), dim=7)
    assert fake_gpu.calls[-1][1]["mechanism"] == "auto"


def test_cpu_tensors_and_disabled_cache_never_look_up(fake_gpu, monkeypatch):
    tuning.store_entries({_key("stream_copy", (1000,)): ENTRY})
    cupipe.stream_copy(torch.empty(1000))                  # CPU tensor
    assert fake_gpu.calls[-1][1]["mechanism"] == "auto"
    monkeypatch.setenv("CUPIPE_TUNING_CACHE", "0")
    tuning.reload_cache()
    cupipe.stream_copy(torch.empty(1000, device="cuda"))
    assert fake_gpu.calls[-1][1]["mechanism"] == "auto"


def test_lookup_reads_the_file_once_and_reload_picks_up_other_writers(fake_gpu):
    x = torch.empty(1000, device="cuda")
    cupipe.stream_copy(x)                                  # loads the (missing) file: empty
    assert fake_gpu.calls[-1][1]["mechanism"] == "auto"
    # another process writes an entry: this one keeps its in-memory copy until reload_cache()
    tuning.store_entries({_key("stream_copy", (1000,)): ENTRY}, path=tuning.cache_path())
    tuning._memory = {}                                    # as if store_entries ran elsewhere
    cupipe.stream_copy(x)
    assert fake_gpu.calls[-1][1]["mechanism"] == "auto"
    tuning.reload_cache()
    cupipe.stream_copy(x)
    assert fake_gpu.calls[-1][1]["mechanism"] == "tma"


def test_torch_ops_directly_ignore_the_cache(cache, monkeypatch):
    """torch.ops.cupipe.* is the C++ op: only the wrappers consult the cache (CPU run here)."""
    monkeypatch.setattr(tuning, "device_name", lambda device: "Fake GPU")
    x = torch.randn(100)
    torch.testing.assert_close(torch.ops.cupipe.stream_copy(x), x)


# ----------------------------------------------------------------------------- explain / tune

@needs_table
def test_explain_on_cpu():
    x = torch.randn(8, 16)
    e = cupipe.explain("stencil2d", x, torch.ones(3, 3), boundary="reflect")
    assert e.source == "cpu" and e.mechanism is None
    text = str(e)
    assert "cupipe.stencil2d on cpu" in text and "ignored" in text
    e = cupipe.explain("reduce", x, "sum", -1, mechanism="primitives", stages=3)
    assert e.requested == {"mechanism": "primitives", "stages": 3}
    with pytest.raises(ValueError, match="mechanism"):
        cupipe.explain("stream_copy", x, mechanism="warp-drive")
    with pytest.raises(ValueError, match="stages"):
        cupipe.explain("stream_copy", x, stages=9)
    with pytest.raises(TypeError, match="arguments do not match"):
        cupipe.explain("stencil2d", x)                     # weights missing
    with pytest.raises(ValueError, match="unknown op"):
        cupipe.explain("conv", x)


@needs_table
def test_explain_on_a_gpu_table_and_cache(fake_gpu, monkeypatch):
    monkeypatch.setattr(cupipe._C, "cuda_device_info", lambda index: {"sm": 90})
    x = torch.empty(1 << 20, device="cuda")
    e = cupipe.explain("stream_copy", x)
    assert e.source.startswith("shipped table")
    assert (e.mechanism, e.stages, e.vec_bytes) == cupipe._C.resolve_config("stream_copy", 90, "auto", 0, 0)
    assert "H200" in e.reason and "sync with one stage" in e.reason
    assert e.key == _key("stream_copy", (1 << 20,))
    e = cupipe.explain("stream_copy", x, mechanism="cg", stages=4)
    assert e.source == "explicit" and (e.mechanism, e.stages) == ("cg", 4)

    tuning.store_entries({_key("stream_copy", (1 << 20,)): ENTRY})
    e = cupipe.explain("stream_copy", x)
    assert e.source.startswith("tuning cache") and (e.mechanism, e.stages, e.vec_bytes) == ("tma", 3, 8)
    assert "cupipe.tune()" in e.reason and "torch.ops.cupipe" in str(e)

    img, w = torch.empty(64, 64, device="cuda"), torch.empty(3, 3, device="cuda")
    e = cupipe.explain("stencil2d", img, w)
    assert e.source.startswith("shipped table") and e.vec_bytes is None
    # the reason is the C++ table's own, for the table's own choice (explicit stages kept apart)
    why = cupipe._C.explain_config("stencil2d", 90, "auto", 0, 0, ry=1, rx=1, esz=4, rows16=True)[3]
    assert e.reason.startswith(why + "; no tuning cache entry")
    e = cupipe.explain("stencil2d", img, w, stages=3)
    assert (e.mechanism, e.stages) == ("tma", 3) and e.reason.startswith(why + "; stages=3 given explicitly")
    assert e.key == _key("stencil2d", (64, 64), radius=(1, 1))


@needs_table
def test_stencil_table_depends_on_the_radii_and_dtype(fake_gpu, monkeypatch):
    """On sm_90 (measured): along the last dim only (ry = 0) barrier/2, or tma/2 for 2-byte
    types; 2-D boxes of 2-byte types, fp32 3x3 and 5x5 boxes and fp32 boxes wider than 5 on rows
    of 16-byte multiples tma/2; a strided dim tma/2 for 2-byte rows16, else primitives/2 as other
    2-D boxes and older GPUs.
    explain derives (ry, rx, esz, rows16) like the kernels."""
    rc = cupipe._C.resolve_config
    assert rc("stencil1d", 90, "auto", 0, 0, ry=0, rx=4)[:2] == ("barrier", 2)
    assert rc("stencil1d", 90, "auto", 0, 0, ry=0, rx=4, esz=8)[:2] == ("barrier", 2)
    assert rc("stencil1d", 90, "auto", 0, 0, ry=0, rx=4, esz=2)[:2] == ("tma", 2)
    assert rc("stencil1d", 90, "auto", 0, 0, ry=4, rx=0)[:2] == ("primitives", 2)
    assert rc("stencil1d", 80, "auto", 0, 0, ry=0, rx=4)[:2] == ("primitives", 2)
    assert rc("stencil2d", 90, "auto", 0, 0, ry=1, rx=1)[:2] == ("primitives", 2)
    assert rc("stencil2d", 90, "auto", 0, 0, ry=1, rx=1, esz=2)[:2] == ("primitives", 2)  # rows16 unknown
    # Rows of whole 16-byte multiples from an aligned pointer: tma's tensor-map tiles for 2-byte
    # types, for the fp32 3x3 and 5x5 boxes (the narrow kernels) and for fp32 boxes wider than 5;
    # other fp32 shapes (3 x 5) stay on primitives.
    assert rc("stencil2d", 90, "auto", 0, 0, ry=1, rx=1, esz=2, rows16=True)[:2] == ("tma", 2)
    assert rc("stencil2d", 90, "auto", 0, 0, ry=4, rx=4, esz=4, rows16=True)[:2] == ("tma", 2)
    assert rc("stencil2d", 90, "auto", 0, 0, ry=1, rx=1, esz=4, rows16=True)[:2] == ("tma", 2)
    assert rc("stencil2d", 90, "auto", 0, 0, ry=2, rx=2, esz=4, rows16=True)[:2] == ("tma", 2)
    assert rc("stencil2d", 90, "auto", 0, 0, ry=1, rx=2, esz=4, rows16=True)[:2] == ("primitives", 2)
    assert rc("stencil2d", 90, "auto", 0, 0, ry=4, rx=4, esz=8, rows16=True)[:2] == ("primitives", 2)
    assert rc("stencil2d", 80, "auto", 0, 0, ry=1, rx=1, esz=2, rows16=True)[:2] == ("primitives", 2)
    assert rc("stencil2d", 80, "auto", 0, 0, ry=1, rx=1)[:2] == ("primitives", 2)
    assert rc("stencil2d", 90, "auto", 0, 0, ry=0, rx=2)[:2] == ("barrier", 2)
    assert rc("stencil1d", 90, "auto", 3, 0, ry=0, rx=4)[:2] == ("barrier", 3)
    assert rc("stencil1d", 90, "cg", 0, 0, ry=0, rx=4)[:2] == ("cg", 2)
    # taps a step apart: narrow points as tensor-map boxes, wide ones primitives/1, 1-D barrier/1
    assert rc("stencil2d", 90, "auto", 0, 0, ry=1, rx=1, esz=4, rows16=True, step=16)[:2] == ("tma", 2)
    assert rc("stencil2d", 90, "auto", 0, 0, ry=1, rx=1, esz=4, rows16=True, step=64)[:2] == ("primitives", 1)
    assert rc("stencil2d", 90, "auto", 0, 0, ry=1, rx=1, esz=2, rows16=False, step=3)[:2] == ("primitives", 1)
    # 2-byte points: up to 128 bytes (their tiles are 8 halos across and still one box)
    assert rc("stencil2d", 90, "auto", 0, 0, ry=1, rx=1, esz=2, rows16=True, step=64)[:2] == ("tma", 2)
    assert rc("stencil2d", 90, "auto", 0, 0, ry=1, rx=1, esz=2, rows16=True, step=128)[:2] == ("primitives", 1)
    assert rc("stencil1d", 90, "auto", 0, 0, ry=0, rx=2, esz=4, step=3)[:2] == ("barrier", 1)
    assert rc("stencil2d", 90, "auto", 0, 0, ry=2, rx=0, esz=4, rows16=True, step=1)[:2] == ("primitives", 2)
    assert rc("stencil2d", 90, "auto", 0, 0, ry=2, rx=0, esz=2, rows16=True, step=1)[:2] == ("tma", 2)
    assert rc("stencil1d", 90, "auto", 0, 0, ry=2, rx=0, esz=2, rows16=False)[:2] == ("primitives", 2)
    # steps > 1: the fused kernel's own table where it has a kernel (not channels_last's taps, not
    # an fp64 radius of 3), primitives/3 before sm_90
    assert rc("stencil2d", 90, "auto", 0, 0, ry=1, rx=1, steps=8)[:2] == ("tma", 3)
    assert rc("stencil1d", 90, "auto", 0, 0, ry=0, rx=1, steps=2)[:2] == ("tma", 3)
    assert rc("stencil2d", 80, "auto", 0, 0, ry=1, rx=1, steps=8)[:2] == ("primitives", 3)
    assert rc("stencil2d", 90, "auto", 0, 0, ry=1, rx=1, steps=8, step=3) == rc("stencil2d", 90, "auto", 0, 0, ry=1,
                                                                                rx=1, step=3)
    assert rc("stencil2d", 90, "auto", 0, 0, ry=3, rx=1, esz=8, steps=8) == rc("stencil2d", 90, "auto", 0, 0, ry=3,
                                                                               rx=1, esz=8)

    shape = cupipe._C.table_shape  # the op's own geometry, derived in C++
    x = torch.empty(4, 5, 6)
    w9 = torch.empty(9)
    # stencil1d: rows16 of the (batch, ny, nx) view the kernels read (24-byte rows along the last dim)
    assert shape("stencil1d", x, weights=w9, dim=-1) == {"ry": 0, "rx": 4, "esz": 4, "rows16": False, "step": 1}
    assert shape("stencil1d", x, weights=w9, dim=-1, steps=5)["steps"] == 5
    assert shape("stencil1d", x, weights=w9, dim=2) == {"ry": 0, "rx": 4, "esz": 4, "rows16": False, "step": 1}
    # along dim 1, planes of 6 fp32 across are too narrow: rows of 5 x 6 elements, taps 6 apart
    assert shape("stencil1d", x, weights=w9, dim=1) == {"ry": 0, "rx": 4, "esz": 4, "rows16": False, "step": 6}
    assert shape("stencil1d", torch.empty(4, 5, 128), weights=w9, dim=1) == {"ry": 4, "rx": 0, "esz": 4,
                                                                            "rows16": True, "step": 1}  # 512-byte rows
    assert shape("stencil2d", x.half(), weights=torch.empty(3, 5)) == {"ry": 1, "rx": 2, "esz": 2,
                                                                       "rows16": False, "step": 1}
    img = torch.empty(3, 10, 16)  # 64-byte rows
    assert shape("stencil2d", img, weights=torch.empty(3, 3))["rows16"]
    assert not shape("stencil2d", img.view(-1)[1:161].view(10, 16), weights=torch.empty(3, 3))["rows16"]
    # a transposed plane is read in place, as the (10, 16) planes of its memory: 64-byte rows
    assert shape("stencil2d", img.transpose(1, 2), weights=torch.empty(3, 5)) == {"ry": 2, "rx": 1, "esz": 4,
                                                                                 "rows16": True, "step": 1}
    assert shape("stencil2d", img[:, :, :10].transpose(1, 2), weights=torch.empty(3, 3))["rows16"] is False
    assert shape("stencil2d", img[:, :, :8].transpose(1, 2).transpose(1, 2), weights=torch.empty(3, 3))["rows16"]
    # a crop is read in place: its rows and their 64-byte pitch both whole 16-byte multiples
    assert shape("stencil2d", img[:, 1:-1, 4:12], weights=torch.empty(3, 3))["rows16"]
    assert not shape("stencil2d", img[:, 1:-1, 4:11], weights=torch.empty(3, 3))["rows16"]
    # 2-byte crops 8 bytes off a boundary: tensor maps from 8 bytes before x under the zero boundary
    # (its own storage), not under the others (their edge tiles, all of a small plane's, leave the maps)
    crop = torch.empty(3, 40, 40, dtype=torch.bfloat16)[:, 4:-4, 4:-4]
    assert shape("stencil2d", crop, weights=torch.empty(3, 3))["rows16"]
    assert not shape("stencil2d", crop, weights=torch.empty(3, 3), boundary="reflect")["rows16"]
    assert not shape("stencil2d", torch.empty(3, 40, 40, dtype=torch.bfloat16)[:, 4:-4, 2:-6],
                     weights=torch.empty(3, 3))["rows16"]  # 4 bytes off
    assert not shape("stencil2d", img[:, 1:-1, 2:10], weights=torch.empty(3, 3))["rows16"]  # fp32: measured aligned only
    # channels_last: C is a step within the rows (W * C elements), read in place
    cl = torch.empty(2, 16, 10, 12).contiguous(memory_format=torch.channels_last)
    assert shape("stencil2d", cl, weights=torch.empty(3, 3)) == {"ry": 1, "rx": 1, "esz": 4, "rows16": True,
                                                                 "step": 16}
    # checked as the op checks its arguments
    with pytest.raises(ValueError, match="odd length"):
        shape("stencil1d", x, weights=torch.empty(4), dim=-1)
    with pytest.raises(IndexError, match="out of range"):
        shape("stencil1d", x, weights=w9, dim=3)
    with pytest.raises(ValueError, match="reflect"):
        shape("stencil1d", torch.empty(4, 4, 6), weights=w9, dim=1, boundary="reflect")  # size 4, r 4
    with pytest.raises(ValueError, match="unknown op"):
        shape("conv", x)

    monkeypatch.setattr(cupipe._C, "cuda_device_info", lambda index: {"sm": 90})
    sig = torch.empty(1 << 20, device="cuda")
    e = cupipe.explain("stencil1d", sig, torch.empty(9, device="cuda"))
    assert (e.mechanism, e.stages) == ("barrier", 2) and "along the last dim" in e.reason
    assert "4- and 8-byte types" in e.reason and "H200" in e.reason
    e = cupipe.explain("stencil1d", sig.half(), torch.empty(9, device="cuda"))
    assert (e.mechanism, e.stages) == ("tma", 2) and "2-byte signals" in e.reason
    e = cupipe.explain("stencil2d", torch.empty(64, 64, device="cuda"), torch.empty(3, 3, device="cuda"))
    assert (e.mechanism, e.stages) == ("tma", 2) and "fp32 3x3" in e.reason
    e = cupipe.explain("stencil2d", torch.empty(64, 63, device="cuda"), torch.empty(3, 3, device="cuda"))
    assert (e.mechanism, e.stages) == ("primitives", 2) and "3x3" in e.reason  # 252-byte rows
    e = cupipe.explain("stencil1d", torch.empty(64, 256, device="cuda"), torch.empty(9, device="cuda"), dim=0)
    assert (e.mechanism, e.stages) == ("primitives", 2) and "strided" in e.reason
    # a narrow inner extent (64 fp32 = 256 bytes) is a step within rows along the filtered dim
    e = cupipe.explain("stencil1d", torch.empty(64, 64, device="cuda"), torch.empty(9, device="cuda"), dim=0)
    assert (e.mechanism, e.stages) == ("barrier", 1) and "step apart" in e.reason


@needs_table
def test_reduce_table_depends_on_the_reduced_view(fake_gpu, monkeypatch):
    """Reductions along the innermost dim resolve to tma/1 on sm_90 (primitives/2 before it), rows
    of 4-32 KiB to primitives/1, columns to primitives/1, on sm_90 columns under 4 KiB to tma/1
    and of 4 KiB or more (a multiple of 128 bytes) to tma/3, 16-byte aligned columns (rows16) to sync/3,
    the direct kernel (measured); explicit arguments win;
    explain derives the (outer, r, inner) view and the element size like the op does."""
    rc = cupipe._C.resolve_config
    assert rc("reduce", 90, "auto", 0, 0, outer=1, r=1 << 28, inner=1)[:2] == ("tma", 1)
    assert rc("reduce", 90, "auto", 0, 0, outer=8192, r=32768, inner=1)[:2] == ("tma", 1)
    assert rc("reduce", 90, "auto", 0, 0, outer=4194304, r=64, inner=1)[:2] == ("tma", 1)
    assert rc("reduce", 90, "auto", 0, 0, outer=1, r=32768, inner=8192)[:2] == ("tma", 3)
    assert rc("reduce", 80, "auto", 0, 0, outer=1, r=32768, inner=8192)[:2] == ("primitives", 1)
    # 16-byte aligned columns (rows16): sync/3 on sm_90, the direct kernel; rows and older GPUs as before
    assert rc("reduce", 90, "auto", 0, 0, outer=1, r=32768, inner=8192, rows16=True)[:2] == ("sync", 3)
    assert rc("reduce", 90, "auto", 0, 0, outer=1000, r=1000, inner=4, rows16=True)[:2] == ("sync", 3)
    assert rc("reduce", 80, "auto", 0, 0, outer=1, r=32768, inner=8192, rows16=True)[:2] == ("primitives", 1)
    assert rc("reduce", 90, "auto", 0, 0, outer=1, r=1 << 28, inner=1, rows16=True)[:2] == ("tma", 1)
    assert rc("reduce", 90, "tma", 0, 0, outer=1, r=32768, inner=8192, rows16=True)[:2] == ("tma", 3)
    assert rc("reduce", 90, "auto", 0, 0, outer=1, r=32768, inner=1000)[:2] == ("tma", 1)  # 4000 B rows: narrow
    assert rc("reduce", 90, "auto", 0, 0, outer=1000, r=1000, inner=3)[:2] == ("tma", 1)
    assert rc("reduce", 80, "auto", 0, 0, outer=1000, r=1000, inner=3)[:2] == ("primitives", 1)
    assert rc("reduce", 90, "auto", 0, 0, outer=1, r=32768, inner=1030, esz=4)[:2] == ("primitives", 1)  # % 128
    assert rc("reduce", 90, "auto", 0, 0, outer=4, r=512, inner=2048, esz=2)[:2] == ("tma", 3)
    assert rc("reduce", 80, "auto", 0, 0, outer=1, r=1 << 28, inner=1)[:2] == ("primitives", 2)
    assert rc("reduce", 90, "auto", 3, 0, outer=1, r=1 << 28, inner=1)[:2] == ("tma", 3)
    assert rc("reduce", 90, "primitives", 0, 0, outer=1, r=1 << 28, inner=1)[:2] == ("primitives", 1)
    assert rc("reduce", 80, "primitives", 0, 0, outer=1, r=1 << 28, inner=1)[:2] == ("primitives", 2)
    # Rows of 4-32 KiB: one stage (the element size counts, not the element count).
    assert rc("reduce", 90, "auto", 0, 0, outer=4096, r=4096, inner=1, esz=4)[:2] == ("primitives", 1)
    assert rc("reduce", 90, "auto", 0, 0, outer=4096, r=4096, inner=1, esz=8)[:2] == ("primitives", 1)
    assert rc("reduce", 90, "auto", 0, 0, outer=4096, r=4096, inner=1, esz=2)[:2] == ("primitives", 1)
    assert rc("reduce", 90, "auto", 0, 0, outer=4096, r=1024, inner=1, esz=4)[:2] == ("tma", 1)
    assert rc("reduce", 90, "auto", 0, 0, outer=4096, r=16384, inner=1, esz=4)[:2] == ("tma", 1)
    assert rc("reduce", 90, "auto", 0, 0, outer=1, r=4096, inner=64, esz=4)[:2] == ("tma", 1)
    assert rc("reduce", 90, "auto", 2, 0, outer=4096, r=4096, inner=1, esz=4)[:2] == ("primitives", 2)
    # the state ops: the direct state kernel along aligned rows of 64 bytes or more (sync/1), else tma/2;
    # on aligned columns (sync/1 for 2-byte types, sync/2 for wider ones), else tma/1; primitives/2
    # before sm_90
    cols = dict(outer=64, r=1000, inner=1024)
    assert rc("reduce", 90, "auto", 0, 0, outer=4096, r=4096, inner=1, esz=4, reduce_op="var")[:2] == ("tma", 2)
    rows = dict(outer=4096, r=8192, inner=1, rows16=True)  # aligned rows of 32 KiB: the direct row kernel
    assert rc("reduce", 90, "auto", 0, 0, **rows, esz=4, reduce_op="var")[:2] == ("sync", 1)
    assert rc("reduce", 90, "auto", 0, 0, **rows, esz=4, reduce_op="argmax")[:2] == ("sync", 1)
    assert rc("reduce", 90, "auto", 0, 0, **rows, esz=2, reduce_op="argmax")[:2] == ("sync", 1)  # 16 KiB
    assert rc("reduce", 90, "auto", 0, 0, **dict(rows, r=64), esz=4, reduce_op="var")[:2] == ("sync", 1)
    assert rc("reduce", 90, "auto", 0, 0, **dict(rows, r=16), esz=4, reduce_op="argmax")[:2] == ("sync", 1)  # 64 B
    assert rc("reduce", 90, "auto", 0, 0, **dict(rows, r=8), esz=4, reduce_op="argmax")[:2] == ("tma", 2)
    assert rc("reduce", 90, "auto", 0, 0, **dict(rows, r=16), esz=2, reduce_op="norm")[:2] == ("tma", 2)
    assert rc("reduce", 90, "auto", 0, 0, **dict(rows, r=32), esz=2, reduce_op="norm")[:2] == ("sync", 1)
    assert rc("reduce", 90, "auto", 0, 0, **dict(rows, rows16=False), esz=4, reduce_op="norm")[:2] == ("tma", 2)
    assert rc("reduce", 90, "auto", 0, 0, **dict(rows, outer=1, r=1 << 20), esz=2, reduce_op="logsumexp")[:2] == ("sync", 1)
    assert rc("reduce", 80, "auto", 0, 0, **rows, esz=4, reduce_op="var")[:2] == ("primitives", 2)
    assert rc("reduce", 90, "auto", 0, 0, **rows, esz=4, reduce_op="sum")[:2] == ("primitives", 1)  # 32 KiB rows
    assert rc("reduce", 90, "auto", 0, 0, **cols, esz=4, rows16=True, reduce_op="var")[:2] == ("sync", 2)
    assert rc("reduce", 90, "auto", 0, 0, **cols, esz=8, rows16=True, reduce_op="argmax")[:2] == ("sync", 2)
    assert rc("reduce", 90, "auto", 0, 0, **cols, esz=2, rows16=True, reduce_op="logsumexp")[:2] == ("sync", 1)
    assert rc("reduce", 90, "auto", 0, 0, **cols, esz=2, rows16=False, reduce_op="norm")[:2] == ("tma", 1)
    small = dict(outer=1000, r=100, inner=16, rows16=True, reduce_op="var")  # small 2-byte columns too
    assert rc("reduce", 90, "auto", 0, 0, **small, esz=2)[:2] == ("sync", 1)
    assert rc("reduce", 90, "auto", 0, 0, **small, esz=4)[:2] == ("sync", 2)
    assert rc("reduce", 90, "auto", 0, 0, **dict(small, rows16=False), esz=2)[:2] == ("tma", 1)
    assert rc("reduce", 80, "auto", 0, 0, **cols, esz=4, rows16=True, reduce_op="std")[:2] == ("primitives", 2)
    assert rc("reduce", 90, "auto", 0, 0, **cols, esz=4, rows16=True, reduce_op="sum")[:2] == ("sync", 3)
    # a folded step of a state op (two runs of reduced dims): only the direct state kernel folds it
    fold = dict(outer=1, r=32, inner=64 * 16, esz=2, rows16=True, reduce_op="var")
    assert rc("reduce", 90, "auto", 0, 0, **dict(fold, rows16=False))[:2] == ("tma", 1)  # unaligned: the ring
    assert rc("reduce", 90, "auto", 0, 0, **fold, fold=16)[:2] == ("sync", 1)
    assert rc("reduce", 80, "auto", 0, 0, **fold, fold=16)[:2] == ("sync", 1)
    with pytest.raises(ValueError, match="op"):
        rc("reduce", 90, "auto", 0, 0, reduce_op="median")

    shape = cupipe._C.table_shape  # the first step of the op's layout plan (csrc/ops/layout.cpp)
    x = torch.empty(4, 5, 6)

    def red(outer, r, inner, rows16=False):
        return {"outer": outer, "r": r, "inner": inner, "fold": 1, "esz": 4, "rows16": rows16, "reduce_op": "sum"}

    # rows16: rows (inner 1) of whole 16-byte vectors or a single row; columns of whole vectors
    assert shape("reduce", x, dim=None) == red(1, 120, 1, True)
    assert shape("reduce", x, dim=[]) == red(1, 120, 1, True)
    assert shape("reduce", x, dim=1) == red(4, 5, 6)
    assert shape("reduce", x, dim=[-1, -2]) == red(4, 30, 1)
    assert shape("reduce", x, dim=(0, 2)) == red(20, 6, 1)  # dim 2, then 0
    assert shape("reduce", x.permute(2, 0, 1), dim=0) == red(20, 6, 1)
    assert shape("reduce", x.transpose(0, 2), dim=(1, 2)) == red(1, 20, 6)
    assert shape("reduce", torch.empty(4, 0, 6), dim=[0, 2]) == red(0, 24, 1, True)
    assert shape("reduce", torch.empty(()), dim=None) == red(1, 1, 1, True)
    assert shape("reduce", torch.empty(3, 8), dim=1)["rows16"]
    assert not shape("reduce", torch.empty(25)[1:].view(3, 8), dim=1)["rows16"]  # x 4 bytes past a boundary
    assert shape("reduce", x.half(), dim=1, dtype=torch.float64)["esz"] == 8
    assert shape("reduce", x.half(), dim=1, dtype=None)["esz"] == 2
    assert shape("reduce", x.double(), dim=1)["esz"] == 8
    assert shape("reduce", x, dim=1, reduce_op="argmax")["reduce_op"] == "argmax"  # the state ops' own choices
    assert shape("stream_copy", x) == {}
    with pytest.raises(IndexError, match="out of range"):
        shape("reduce", x, dim=3)
    with pytest.raises(ValueError, match="dtype= is only accepted"):
        shape("reduce", x, dim=1, reduce_op="amax", dtype=torch.float64)

    monkeypatch.setattr(cupipe._C, "cuda_device_info", lambda index: {"sm": 90})
    e = cupipe.explain("reduce", torch.empty(1 << 20, device="cuda"), "sum")
    assert (e.mechanism, e.stages) == ("tma", 1) and "innermost dim on sm_90" in e.reason
    assert "one 32 KiB stage" in e.reason
    e = cupipe.explain("reduce", torch.empty(64, 511, device="cuda"), "sum", 0)  # rows of 2044 bytes
    assert (e.mechanism, e.stages) == ("tma", 1) and "columns" in e.reason and "under 4 KiB" in e.reason
    e = cupipe.explain("reduce", torch.empty(64, 1030, device="cuda"), "sum", 0)  # 4120-byte rows
    assert (e.mechanism, e.stages) == ("primitives", 1) and "columns" in e.reason
    e = cupipe.explain("reduce", torch.empty(64, 1024, device="cuda"), "sum", 0)  # rows of 4 KiB, aligned
    assert (e.mechanism, e.stages) == ("sync", 3) and "16-byte boundaries" in e.reason
    assert shape("reduce", torch.empty(64, 1024), dim=0)["rows16"]
    off = torch.empty(64 * 1024 + 1, device="cuda")[1:].view(64, 1024)  # 4 bytes past the allocation
    assert not shape("reduce", off, dim=0)["rows16"]
    e = cupipe.explain("reduce", off, "sum", 0)  # rows of 4 KiB, x not 16-byte aligned
    assert (e.mechanism, e.stages) == ("tma", 3) and "columns" in e.reason
    assert "multiple of 128 bytes" in e.reason and "three 32 KiB stages" in e.reason
    e = cupipe.explain("reduce", torch.empty(64, 4096, device="cuda"), "sum", -1)
    assert (e.mechanism, e.stages) == ("primitives", 1) and "4-32 KiB" in e.reason


def test_names_are_defined_once_in_cpp():
    """The names the ops accept come from cupipe._C (csrc/ops/args.cpp and the engine's mechanism
    table); the public tuples are those, and every op accepts exactly them."""
    assert cupipe.MECHANISMS == ("auto", "sync", "pipeline", "pipeline_thread", "primitives", "cg",
                                 "barrier", "specialized", "tma") == tuple(cupipe._C.MECHANISMS)
    assert cupipe.BOUNDARIES == ("zero", "replicate", "circular", "reflect") == tuple(cupipe._C.BOUNDARIES)
    assert cupipe.REDUCE_OPS == ("sum", "mean", "amax", "amin", "var", "std", "argmax", "argmin", "logsumexp",
                                 "norm") == tuple(cupipe._C.REDUCE_OPS)
    assert tuning.OPS == ("stream_copy", "stencil1d", "stencil2d", "stencil3d", "reduce") == tuple(cupipe._C.TUNED_OPS)
    assert tuning.ALL_MECHANISMS == cupipe.MECHANISMS[1:]
    x, w = torch.randn(4, 8), torch.ones(3)
    for m in cupipe.MECHANISMS:   # validated on the CPU, then ignored
        torch.testing.assert_close(cupipe.stream_copy(x, mechanism=m), x)
    for b in cupipe.BOUNDARIES:
        cupipe.stencil1d(x, w, boundary=b)
    for op in cupipe.REDUCE_OPS:
        cupipe.reduce(x, op, -1)
    with pytest.raises(ValueError, match="expected one of " + ", ".join(cupipe.MECHANISMS) + "$"):
        cupipe.stream_copy(x, mechanism="warp-drive")
    with pytest.raises(ValueError, match="expected one of " + ", ".join(cupipe.BOUNDARIES) + "$"):
        cupipe.stencil1d(x, w, boundary="mirror")
    with pytest.raises(ValueError, match="expected one of " + ", ".join(cupipe.REDUCE_OPS) + "$"):
        cupipe.reduce(x, "prod")
    with pytest.raises(ValueError, match="expected one of " + ", ".join(tuning.OPS) + "$"):
        cupipe._C.resolve_config("conv", 90, "auto", 0, 0)


def test_explain_binds_like_the_wrappers():
    """explain and tune bind their arguments against the op schemas (cupipe.tuning never imports
    cupipe.ops): the wrappers must have exactly those signatures."""
    import inspect
    for op in tuning.OPS:
        want = inspect.signature(getattr(cupipe.ops, op))
        got = tuning._signature(op)
        assert [(p.name, p.kind, p.default) for p in got.parameters.values()] == \
            [(p.name, p.kind, p.default) for p in want.parameters.values()], op


def test_tune_on_cpu_raises_a_clear_error(cache):
    with pytest.raises(RuntimeError, match="needs a CUDA tensor"):
        cupipe.tune("stencil2d", torch.randn(8, 8), torch.ones(3, 3))
    assert not (cache / "tuning.json").exists()


@needs_table
def test_tune_search_logic_on_cpu(cache, monkeypatch):
    """The search behind cupipe.tune, driven on the CPU with a scripted timer: it picks the
    fastest correct candidate, never a wrong one, and caches it under the call's key."""
    real = tuning._direct_call

    def direct_call(op, a):
        f = real(op, a)
        # ("cg", 2) returns a wrong result: it must be skipped even though it is "fastest"
        return lambda m, s, v: f(m, s, v) + (1.0 if (m, s) == ("cg", 2) else 0.0)

    monkeypatch.setattr(tuning, "_direct_call", direct_call)
    # table, then sync/1 sync/2 cg/1 tma/1 tma/2 (cg/2 is wrong: checked, never timed)
    times = iter([5.0, 3.0, 4.0, 1.5, 6.0, 7.0])
    timer = lambda fn: (fn(), next(times))[1]
    x, w = torch.randn(16, 16), torch.randn(3, 3)
    r = tuning._tune("stencil2d", x, (w,), {"boundary": "reflect"}, sm=90, dev_name="Fake GPU",
                     timer=timer, mechanisms=["sync", "cg", "tma"], stage_counts=(1, 2),
                     vec_widths=(16,), save=True, verbose=False)
    assert (r["mechanism"], r["stages"], r["ms"], r["table_ms"]) == ("cg", 1, 1.5, 5.0)
    assert r["table_config"] == "tma/2"  # the sm_90 table for a 2-D fp32 3x3 box on 64-byte rows
    bad = [c for c in r["results"] if c["ms"] is None]
    assert [(c["mechanism"], c["stages"]) for c in bad] == [("cg", 2)]
    key = _key("stencil2d", (16, 16), radius=(1, 1))
    assert r["key"] == key and tuning.read_cache()[key]["mechanism"] == "cg"
    assert tuning._entries()[key]["stages"] == 1            # this process sees it at once
    with pytest.raises(TypeError, match="do not pass mechanism"):
        tuning._tune("stencil2d", x, (w,), {"mechanism": "sync"}, sm=90, dev_name="X",
                     timer=timer, mechanisms=None, stage_counts=(1,), vec_widths=(16,),
                     save=False, verbose=False)


@pytest.mark.cuda
@pytest.mark.skipif(not cupipe.cuda_available(), reason="needs a CUDA device")
def test_device_info_matches_torch():
    """The facts the launchers tune by (csrc/kernels/device_info.cu, one query per device) agree
    with torch's view of the device; dram_peak_gbps picks the stencils' L2 promotion."""
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        info = cupipe._C.cuda_device_info(index)
        assert info["sm"] == 10 * props.major + props.minor
        assert info["num_sms"] == props.multi_processor_count
        assert info["max_smem_optin"] == props.shared_memory_per_block_optin
        peak = 2 * props.memory_clock_rate * 1e3 * props.memory_bus_width / 8 / 1e9  # kHz, bits
        assert info["dram_peak_gbps"] == pytest.approx(peak, rel=1e-9) and info["dram_peak_gbps"] > 0
        code_sm, built = _expected_code_sm(cupipe.build_info["arch_list"], props.major, props.minor, with_built=True)
        assert info["code_sm"] == code_sm and info["ahead_of_time_code"] == built


def _expected_code_sm(arch_list: str, major: int, minor: int, with_built: bool = False):
    """The architecture a build for TORCH_CUDA_ARCH_LIST `arch_list` runs as on an
    sm_<major><minor> device, by CUDA's rules: code for the newest architecture of the device's
    major version not above it, else the newest PTX not above the device (JIT-compiled); where the
    build has neither, every kernel compiles for the device itself on first use."""
    sass, ptx = [], []
    for entry in re.split(r"[;\s]+", arch_list.strip()):
        m = re.fullmatch(r"(\d+)\.(\d+)[af]?(\+PTX)?", entry)
        sass.append((int(m.group(1)), int(m.group(2))))
        if m.group(3):
            ptx.append((int(m.group(1)), int(m.group(2))))
    same = [v for v in sass if v[0] == major and v <= (major, minor)]
    older = [v for v in ptx if v <= (major, minor)]
    best = max(same) if same else max(older, default=(major, minor))
    code_sm = 10 * best[0] + best[1]
    return (code_sm, bool(same or older)) if with_built else code_sm


def test_expected_code_sm():
    """The rule the device test above holds the module to."""
    assert _expected_code_sm("8.0;9.0+PTX", 9, 0) == 90
    assert _expected_code_sm("8.0;9.0+PTX", 8, 9) == 80      # sm_80 code runs on an L4
    assert _expected_code_sm("8.0;9.0+PTX", 10, 0) == 90     # a Blackwell JIT-compiles sm_90 PTX
    assert _expected_code_sm("8.0+PTX", 9, 0) == 80          # no sm_90 code: 'tma' unavailable
    assert _expected_code_sm("9.0a", 9, 0) == 90
    assert _expected_code_sm("9.0", 8, 0) == 80              # nothing built runs: first use compiles sm_80


def test_tma_available():
    """cupipe.tma_available: never for a CPU device or without CUDA; on a GPU it agrees with the
    device's compute capability and the architecture this build's kernels run as there."""
    assert cupipe.tma_available("cpu") is False
    if not cupipe.cuda_available():
        assert cupipe.tma_available() is False
        return
    for index in range(torch.cuda.device_count()):
        info = cupipe._C.cuda_device_info(index)
        want = torch.cuda.get_device_capability(index) >= (9, 0) and info["code_sm"] >= 90
        assert cupipe.tma_available(index) is want
        assert cupipe.tma_available(f"cuda:{index}") is want
        assert cupipe.tma_available(torch.device("cuda", index)) is want
