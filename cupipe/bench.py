"""cupipe benchmark CLI: ``python -m cupipe.bench`` (or ``cupipe-bench``).

Every figure is a median of many CUDA-event-timed repetitions on fresh random data, and every
ratio is against PyTorch measured in the same run: the device's copy bandwidth (``y.copy_(x)``,
bytes read + written), eager ops, and ``torch.compile`` of the same computation. Each result is
checked against a reference before it is timed; a wrong one is reported, not timed. Ctrl-C stops
the run and still writes what was measured (exit status 130).

    python -m cupipe.bench --suite engine      # mechanism x stages for stream_copy + latency study
    python -m cupipe.bench --suite ops         # the performance suite (docs/design.md), per op
    python -m cupipe.bench --ops reduce,stencil2d --dtype bfloat16
    python -m cupipe.bench --sweep --suite none  # only the mechanism x stages x vec_bytes grid
    python -m cupipe.bench --quick --out DIR   # fewer reps / configs; JSON, CSV and PNG plots in DIR
    python -m cupipe.bench --cpu --quick       # tiny sizes on the CPU kernels (a smoke test)
    python -m cupipe.bench --suite layout --out DIR  # the layout sweep, plotted to DIR/layout_sweep.png
    python -m cupipe.bench --suite layout --only 'argmax|channels_last'  # the sweep's rows that match
    python -m cupipe.bench --suite steps --out DIR   # steps=k: updates/s against k, DIR/steps.png
    python -m cupipe.bench --out DIR --markdown DIR/bench.md --markdown-brief
                                               # a BENCHMARKS.md section: the tables as markdown
    python -m cupipe.bench --merge A B --out DIR --markdown DIR/bench.md --markdown-brief
                                               # runs A and B (their results.json) as one: the layout
                                               # sweep's fp32 and bf16 halves, summarised and plotted
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import itertools
import json
import math
import os
import re
import shlex
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F

import cupipe
from cupipe.timing import time_ms, time_ms_cpu  # noqa: F401  (re-exported for users of the CLI module)

MECHS = ["sync", "pipeline", "pipeline_thread", "primitives", "cg", "barrier", "specialized", "tma"]
OPS = ["stream_copy", "stencil1d", "stencil2d", "stencil3d", "reduce"]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
SHORT = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}
HIDDEN = {"table", "op", "bytes", "error", "cls"}   # recorded, not printed as columns
ORDER = ["workload", "mechanism", "stages", "vec", "resolved", "k", "ms", "GBps", "Gupd_s", "x_R1", "loop_ms", "vs_loop",
         "vs_copy", "vs_copy_same", "vs_auto",
         "eager", "eager_ms", "vs_eager", "compiled_ms", "vs_compiled", "speedup_vs_best"]


# ----------------------------------------------------------------------------- timing

def gbps(nbytes: float, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9


# ----------------------------------------------------------------------------- progress

class Progress:
    """tqdm on stderr when it is importable, else a plain ``[k/N] what`` counter on stderr (one
    rewritten line on a terminal; about ten lines in a log)."""

    def __init__(self, total: int, enabled: bool = True):
        self.total, self.k, self.enabled = total, 0, enabled and total > 0
        self.bar = None
        self.tty = sys.stderr.isatty()
        if self.enabled:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, file=sys.stderr, unit="step", dynamic_ncols=True,
                                leave=False)
            except ImportError:
                pass

    def step(self, what: str):
        """Called before each step runs."""
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.set_description_str(what[:60], refresh=False)
            return
        msg = f"[{self.k + 1}/{self.total}] {what}"
        if self.tty:
            sys.stderr.write("\r" + msg[:100].ljust(100))
            sys.stderr.flush()
        elif self.k % max(1, self.total // 10) == 0:
            print(msg, file=sys.stderr, flush=True)

    def done_one(self):
        self.k += 1
        if self.bar is not None:
            self.bar.update(1)

    def write(self, msg: str):
        if self.bar is not None:
            self.bar.write(msg)
        elif self.enabled and self.tty:
            sys.stderr.write("\r" + " " * 100 + "\r")
            print(msg, flush=True)
        else:
            print(msg, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()
        elif self.enabled and self.tty:
            sys.stderr.write("\r" + " " * 100 + "\r")
            sys.stderr.flush()
        elif self.enabled:
            print(f"[{self.k}/{self.total}] done", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- results

class Results:
    def __init__(self):
        self.rows: List[Dict] = []
        self.notes: List[str] = []
        self.failures: List[str] = []
        self.detail: List[str] = []   # secondary tables, left out of --markdown-brief
        self.say: Callable[[str], None] = print

    def add(self, **kw):
        self.rows.append(kw)
        if os.environ.get("CUPIPE_BENCH_STREAM"):  # one line per measurement, as it comes
            self.say("  " + "  ".join(f"{k}={_fmt(v)}" for k, v in kw.items()))

    def note(self, msg: str):
        if msg not in self.notes:
            self.notes.append(msg)
            self.say(f"  ({msg})")

    def tables(self) -> List[str]:
        seen: List[str] = []
        for r in self.rows:
            if r.get("table") not in seen:
                seen.append(r.get("table"))
        return seen

    def cells(self, title: str, keys: Optional[List[str]] = None):
        """(columns, formatted cells per row, error per row) of one table: the single source of
        the printed and the markdown tables, so the two cannot drift apart."""
        rows = [r for r in self.rows if r.get("table") == title]
        if keys is None:  # every recorded key, in first-seen order
            keys = []
            for r in rows:
                keys += [k for k in r if k not in HIDDEN and k not in keys]
            keys.sort(key=lambda k: ORDER.index(k) if k in ORDER else len(ORDER))
        cells = [[_fmt(r.get(k)) for k in keys] for r in rows]
        return keys, cells, [r.get("error") or "" for r in rows]

    def table_lines(self, title: str, keys: Optional[List[str]] = None) -> List[str]:
        """The table as printed: space-padded columns, a mismatch's error after its row."""
        keys, cells, errors = self.cells(title, keys)
        if not cells:
            return []
        widths = [max(len(k), *(len(c[j]) for c in cells)) for j, k in enumerate(keys)]
        out = ["  ".join(k.ljust(w) for k, w in zip(keys, widths))]
        for c, err in zip(cells, errors):
            out.append(("  ".join(v.ljust(w) for v, w in zip(c, widths)) +
                        (f"  ERROR: {err}" if err else "")).rstrip())
        return out

    def markdown_lines(self, title: str, keys: Optional[List[str]] = None) -> List[str]:
        """The same table in markdown: the same columns and cells, plus an ``error`` column when
        a row has one; numeric columns right-aligned."""
        keys, cells, errors = self.cells(title, keys)
        if not cells:
            return []
        if any(errors):
            keys = keys + ["error"]
            cells = [c + [e] for c, e in zip(cells, errors)]

        def numeric(j):
            vals = [c[j] for c in cells if c[j]]
            return bool(vals) and all(_is_number(v) for v in vals)

        esc = lambda v: v.replace("|", "\\|")
        out = ["| " + " | ".join(esc(k) for k in keys) + " |",
               "|" + "|".join("---:" if numeric(j) else "---" for j in range(len(keys))) + "|"]
        out += ["| " + " | ".join(esc(v) for v in c) + " |" for c in cells]
        return out

    def print_table(self, title: str, keys: Optional[List[str]] = None):
        lines = self.table_lines(title, keys)
        if lines:
            print(f"\n== {title}")
            print("\n".join(lines))


def _fmt(v):
    if isinstance(v, float):
        return "nan" if math.isnan(v) else (f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}")
    return "" if v is None else str(v)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# ----------------------------------------------------------------------------- the run context

class Bench:
    """What every measurement needs: device, timer, repetitions, sizes, the copy bandwidth."""

    def __init__(self, cpu: bool, quick: bool, reps: int, dtype: Optional[torch.dtype],
                 use_compile: bool, res: Results, cold_l2: bool = False):
        self.cpu, self.quick, self.reps, self.res = cpu, quick, reps, res
        self.cold_l2 = cold_l2 and not cpu      # every timed GPU call starts with its inputs out of L2
        self.device = "cpu" if cpu else "cuda"
        self.dtype = dtype                      # None: the performance suite's own dtypes
        self.use_compile = use_compile and not cpu
        self.copy_bw = float("nan")
        # The architecture the kernels run as (mechanisms and the table follow it, not the device).
        self.sm = 0 if cpu else cupipe.tuning.code_sm(cupipe._C.cuda_device_info(torch.cuda.current_device()))
        self._key, self._val = None, None
        # Sizes: the performance suite's (docs/design.md) on a GPU; tiny ones on the CPU (a
        # smoke test, not a measurement).
        if cpu:
            self.log_n, self.hw, self.dhw = 16, 128, 24
            self.rows = [(32, 2048), (4096, 16), (256, 256)]
            self.cols = (2048, 32)
        else:
            self.log_n, self.hw, self.dhw = 28, 8192, 512
            self.rows = [(8192, 32768), (4194304, 64), (4096, 4096)]
            self.cols = (32768, 8192)
        self.tag = " [CPU]" if cpu else ""

    @property
    def n1(self) -> int:
        return 1 << self.log_n

    @property
    def dt(self) -> torch.dtype:
        return self.dtype or torch.float32

    def time(self, fn) -> float:
        return time_ms_cpu(fn, self.reps) if self.cpu else time_ms(fn, self.reps, cold_l2=self.cold_l2)

    def try_time(self, fn) -> float:
        if fn is None:
            return float("nan")
        try:
            return self.time(fn)
        except Exception as e:  # compile failures surface at first call
            self.res.note(f"skipped: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
            return float("nan")

    def compile(self, fn):
        if not self.use_compile:
            return None
        try:
            # Each case compiles from scratch for its own shapes: the cases share code objects
            # (lambdas built in a loop), and without the reset dynamo's automatic dynamic shapes
            # would compile every case after the first as a shape-generic kernel.
            torch._dynamo.reset()
            return torch.compile(fn, fullgraph=True, dynamic=False)
        except Exception as e:  # pragma: no cover
            self.res.note(f"torch.compile unavailable: {e}")
            return None

    def inputs(self, key, make):
        """The input tensors of the case being measured; switching cases frees the previous ones
        first (the GPU holds one case's inputs at a time)."""
        if key != self._key:
            self._key, self._val = None, None
            self._val = make()
            self._key = key
        return self._val

    def randn(self, *shape, dtype=None):
        return torch.randn(*shape, device=self.device, dtype=dtype or self.dt)

    def mechanisms(self) -> List[str]:
        if self.cpu:
            return ["sync", "primitives"] if self.quick else ["sync", "pipeline", "primitives", "tma"]
        return [m for m in MECHS if m != "tma" or self.sm >= 90]

    def stage_list(self, full=(1, 2, 3, 4, 6, 8)) -> List[int]:
        if self.cpu:
            return [1, 2] if self.quick else [1, 2, 4]
        return [1, 2, 4, 8] if self.quick else list(full)


class Task:
    """One measurement; a `final` one (a summary of the rows before it) runs even after Ctrl-C."""
    def __init__(self, what: str, run: Callable[[], None], final: bool = False):
        self.what, self.run, self.final = what, run, final


def _precompile_task(b: "Bench", ops: List[str]) -> Task:
    """The grid's kernels that are not built into the module, compiled in parallel up front (the
    disk cache keeps them for later runs) rather than one by one at each point's first call."""
    def run():
        try:
            got = cupipe.precompile(ops, dtype=b.dt, mechanism=b.mechanisms(), stages=b.stage_list(),
                                    radius=(1, 1, 1))  # the sweep's 3-D star
            b.res.note(f"{', '.join(ops)} kernels: {got['ahead_of_time']} built in, {got['cached']} cached, "
                       f"{got['compiled']} compiled now")
        except Exception as e:  # no nvcc: each point then reports its own error
            b.res.note(f"{', '.join(ops)} kernels not precompiled: {str(e).splitlines()[0][:200]}")
    return Task(f"precompile {', '.join(ops)} kernels", run)


def _tol(dtype: torch.dtype):
    """(rtol, atol) for a result rounded to `dtype` against an fp32 reference."""
    return {torch.float16: (4e-3, 1e-3), torch.bfloat16: (1.6e-2, 1e-3)}.get(dtype, (1e-3, 1e-3))


def _check(got: torch.Tensor, ref: Callable[[], torch.Tensor], what: str, *, atol=None,
           rtol=None) -> Optional[str]:
    """None when `got` matches the reference, else the mismatch message. The benchmark refuses
    to time a wrong answer. References are computed in fp32 without TF32 (cuDNN convolutions
    default to it on Ampere and newer, which is less accurate than fp32). The flag is set inside
    torch.backends' own mutation guard: torch's test utilities, once imported, refuse a plain
    assignment."""
    guard = getattr(torch.backends, "__allow_nonbracketed_mutation", contextlib.nullcontext)
    with guard():
        prev = torch.backends.cudnn.allow_tf32
        torch.backends.cudnn.allow_tf32 = False
    try:
        r0, a0 = _tol(got.dtype)
        torch.testing.assert_close(got.float(), ref().float(), rtol=rtol or r0,
                                   atol=max(atol or 0.0, a0), msg=lambda m: f"{what}: {m}")
        return None
    except AssertionError as e:
        return str(e).splitlines()[0] + " " + " ".join(str(e).splitlines()[1:4])
    finally:
        with guard():
            torch.backends.cudnn.allow_tf32 = prev


def _fail(b: Bench, table: str, msg: str, **row):
    b.res.failures.append(msg)
    b.res.say(f"  MISMATCH (not timed): {msg}")
    b.res.add(table=table, **row, ms=float("nan"), error=msg[:300])


def copy_bandwidth(b: Bench) -> float:
    x = torch.randn(b.n1, device=b.device)
    y = torch.empty_like(x)
    ms = b.time(lambda: y.copy_(x))
    return gbps(2 * x.numel() * 4, ms)


# ----------------------------------------------------------------------------- engine suite

def tasks_engine(b: Bench) -> List[Task]:
    """stream_copy: mechanism x stages at 16-byte copies, copy width, and (GPU) the latency
    study with one block per SM."""
    dt = b.dt
    n = b.n1
    es = torch.tensor([], dtype=dt).element_size()
    nbytes = 2 * n * es
    tbl = f"stream_copy 2^{b.log_n} {SHORT[dt]} (vec 16){b.tag}"
    tbl_w = f"stream_copy copy width{b.tag}"
    b.res.detail.append(tbl_w)
    get = lambda: b.inputs(("engine", n, dt), lambda: b.randn(n))
    tasks = []

    def grid(m, s, v, table, extra):
        def run():
            x = get()
            try:
                ok = torch.equal(cupipe.stream_copy(x, mechanism=m, stages=s, vec_bytes=v), x)
            except Exception as e:
                b.res.note(f"skipped {m}/{s}/vec{v}: {type(e).__name__}: {str(e).splitlines()[0][:100]}")
                b.res.add(table=table, op="stream_copy", mechanism=m, stages=s, **extra,
                          ms=float("nan"), GBps=float("nan"), vs_copy=float("nan"))
                return
            if not ok:
                return _fail(b, table, f"stream_copy {m}/{s}/vec{v} differs from x", op="stream_copy",
                             mechanism=m, stages=s, **extra)
            ms = b.try_time(lambda: cupipe.stream_copy(x, mechanism=m, stages=s, vec_bytes=v))
            bw = gbps(nbytes, ms)
            row = dict(extra)
            if m == "auto":  # what the shipped table picked, so the row reads as a configuration
                try:
                    e = cupipe.explain("stream_copy", x)
                    row["resolved"] = ("cpu: knobs ignored" if e.mechanism is None else
                                       f"{e.mechanism}/{e.stages}/vec{e.vec_bytes}")
                except Exception:  # pragma: no cover (an older build without _C.resolve_config)
                    pass
            b.res.add(table=table, op="stream_copy", mechanism=m, stages=s, **row, ms=ms, GBps=bw,
                      vs_copy=bw / b.copy_bw, bytes=nbytes)
        return Task(f"stream_copy {m}/{s}/vec{v}", run)

    if not b.cpu:
        tasks.append(_precompile_task(b, ["stream_copy"]))
    tasks.append(grid("auto", 0, 0, tbl, {}))   # the configuration stream_copy runs by default
    for m in b.mechanisms():
        for s in b.stage_list():
            tasks.append(grid(m, s, 16, tbl, {}))
    for m in (["primitives", "pipeline", "cg"] if not b.cpu else ["primitives"]):
        for v in [4, 8]:
            tasks.append(grid(m, 4, v, tbl_w, {"vec": v}))
    if not b.cpu:
        # The default configuration against copy_ in alternating rounds (each a median of reps):
        # the table above divides by one copy_ timing taken at the start, so any drift over the
        # run moves its ratios; here each round's ratio is of two timings taken back to back.
        rounds = 11
        tbl_i = f"stream_copy (auto) against y.copy_(x) in {rounds} alternating rounds"

        def interleaved():
            x = get()
            y = torch.empty_like(x)
            pairs = [(b.time(lambda: y.copy_(x)), b.time(lambda: cupipe.stream_copy(x))) for _ in range(rounds)]
            ratios = sorted(c / t for c, t in pairs)
            b.res.add(table=tbl_i, op="stream_copy", mechanism="auto",
                      copy_ms=statistics.median(c for c, _ in pairs), ms=statistics.median(t for _, t in pairs),
                      vs_copy=statistics.median(ratios), vs_copy_min=ratios[0], vs_copy_max=ratios[-1])
        tasks.append(Task("stream_copy auto vs copy_, alternating", interleaved))
        # Latency-bound: one block per SM, so only the ring's depth keeps bytes in flight.
        tbl_l = f"latency-bound: 1 block/SM, 8 KiB tiles, 2^24 {SHORT[dt]}"
        b.res.detail.append(tbl_l)
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        mechs = ["sync", "primitives", "pipeline"] + (["tma"] if b.sm >= 90 else [])
        for m in mechs:
            for s in [1, 2, 3, 4, 6, 8]:
                def run(m=m, s=s):
                    xs = b.inputs(("latency", dt), lambda: b.randn(1 << 24))
                    fn = lambda: torch.ops.cupipe._stream_copy_ex(xs, m, s, 16, 8192, sms)
                    if not torch.equal(fn(), xs):
                        return _fail(b, tbl_l, f"_stream_copy_ex {m}/{s} differs from x",
                                     op="stream_copy", mechanism=m, stages=s)
                    bw = gbps(2 * xs.numel() * xs.element_size(), b.try_time(fn))
                    b.res.add(table=tbl_l, op="stream_copy", mechanism=m, stages=s, GBps=bw,
                              vs_copy=bw / b.copy_bw)
                tasks.append(Task(f"latency-bound {m}/{s}", run))
    else:
        b.res.notes.append("latency-bound study skipped on the CPU (it needs SMs)")
    return tasks


# ----------------------------------------------------------------------------- performance suite

def _slicing_stencil2d(x, w, ry, rx):
    H, W = x.shape[-2:]
    xp = F.pad(x, (rx, rx, ry, ry))
    out = None
    for a in range(2 * ry + 1):
        for c in range(2 * rx + 1):
            t = w[a, c] * xp[..., a:a + H, c:c + W]
            out = t if out is None else out + t
    return out


def _star3d(device):
    """The 7-point Laplacian."""
    w = torch.zeros(3, 3, 3, device=device)
    w[1, 1, :] = w[1, :, 1] = w[:, 1, 1] = 1.0
    w[1, 1, 1] = -6.0
    return w


def _taps(shape, star=False):
    """The taps of a stencil of this shape (any number of dims): all of a box's, or a star's (the
    taps off the centre along one dim at most)."""
    r = [(k - 1) // 2 for k in shape]
    taps = itertools.product(*(range(k) for k in shape))
    return [t for t in taps if not star or sum(t[d] != r[d] for d in range(len(shape))) <= 1]


_PAD_MODES = {"zero": "constant", "reflect": "reflect", "replicate": "replicate", "circular": "circular"}


def _slicing_taps(x, w, taps, boundary="zero"):
    """torch.compile's input: a stencil over x's last w.dim() dims as shifted slices of the input
    padded for `boundary`, one term per tap in `taps` (Python constants, as a user writes them: a
    star's zeros are not multiplied)."""
    nd = w.dim()
    radii = [(k - 1) // 2 for k in w.shape]
    sizes = x.shape[-nd:]
    pads = [p for r in reversed(radii) for p in (r, r)]
    if boundary == "zero":
        xp = F.pad(x, pads)
    else:  # F.pad's other modes want a leading dim beyond the padded ones
        xp = F.pad(x.reshape((-1,) + tuple(sizes)), pads, mode=_PAD_MODES[boundary]).reshape(
            x.shape[:-nd] + tuple(n + 2 * r for n, r in zip(sizes, radii)))
    out = None
    for tap in taps:
        t = w[tap] * xp[(...,) + tuple(slice(a, a + n) for a, n in zip(tap, sizes))]
        out = t if out is None else out + t
    return out


def _slicing_stencil1d(x, w, r):
    n = x.shape[-1]
    xp = F.pad(x, (r, r))
    out = None
    for k in range(2 * r + 1):
        t = w[k] * xp[..., k:k + n]
        out = t if out is None else out + t
    return out


def _suite_case(b: Bench, op: str, workload: str, make, ours, eager, eager_name: str, comp, ref,
                nbytes_of, atol_of=lambda inp: None, same_copy=None, table: Optional[str] = None,
                cls: Optional[str] = None) -> Task:
    """One row of the performance suite: check `ours` against `ref`, then time ours, eager and
    compiled. make() -> inputs; ours/eager/ref take the inputs and return a thunk; comp (or None)
    computes from the inputs, passed as its argument, as in a user's `torch.compile(f)(x)` (the
    static shapes are what matters, see Bench.compile). same_copy (or None) takes the inputs and returns the tensor whose
    ``y.copy_(x)`` the row's bandwidth is also compared with (vs_copy_same: the stencils' targets
    are stated against copy_ of their own input; those bytes move a little slower than the 2^28
    fp32 copy of vs_copy). table: the row's table (default ``suite: <op>``); cls: the row's class
    in a summary (layout_summary)."""
    tbl = table or f"suite: {op}{b.tag}"
    extra_keys = {"cls": cls} if cls else {}

    def run():
        inp = b.inputs(("suite", workload), make)
        err = _check(ours(inp)(), ref(inp), workload, atol=atol_of(inp))
        if err:
            return _fail(b, tbl, err, op=op, workload=workload)
        nbytes = nbytes_of(inp)
        t_ours, t_eager = b.try_time(ours(inp)), b.try_time(eager(inp))
        cf = b.compile(comp) if comp is not None else None
        t_comp = b.try_time(lambda: cf(inp)) if cf is not None else float("nan")
        valid = [t for t in (t_eager, t_comp) if not math.isnan(t)]
        best = min(valid) if valid else float("nan")
        bw = gbps(nbytes, t_ours)
        extra = {}
        if same_copy is not None:
            src = same_copy(inp)
            dst = torch.empty_like(src)
            extra["vs_copy_same"] = b.time(lambda: dst.copy_(src)) / t_ours
            del dst
        b.res.add(table=tbl, op=op, workload=workload, ms=t_ours, GBps=bw, vs_copy=bw / b.copy_bw, **extra,
                  eager=eager_name, eager_ms=t_eager, vs_eager=t_eager / t_ours,
                  compiled_ms=t_comp, vs_compiled=t_comp / t_ours, speedup_vs_best=best / t_ours,
                  bytes=nbytes, **extra_keys)
    return Task(f"{op}: {workload}", run)


def tasks_suite(b: Bench, ops: List[str]) -> List[Task]:
    """The performance suite (docs/design.md; sizes shrunk on the CPU), for the selected ops."""
    tasks: List[Task] = []
    n, dt, tag = b.n1, b.dt, SHORT[b.dt]
    nlab = f"2^{b.log_n}"
    if "stream_copy" in ops:
        def make():
            x = b.randn(n)
            return x, torch.empty_like(x)
        tasks.append(_suite_case(
            b, "stream_copy", f"stream copy {nlab} {tag}", make,
            ours=lambda i: (lambda: cupipe.stream_copy(i[0])),
            eager=lambda i: (lambda: i[1].copy_(i[0])), eager_name="y.copy_(x)",
            comp=lambda i: i[0].clone(), ref=lambda i: (lambda: i[0]),
            nbytes_of=lambda i: 2 * i[0].numel() * i[0].element_size()))
    if "reduce" in ops:
        cases = [("sum all", (n,), None, dt, None), *[("sum rows", s, -1, dt, None) for s in b.rows],
                 ("sum cols", b.cols, 0, dt, None)]
        if b.dtype is None:  # the suite's bf16 case: bf16 in, fp32 accumulation and result
            cases.append(("sum all bf16->fp32", (n,), None, torch.bfloat16, torch.float32))
        cases.append(("amax all", (n,), None, dt, None))
        if b.quick and not b.cpu:
            cases = [c for c in cases if c[1] in ((n,), (4194304, 64), (32768, 8192))]
        for name, shape, dim, cdt, out_dt in cases:
            op = "amax" if name.startswith("amax") else "sum"
            if out_dt is not None:
                ours = lambda i, dim=dim, out_dt=out_dt: (lambda: cupipe.reduce(i, "sum", dim, dtype=out_dt))
                eager = lambda i, out_dt=out_dt: (lambda: i.sum(dtype=out_dt))
                ename = "x.sum(dtype=float32)"
            elif dim is None:
                ours = lambda i, op=op: (lambda: cupipe.reduce(i, op))
                eager = lambda i, op=op: (lambda: getattr(i, op)())
                ename = f"x.{op}()"
            else:
                ours = lambda i, dim=dim: (lambda: cupipe.reduce(i, "sum", dim))
                eager = lambda i, dim=dim: (lambda: i.sum(dim))
                ename = f"x.sum({dim})"
            ref = (lambda i, op=op, dim=dim: (lambda: getattr(i.float(), op)() if dim is None
                                              else i.float().sum(dim)))
            tasks.append(_suite_case(
                b, "reduce", f"{name} {tuple(shape)} {SHORT[cdt]}",
                lambda shape=shape, cdt=cdt: b.randn(*shape, dtype=cdt), ours, eager, ename,
                comp=lambda i, eager=eager: eager(i)(), ref=ref, nbytes_of=lambda i: i.numel() * i.element_size(),
                atol_of=lambda i, dim=dim: 1e-4 * math.sqrt(i.numel() if dim is None else i.shape[dim])))
    if "reduce" in ops:
        # The state reductions (var .. norm) on the same shapes, against their torch functions.
        state_ops = {"var": (lambda t, d: torch.var(t, d), "torch.var"),
                     "std": (lambda t, d: torch.std(t, d), "torch.std"),
                     "argmax": (lambda t, d: torch.argmax(t, d), "torch.argmax"),
                     "argmin": (lambda t, d: torch.argmin(t, d), "torch.argmin"),
                     "logsumexp": (lambda t, d: torch.logsumexp(t, list(range(t.dim())) if d is None else d),
                                   "torch.logsumexp"),
                     "norm": (lambda t, d: torch.linalg.vector_norm(t, 2, d), "torch.linalg.vector_norm")}
        shapes = [((n,), None), *[(s, -1) for s in b.rows], (b.cols, 0)]
        if b.quick and not b.cpu:
            shapes = [c for c in shapes if c[0] in ((n,), (4194304, 64), (32768, 8192))]
        for sop, (tf, tname) in state_ops.items():
            for shape, dim in shapes:
                ours = lambda i, sop=sop, dim=dim: (lambda: cupipe.reduce(i, sop, dim))
                eager = lambda i, tf=tf, dim=dim: (lambda: tf(i, dim))
                # Indices compare exactly; values against torch in fp64, cast back.
                ref = (lambda i, tf=tf, dim=dim, sop=sop: (lambda: tf(i, dim) if sop.startswith("arg")
                                                           else tf(i.double(), dim).to(i.dtype)))
                tasks.append(_suite_case(
                    b, "reduce", f"{sop} {'all' if dim is None else 'cols' if dim == 0 else 'rows'} "
                    f"{tuple(shape)} {tag}", lambda shape=shape: b.randn(*shape, dtype=dt), ours, eager,
                    f"{tname}(x{'' if dim is None else f', {dim}'})", comp=lambda i, eager=eager: eager(i)(),
                    ref=ref, nbytes_of=lambda i: i.numel() * i.element_size(),
                    table=f"suite: reduce (state ops){b.tag}"))
    if "stencil2d" in ops:
        H = W = b.hw
        star = [[0, 1, 0], [1, -4, 1], [0, 1, 0]]
        st = [("5-point star", lambda: torch.tensor(star, device=b.device, dtype=torch.float32)),
              ("3x3 box", lambda: torch.randn(3, 3, device=b.device)),
              ("5x5 box", lambda: torch.randn(5, 5, device=b.device)),
              ("9x9 box", lambda: torch.randn(9, 9, device=b.device))]
        if b.quick:
            st = st[:3]
        for name, mk_w in st:
            def make(mk_w=mk_w):
                return b.randn(H, W), mk_w()
            conv = (lambda i: (lambda: F.conv2d(i[0][None, None], i[1].to(i[0].dtype)[None, None],
                                                padding=(i[1].shape[0] - 1) // 2)))
            ref = (lambda i: (lambda: F.conv2d(i[0].float()[None, None], i[1][None, None],
                                               padding=(i[1].shape[0] - 1) // 2)[0, 0]))
            tasks.append(_suite_case(
                b, "stencil2d", f"stencil2d {name} {H}x{W} {tag}", make,
                ours=lambda i: (lambda: cupipe.stencil2d(i[0], i[1])), eager=conv,
                eager_name="F.conv2d",
                comp=lambda i: _slicing_stencil2d(i[0], i[1], (i[1].shape[0] - 1) // 2, (i[1].shape[1] - 1) // 2),
                ref=ref, nbytes_of=lambda i: 2 * i[0].numel() * i[0].element_size(), same_copy=lambda i: i[0]))
    if "stencil3d" in ops:
        n3 = b.dhw

        cases3 = [("7-point star", lambda: _star3d(b.device), _taps((3, 3, 3), star=True)),
                  ("27-point box", lambda: torch.randn(3, 3, 3, device=b.device), _taps((3, 3, 3)))]
        if not b.quick:
            cases3.append(("5x5x5 box", lambda: torch.randn(5, 5, 5, device=b.device), _taps((5, 5, 5))))
        for name, mk_w, taps in cases3:
            def make(mk_w=mk_w):
                return b.randn(n3, n3, n3), mk_w()
            pad3 = lambda w: tuple((k - 1) // 2 for k in w.shape)  # noqa: E731
            tasks.append(_suite_case(
                b, "stencil3d", f"stencil3d {name} {n3}^3 {tag}", make,
                ours=lambda i: (lambda: cupipe.stencil3d(i[0], i[1])),
                eager=lambda i: (lambda: F.conv3d(i[0][None, None], i[1].to(i[0].dtype)[None, None],
                                                  padding=pad3(i[1]))),
                eager_name="F.conv3d",
                comp=lambda i, taps=taps: _slicing_taps(i[0], i[1], taps),
                ref=lambda i: (lambda: F.conv3d(i[0].float()[None, None], i[1][None, None],
                                                padding=pad3(i[1]))[0, 0]),
                nbytes_of=lambda i: 2 * i[0].numel() * i[0].element_size(), same_copy=lambda i: i[0]))
    if "stencil1d" in ops:
        def make():
            return b.randn(n), torch.randn(9, device=b.device)
        tasks.append(_suite_case(
            b, "stencil1d", f"stencil1d r=4 {nlab} {tag}", make,
            ours=lambda i: (lambda: cupipe.stencil1d(i[0], i[1])),
            eager=lambda i: (lambda: F.conv1d(i[0][None, None], i[1].to(i[0].dtype)[None, None], padding=4)),
            eager_name="F.conv1d",
            comp=lambda i: _slicing_stencil1d(i[0], i[1], 4),
            ref=lambda i: (lambda: F.conv1d(i[0].float()[None, None], i[1][None, None], padding=4)[0, 0]),
            nbytes_of=lambda i: 2 * i[0].numel() * i[0].element_size(), same_copy=lambda i: i[0]))
    if not b.use_compile:
        b.res.notes.append("torch.compile baselines skipped" +
                           (" on the CPU path (inductor's C++ build would dominate a smoke test)"
                            if b.cpu else " (--no-compile)"))
    return tasks


# ----------------------------------------------------------------------------- layout sweep

LAYOUT_OUTER, LAYOUT_R, LAYOUT_INNER = (1, 7, 64, 1000), (3, 100, 1000, 100000), (1, 3, 16, 64, 100, 1024)


def _conv1d_along(x, w, dim):
    """Eager stencil1d: the dim moved last and flattened into a batch of signals for F.conv1d."""
    t = x.movedim(dim, -1)
    y = F.conv1d(t.reshape(-1, 1, t.shape[-1]), w.to(x.dtype)[None, None], padding=(w.shape[0] - 1) // 2)
    return y.view(t.shape).movedim(-1, dim)


def _slicing_stencil1d_along(x, w, dim):
    return _slicing_stencil1d(x.movedim(dim, -1), w, (w.shape[0] - 1) // 2).movedim(-1, dim)


def _conv2d_planes(x, w):
    """Eager stencil2d: channels_last x as a depthwise convolution (read in place by cuDNN), any
    other layout as a batch of single-channel planes."""
    pad = ((w.shape[0] - 1) // 2, (w.shape[1] - 1) // 2)
    wt = w.to(x.dtype)
    if x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous():
        return F.conv2d(x, wt.expand(x.shape[1], 1, *w.shape), padding=pad, groups=x.shape[1])
    return F.conv2d(x.reshape(-1, 1, *x.shape[-2:]), wt[None, None], padding=pad).view(x.shape)


def tasks_layout(b: Bench) -> List[Task]:
    """The layout sweep (docs/design.md, section 7): reductions over (outer, r, inner) grids,
    through transposed and permuted views, over several dims and as channels_last global average
    pooling; var and argmax on the long-row and middle-dim points; stencils along first, middle and last dims and on transposed, channels_last and
    cropped planes. fp32 and bf16 (fp32 only with --quick; --dtype picks one). Each row against
    eager and torch.compile of the same computation on the same (non-contiguous) input."""
    tasks: List[Task] = []
    dtypes = [b.dtype] if b.dtype else ([torch.float32] if b.quick else [torch.float32, torch.bfloat16])
    big = 64e6 if not b.cpu else 1e5          # bytes: the sweep's large tensors
    cap = (1 << 31) if not b.cpu else (1 << 22)

    def add(op, workload, make, ours, eager, eager_name, comp, cdt, r=0, cls=""):
        """One row; r: the number of values each reduced output sums (its check's atol); cls: its
        class in the summary."""
        ref = (lambda i: (lambda: eager((i[0].float(), *i[1:]))().float()))  # fp32 in and out
        passes = 1 if op == "reduce" else 2  # a reduction's output is negligible; a stencil's is not
        tbl = f"layout: {op}{b.tag}"
        if tbl not in b.res.detail:
            b.res.detail.append(tbl)  # --markdown-brief keeps the summary only
        tasks.append(_suite_case(b, op, f"{workload} {SHORT[cdt]}", make, ours, eager, eager_name, comp, ref,
                                 lambda i: passes * i[0].numel() * i[0].element_size(),
                                 atol_of=lambda i: 1e-3 * math.sqrt(r) if r else None,
                                 table=tbl, cls=f"{op} {cls}"))

    def one_dtype(dt):  # a function, so that the cases' closures each keep their own dt
        esz = torch.empty((), dtype=dt).element_size()
        # The grid's points of 64 MB or more (the sweep: small tensors time the launch, not
        # the layout); on the CPU, its scaled-down threshold.
        grid = [(o, r, n) for o, r, n in itertools.product(LAYOUT_OUTER, LAYOUT_R, LAYOUT_INNER)
                if big <= o * r * n * esz <= cap]
        for o, r, n in grid:
            views = [("", lambda o=o, r=r, n=n: b.randn(o, r, n, dtype=dt))]
            width = "rows (inner 1)" if n == 1 else "inner 3-16" if n <= 16 else "inner 64-100" if n <= 100 else "inner 1024"
            if o * r * n * esz >= big:  # large points also through transposed and permuted views
                views += [(" transposed", lambda o=o, r=r, n=n: b.randn(o, n, r, dtype=dt).transpose(1, 2)),
                          (" permuted", lambda o=o, r=r, n=n: b.randn(r, o, n, dtype=dt).permute(1, 0, 2))]
            for vname, mk in views:
                add("reduce", f"sum (outer, r, inner)=({o}, {r}, {n}) dim 1{vname}", lambda mk=mk: (mk(),),
                    lambda i: (lambda: cupipe.reduce(i[0], "sum", 1)), lambda i: (lambda: i[0].sum(1)),
                    "x.sum(1)", lambda i: i[0].sum(1), dt, r=r,
                    cls=f"{vname.strip()} view" if vname else f"middle dim, {width}")
        # The state reductions (var: Moments; argmax: Arg) on the grid's long rows and middle dims.
        for o, r, n in [pt for pt in grid if pt[1] >= 1000 and pt[2] in (1, 16, 1024) and pt[0] in (1, 64, 1000)]:
            for sop, tf in (("var", lambda t: t.var(1)), ("argmax", lambda t: t.argmax(1))):
                add("reduce", f"{sop} (outer, r, inner)=({o}, {r}, {n}) dim 1",
                    lambda o=o, r=r, n=n: (b.randn(o, r, n, dtype=dt),),
                    lambda i, sop=sop: (lambda: cupipe.reduce(i[0], sop, 1)), lambda i, tf=tf: (lambda: tf(i[0])),
                    f"x.{sop}(1)", lambda i, tf=tf: tf(i[0]), dt, r=r, cls=f"state op {sop}")
        several = [((64, 256, 64, 256), (1, 3)), ((256, 256, 256), (0, 2)), ((4096, 64, 64), (1, 2))]
        gap = [(64, 256, 56, 56), (256, 64, 32, 32), (32, 1024, 14, 14)]
        if b.cpu:
            several, gap = [((8, 16, 8, 16), (1, 3)), ((16, 16, 16), (0, 2))], [(4, 16, 8, 8)]
        for shape, dims in several:
            add("reduce", f"sum {shape} dims {dims}", lambda shape=shape: (b.randn(*shape, dtype=dt),),
                lambda i, dims=dims: (lambda: cupipe.reduce(i[0], "sum", dims)),
                lambda i, dims=dims: (lambda: i[0].sum(dims)), "x.sum(dims)", lambda i, dims=dims: i[0].sum(dims), dt,
                r=math.prod(shape[d] for d in dims), cls="several dims")
        for shape in gap:
            mk = lambda shape=shape: (b.randn(*shape, dtype=dt).contiguous(memory_format=torch.channels_last),)
            add("reduce", f"mean {shape} channels_last dims (2, 3)", mk,
                lambda i: (lambda: cupipe.reduce(i[0], "mean", (2, 3))), lambda i: (lambda: i[0].mean((2, 3))),
                "x.mean((2, 3))", lambda i: i[0].mean((2, 3)), dt, r=1, cls="channels_last pooling")
        total = (1 << 26) if not b.cpu else (1 << 14)
        w5 = lambda: torch.randn(5, device=b.device)
        for n_in in (1, 3, 64, 4096):
            length = 4096 if not b.cpu else 64
            outer = max(total // (length * n_in), 1)
            for where, shape, dim in (("first", (length, outer * n_in), 0), ("middle", (outer, length, n_in), 1),
                                      ("last", (outer * n_in, length), 1)):
                if where != "middle" and n_in != 1:
                    continue
                add("stencil1d", f"stencil1d r=2 {where} dim of {shape}",
                    lambda shape=shape: (b.randn(*shape, dtype=dt), w5()),
                    lambda i, dim=dim: (lambda: cupipe.stencil1d(i[0], i[1], dim=dim)),
                    lambda i, dim=dim: (lambda: _conv1d_along(i[0], i[1], dim)), "F.conv1d",
                    lambda i, dim=dim: _slicing_stencil1d_along(i[0], i[1], dim), dt,
                    cls=f"{where} dim" + (f", inner {n_in}" if where == "middle" else ""))
        w3 = lambda: torch.randn(3, 3, device=b.device)
        planes = (32, 256, 2048, 8192) if not b.cpu else (8, 32)
        for hw in planes:
            batch = max(total // (hw * hw), 1)
            cases = [("contiguous", lambda hw=hw, batch=batch: b.randn(batch, hw, hw, dtype=dt)),
                     ("transposed", lambda hw=hw, batch=batch: b.randn(batch, hw, hw, dtype=dt).transpose(1, 2)),
                     ("cropped", lambda hw=hw, batch=batch: b.randn(batch, hw + 8, hw + 8, dtype=dt)[:, 4:-4, 4:-4])]
            for c in ((3, 16, 64, 256) if not b.cpu else (3, 16)):
                if hw * hw * c > 4 * total:  # no batch of one image fits the sweep's size
                    continue
                nb = max(total // (hw * hw * c), 1)
                cases.append((f"channels_last C={c}", lambda hw=hw, c=c, nb=nb: b.randn(
                    nb, c, hw, hw, dtype=dt).contiguous(memory_format=torch.channels_last)))
            for name, mk in cases:
                add("stencil2d", f"stencil2d 3x3 {hw}x{hw} {name}", lambda mk=mk: (mk(), w3()),
                    lambda i: (lambda: cupipe.stencil2d(i[0], i[1])), lambda i: (lambda: _conv2d_planes(i[0], i[1])),
                    "F.conv2d", lambda i: _slicing_stencil2d(i[0], i[1], 1, 1), dt, cls=name.split(" C=")[0])

    for dt in dtypes:
        one_dtype(dt)
    tasks.append(Task("layout: summary", lambda: layout_summary(b.res, f"layout: summary{b.tag}"), final=True))
    return tasks


def layout_summary(res: Results, title: str):
    """The sweep by class: its rows' speedups over the faster of eager and torch.compile (fewest,
    geometric mean, most) and bandwidths against copy_; then each op's geometric mean (the issue's
    targets: every row >= 0.95, stencils' mean >= 1.2, reductions' >= 1.0)."""
    num = lambda v: float(v) if isinstance(v, (int, float)) else float("nan")  # noqa: E731
    rows = [r for r in res.rows if str(r.get("table", "")).startswith("layout:") and r.get("cls")
            and num(r.get("speedup_vs_best")) > 0]
    groups: Dict[str, List[dict]] = {}
    for r in rows:
        groups.setdefault(str(r["cls"]), []).append(r)
    state = lambda r: "state op" in str(r["cls"])  # noqa: E731  (issue 48's ops: a mean of their own)
    for op in sorted({str(r["op"]) for r in rows}):
        groups[f"{op}: all"] = [r for r in rows if r["op"] == op and not state(r)]
    if any(state(r) for r in rows):
        groups["reduce state ops: all"] = [r for r in rows if state(r)]
    for cls, rs in groups.items():
        sp = [num(r["speedup_vs_best"]) for r in rs]
        vc = [num(r.get("vs_copy")) for r in rs]
        res.add(table=title, workload=cls, rows=len(rs), min=min(sp),
                geomean=math.exp(sum(math.log(v) for v in sp) / len(sp)), max=max(sp),
                vs_copy_min=min(vc), vs_copy_max=max(vc), below_0_95=sum(v < 0.95 for v in sp))


# ----------------------------------------------------------------------------- sweep

def _heat_weights(nd: int, alpha: float, device) -> torch.Tensor:
    """The explicit heat update u + alpha * L(u) as one stencil: the (2n+1)-point Laplacian L of nd
    dims, alpha times, plus the identity at the centre."""
    w = torch.zeros((3,) * nd, device=device)
    for d in range(nd):
        for side in (0, 2):
            idx = [1] * nd
            idx[d] = side
            w[tuple(idx)] = alpha
    w[(1,) * nd] = 1.0 - 2 * nd * alpha
    return w


def _mean_box(nd: int, device) -> torch.Tensor:
    """A 3^nd box of random positive weights summing to 1: repeated many times, it stays finite."""
    w = torch.rand((3,) * nd, device=device) + 0.5
    return w / w.sum()


def step_counts(b: Bench) -> List[int]:
    if b.cpu:
        return [1, 2, 4]
    return [1, 2, 4, 8] if b.quick else [1, 2, 4, 8, 16, 32, 64]


# torch.compile unrolls the k-step loop: compiled baselines stop here (the k = 1, 4, 8).
_MAX_COMPILED_STEPS = 8


def tasks_steps(b: Bench, ops: List[str]) -> List[Task]:
    """steps=k (issue 47): per case and k, cupipe's k-step call against k separate cupipe calls and
    torch.compile of the same k-step loop, in cell updates per second and against R1 = copy_
    bandwidth over the bytes one step moves a cell (read + write), the rate of one step at the
    memory roofline. Each result is checked against the k separate calls first. The zero boundary,
    and the 2-D heat step also under reflect (an insulated edge): the target holds for every
    boundary."""
    tag = SHORT[b.dt]
    cases = []
    if "stencil1d" in ops:
        cases.append(("stencil1d heat r=1", lambda: b.randn(b.n1), lambda: _heat_weights(1, 0.25, b.device),
                      cupipe.stencil1d, f"2^{b.log_n}", "zero"))
    if "stencil2d" in ops:
        heat2 = (lambda: b.randn(b.hw, b.hw), lambda: _heat_weights(2, 0.2, b.device), cupipe.stencil2d,
                 f"{b.hw}x{b.hw}")
        cases.append(("stencil2d 5-point heat",) + heat2 + ("zero",))
        cases.append(("stencil2d 5-point heat, reflect",) + heat2 + ("reflect",))
        cases.append(("stencil2d 3x3 mean box", lambda: b.randn(b.hw, b.hw), lambda: _mean_box(2, b.device),
                      cupipe.stencil2d, f"{b.hw}x{b.hw}", "zero"))
    if "stencil3d" in ops:
        cases.append(("stencil3d 7-point heat", lambda: b.randn(b.dhw, b.dhw, b.dhw),
                      lambda: _heat_weights(3, 0.1, b.device), cupipe.stencil3d, f"{b.dhw}^3", "zero"))
        cases.append(("stencil3d 27-point mean box", lambda: b.randn(b.dhw, b.dhw, b.dhw),
                      lambda: _mean_box(3, b.device), cupipe.stencil3d, f"{b.dhw}^3", "zero"))
    tasks: List[Task] = []
    for name, mk_x, mk_w, op, size, bd in cases:
        table = f"steps: {name} {size} {tag}{b.tag}"
        for k in step_counts(b):
            def run(name=name, mk_x=mk_x, mk_w=mk_w, op=op, table=table, k=k, bd=bd):
                x, w = b.inputs(("steps", name), lambda: (mk_x(), mk_w()))
                opname = op.__name__
                star = (w == 0).any().item()
                taps = [t for t in _taps(tuple(w.shape), star=star) if not star or w[t].item() != 0]

                def loop():
                    y = x
                    for _ in range(k):
                        y = op(y, w, boundary=bd)
                    return y
                err = _check(op(x, w, boundary=bd, steps=k), loop, f"{name} k={k}")
                if err:
                    return _fail(b, table, err, op=opname, workload=f"k={k}")
                t_ours, t_loop = b.time(lambda: op(x, w, boundary=bd, steps=k)), b.time(loop)
                t_comp = float("nan")
                if k <= _MAX_COMPILED_STEPS:
                    def steps_torch(u, w):
                        for _ in range(k):
                            u = _slicing_taps(u, w, taps, bd)
                        return u
                    cf = b.compile(steps_torch)
                    t_comp = b.try_time(lambda: cf(x, w)) if cf is not None else float("nan")
                cells = x.numel()
                r1 = b.copy_bw * 1e9 / (2 * x.element_size())  # cell updates/s of one step at copy_ speed
                rate = k * cells / (t_ours * 1e-3)
                b.res.add(table=table, op=opname, workload=f"k={k}", k=k, ms=t_ours, Gupd_s=rate / 1e9,
                          x_R1=rate / r1, loop_ms=t_loop, vs_loop=t_loop / t_ours, compiled_ms=t_comp,
                          vs_compiled=t_comp / t_ours)
            tasks.append(Task(f"steps: {name} k={k}", run))
    return tasks


def tasks_sweep(b: Bench, ops: List[str]) -> List[Task]:
    """mechanism x stages (x vec_bytes for stream_copy) for one case per op, plus what auto runs
    (the shipped table, or the tuning cache through the cupipe.* wrappers)."""
    n, tag = b.n1, SHORT[b.dt]
    H = W = b.hw
    star = [[0.0, 1, 0], [1, -4, 1], [0, 1, 0]]
    cases = {
        "stream_copy": (f"stream_copy 2^{b.log_n} {tag}",
                        lambda: (b.randn(n),), lambda i, m, s, v: cupipe.stream_copy(i[0], mechanism=m, stages=s, vec_bytes=v),
                        lambda i: (lambda: i[0]), lambda i: 2 * i[0].numel() * i[0].element_size(),
                        lambda i: ("stream_copy", i[0])),
        "stencil1d": (f"stencil1d r=4 2^{b.log_n} {tag}",
                      lambda: (b.randn(n), torch.randn(9, device=b.device)),
                      lambda i, m, s, v: cupipe.stencil1d(i[0], i[1], mechanism=m, stages=s),
                      lambda i: (lambda: F.conv1d(i[0].float()[None, None], i[1][None, None], padding=4)[0, 0]),
                      lambda i: 2 * i[0].numel() * i[0].element_size(),
                      lambda i: ("stencil1d", i[0], i[1])),
        "stencil2d": (f"stencil2d 5-point star {H}x{W} {tag}",
                      lambda: (b.randn(H, W), torch.tensor(star, device=b.device)),
                      lambda i, m, s, v: cupipe.stencil2d(i[0], i[1], mechanism=m, stages=s),
                      lambda i: (lambda: F.conv2d(i[0].float()[None, None], i[1][None, None], padding=1)[0, 0]),
                      lambda i: 2 * i[0].numel() * i[0].element_size(),
                      lambda i: ("stencil2d", i[0], i[1])),
        "stencil3d": (f"stencil3d 7-point star {b.dhw}^3 {tag}",
                      lambda: (b.randn(b.dhw, b.dhw, b.dhw), _star3d(b.device)),
                      lambda i, m, s, v: cupipe.stencil3d(i[0], i[1], mechanism=m, stages=s),
                      lambda i: (lambda: F.conv3d(i[0].float()[None, None], i[1][None, None], padding=1)[0, 0]),
                      lambda i: 2 * i[0].numel() * i[0].element_size(),
                      lambda i: ("stencil3d", i[0], i[1])),
        "reduce": (f"reduce sum all 2^{b.log_n} {tag}",
                   lambda: (b.randn(n),),
                   lambda i, m, s, v: cupipe.reduce(i[0], "sum", mechanism=m, stages=s),
                   lambda i: (lambda: i[0].float().sum()),
                   lambda i: i[0].numel() * i[0].element_size(),
                   lambda i: ("reduce", i[0])),
    }
    tasks: List[Task] = [_precompile_task(b, ops)] if not b.cpu else []
    for op in ops:
        name, make, call, ref, nbytes_of, explain_args = cases[op]
        tbl = f"sweep: {name}{b.tag}"
        b.res.detail.append(tbl)
        widths = ([16] if b.quick or b.cpu else [4, 8, 16]) if op == "stream_copy" else [None]
        auto_ms: Dict[str, float] = {}
        ref_memo: Dict[str, torch.Tensor] = {}   # one reference per case, not one per grid point
        atol = (lambda i: 1e-4 * math.sqrt(i[0].numel())) if op == "reduce" else (lambda i: None)

        def point(m, s, v, op=op, name=name, make=make, call=call, ref=ref, nbytes_of=nbytes_of,
                  explain_args=explain_args, tbl=tbl, auto_ms=auto_ms, atol=atol, ref_memo=ref_memo):
            def run():
                i = b.inputs(("sweep", op), make)
                vv = v or 0
                extra = {"vec": v} if v is not None else {}
                try:
                    got = call(i, m, s, vv)
                except Exception as e:
                    b.res.note(f"skipped {op} {m}/{s}: {type(e).__name__}: {str(e).splitlines()[0][:100]}")
                    return
                if "ref" not in ref_memo:
                    ref_memo["ref"] = ref(i)()
                err = _check(got, lambda: ref_memo["ref"], f"{name} {m}/{s}", atol=atol(i))
                if err:
                    return _fail(b, tbl, err, op=op, mechanism=m, stages=s, **extra)
                ms = b.try_time(lambda: call(i, m, s, vv))
                bw = gbps(nbytes_of(i), ms)
                row = dict(table=tbl, op=op, mechanism=m, stages=s, **extra, ms=ms, GBps=bw,
                           vs_copy=bw / b.copy_bw)
                if m == "auto":
                    auto_ms["ms"] = ms
                    try:
                        e = cupipe.explain(*explain_args(i))
                        row["resolved"] = ("cpu: knobs ignored" if e.mechanism is None else
                                           f"{e.mechanism}/{e.stages}" +
                                           (f"/vec{e.vec_bytes}" if e.vec_bytes else "") +
                                           (" cached" if e.source.startswith("tuning cache") else ""))
                    except Exception:  # an older build without _C.resolve_config
                        pass
                    row.pop("vec", None)
                row["vs_auto"] = auto_ms.get("ms", float("nan")) / ms
                b.res.add(**row)
            return Task(f"sweep {op} {m}/{s}" + (f"/vec{v}" if v else ""), run)

        tasks.append(point("auto", 0, 0 if op == "stream_copy" else None))
        for v in widths:
            for m in b.mechanisms():
                for s in b.stage_list():
                    tasks.append(point(m, s, v))
    return tasks


# ----------------------------------------------------------------------------- main

def _write_out(outdir: str, res: Results, meta: dict) -> List[str]:
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "results.json"), "w") as f:
        json.dump({"meta": dict(meta, notes=res.notes, failures=res.failures), "rows": res.rows},
                  f, indent=1, default=str)
    keys: List[str] = []
    for r in res.rows:
        keys += [k for k in r if k not in keys]
    with open(os.path.join(outdir, "results.csv"), "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=keys)
        wr.writeheader()
        wr.writerows(res.rows)
    written = [os.path.join(outdir, "results.json"), os.path.join(outdir, "results.csv")]
    from . import plots
    if plots.have_matplotlib():
        written += plots.plot_results(res.rows, meta, outdir)
    else:
        print("(matplotlib is not installed: no plots; pip install matplotlib)")
    return written


def markdown_section(res: Results, meta: dict, brief: bool = False) -> str:
    """The run as a BENCHMARKS.md section: a ``## <device>`` heading, one line of context, the
    command that regenerates it, each table (``### <title>``) in the order printed, then notes
    and failures. brief: leave out the tables in ``res.detail`` (copy width, latency-bound,
    sweeps), named in one line instead."""
    cuda = meta.get("cuda") or "none"
    copy = meta.get("copy_GBps", float("nan"))
    lines = [f"## {meta['device']}",
             f"{meta['date']} · torch {meta['torch']} · CUDA {cuda} · cupipe {meta['cupipe']} · "
             f"y.copy_(x) {copy:.0f} GB/s ({meta['copy_what']}) · {meta['timer']}\\",
             f"`{meta['command']}`"]
    if meta.get("path_note"):
        lines[-1] += "\\"
        lines.append(meta["path_note"])
    omitted = []
    for title in res.tables():
        if brief and title in res.detail:
            omitted.append(title)
            continue
        table = res.markdown_lines(title)
        if table:
            lines += ["", f"### {title}", *table]
    tail = [f"- left out (--markdown-brief): {'; '.join(omitted)}"] if omitted else []
    tail += [f"- {n}" for n in res.notes]
    tail += [f"- FAILED or did not match its reference (not timed): {f}" for f in res.failures]
    if tail:
        lines += ["", "Notes:", *tail]
    return "\n".join(lines) + "\n"


def _write_outputs(args, res: Results, meta: dict):
    """--out (results.json, results.csv, plots) and --markdown."""
    if args.out:
        for p in _write_out(args.out, res, meta):
            print(f"wrote {p}")
    if args.markdown:
        md_dir = os.path.dirname(os.path.abspath(args.markdown))
        os.makedirs(md_dir, exist_ok=True)
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write(markdown_section(res, meta, brief=args.markdown_brief))
        print(f"wrote {args.markdown}")


def merge_runs(dirs: List[str]) -> "tuple[Results, dict]":
    """The rows of several runs' results.json as one run: their layout summaries dropped and made
    again over all the sweep's rows; the first directory's meta, with every run's command, copy_
    figure and dtype. Reads files only (no GPU, no torch.compile)."""
    res, metas = Results(), []
    for d in dirs:
        path = os.path.join(d, "results.json") if os.path.isdir(d) else d
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        metas.append(data["meta"])
        res.rows += [r for r in data["rows"] if not str(r.get("table", "")).startswith("layout: summary")]
        res.notes += [n for n in data["meta"].get("notes", []) if n not in res.notes]
        res.failures += data["meta"].get("failures", [])
    if len({(m.get("device"), m.get("cpu")) for m in metas}) > 1:
        raise ValueError("--merge: the runs come from different devices: " +
                         ", ".join(sorted({str(m.get("device")) for m in metas})))
    if len({m.get("timer") for m in metas}) > 1:  # (e.g. one run with --cold-l2, one without)
        raise ValueError("--merge: the runs were timed differently: " +
                         "; ".join(sorted({str(m.get("timer")) for m in metas})))
    meta = dict(metas[0])
    meta["command"] = " and ".join(f"`{m.get('command', '?')}`" for m in metas).strip("`")
    meta["copy_GBps"] = sum(m.get("copy_GBps", float("nan")) for m in metas) / len(metas)
    meta["dtype"] = ", ".join(str(m.get("dtype")) for m in metas)
    meta["date"] = " / ".join(sorted({str(m.get("date")) for m in metas}))
    res.notes.insert(0, f"{len(metas)} runs merged (--merge), one after the other; y.copy_(x) " +
                     " / ".join(f"{m.get('copy_GBps', float('nan')):.0f}" for m in metas) +
                     " GB/s, their mean in the header")
    tag = " [CPU]" if meta.get("cpu") else ""
    if any(str(r.get("table", "")).startswith("layout:") for r in res.rows):
        layout_summary(res, f"layout: summary{tag}")
    return res, meta


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="cupipe-bench", description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2].rstrip())
    ap.add_argument("--suite", choices=["engine", "ops", "all", "layout", "steps", "none"], default="all",
                    help="engine: stream_copy mechanism x stages, copy width, latency study; "
                         "ops: the performance suite (docs/design.md); all: both; layout: the "
                         "layout sweep (non-contiguous, permuted, channels_last inputs; long); "
                         "steps: the stencils' steps=k against k calls and torch.compile of the "
                         "k-step loop, in updates/s and x R1 (the --ops stencils); "
                         "none: only what --sweep adds")
    ap.add_argument("--ops", default=",".join(OPS),
                    help="comma-separated subset of " + ",".join(OPS) + " (default: all)")
    ap.add_argument("--dtype", choices=list(DTYPES), default=None,
                    help="run every case in this dtype (default: the suite's own, fp32 plus the "
                         "bf16 sum)")
    ap.add_argument("--sweep", action="store_true",
                    help="add the mechanism x stages x vec_bytes grid for one case per op")
    ap.add_argument("--only", metavar="REGEX", default=None,
                    help="measure only the cases whose label (as the progress line shows it) matches this "
                         "regular expression (re.search); summaries cover the rows measured")
    ap.add_argument("--quick", action="store_true", help="fewer configurations and repetitions")
    ap.add_argument("--reps", type=int, default=0, help="timed repetitions per measurement")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile baselines")
    ap.add_argument("--cold-l2", action="store_true",
                    help="start every timed GPU call, cupipe's and PyTorch's alike, with its inputs out of L2 "
                         "(cupipe.timing.time_ms's cold_l2): inputs near or under the L2's size are otherwise "
                         "read partly from L2 left by the previous repetition")
    ap.add_argument("--cpu", action="store_true",
                    help="run a tiny version on the CPU kernels (smoke test; CPU times)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    ap.add_argument("--out", default=None,
                    help="directory for results.json, results.csv and PNG plots "
                         "(cupipe_vs_pytorch.png, stages_<table>.png)")
    ap.add_argument("--markdown", metavar="FILE", default=None,
                    help="also write the run as a markdown section for BENCHMARKS.md: device, "
                         "date, versions, the command, every printed table")
    ap.add_argument("--merge", nargs="+", metavar="RUN", default=None,
                    help="measure nothing: read these runs' results.json (or their --out directories) "
                         "and write them as one run (--out, --markdown), the layout summary made again "
                         "over all their rows")
    ap.add_argument("--markdown-brief", action="store_true",
                    help="with --markdown: leave out the detail tables (stream_copy copy width, "
                         "the latency-bound study, sweeps)")
    args = ap.parse_args(argv)
    argv_given = list(sys.argv[1:] if argv is None else argv)
    if args.markdown_brief and not args.markdown:
        ap.error("--markdown-brief needs --markdown FILE")
    try:
        only = re.compile(args.only) if args.only is not None else None
    except re.error as e:
        ap.error(f"--only: not a regular expression: {e}")
    if args.merge:
        try:
            res, meta = merge_runs(args.merge)
        except (OSError, ValueError, KeyError) as e:
            ap.error(f"--merge: {e}")
        for title in res.tables():
            res.print_table(title)
        _write_outputs(args, res, meta)
        return 0
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    bad = [o for o in ops if o not in OPS]
    if bad or not ops:
        ap.error(f"--ops: unknown op(s) {', '.join(bad) or '(none given)'}; choose from {', '.join(OPS)}")
    if not args.cpu and not cupipe.cuda_available():
        print("cupipe-bench: no CUDA device (or cupipe built without CUDA); nothing to measure. "
              "Run with --cpu for a small smoke test of the CPU kernels.")
        return 0
    dtype = DTYPES[args.dtype] if args.dtype else None
    reps = args.reps or ((3 if args.quick else 5) if args.cpu else (10 if args.quick else 30))
    res = Results()
    b = Bench(args.cpu, args.quick, reps, dtype, not args.no_compile, res, cold_l2=args.cold_l2)
    date = time.strftime("%Y-%m-%d")
    path_note = ""
    if args.cpu:
        dev = f"CPU ({torch.get_num_threads()} threads)"
        timer = f"median of {reps} time.perf_counter reps"
        path_note = ("CPU path: tiny sizes; times are CPU wall-clock times, not GPU times, and the "
                     "engine knobs (mechanism, stages, vec_bytes) are ignored on the CPU"
                     + (", and so is --cold-l2." if args.cold_l2 else "."))
    else:
        dev = torch.cuda.get_device_name()
        timer = f"median of {reps} CUDA-event-timed reps" + (", each from a cold L2" if b.cold_l2 else "")
    print(f"device: {dev} | torch {torch.__version__} | cupipe {cupipe.__version__} | "
          f"{date} | {timer}")
    if path_note:
        print(path_note)
    b.copy_bw = copy_bandwidth(b)
    copy_what = f"2^{b.log_n} fp32, read+write"
    print(f"copy bandwidth (y.copy_(x), {copy_what}): {b.copy_bw:.0f} GB/s"
          + (" (CPU)" if args.cpu else ""))

    tasks: List[Task] = []
    if args.suite in ("engine", "all") and "stream_copy" in ops:
        tasks += tasks_engine(b)
    if args.suite in ("ops", "all"):
        tasks += tasks_suite(b, ops)
    if args.suite == "layout":
        tasks += tasks_layout(b)
    if args.suite == "steps":
        tasks += tasks_steps(b, ops)
    if args.sweep:
        tasks += tasks_sweep(b, ops)
    if only is not None:
        tasks = [t for t in tasks if t.final or only.search(t.what)]
    prog = Progress(len(tasks), enabled=not args.no_progress)
    res.say = prog.write
    done, interrupted = 0, False
    try:
        for t in tasks:
            prog.step(t.what)
            try:
                t.run()
            except Exception as e:  # report it, go on with the other measurements
                msg = f"{t.what}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
                res.failures.append(msg)
                res.say(f"  FAILED {msg}")
            prog.done_one()
            done += 1
    except KeyboardInterrupt:  # Ctrl-C (or timeout -s INT): keep and write what was measured
        interrupted = True
        res.notes.append(f"interrupted: {done} of {len(tasks)} measurements ran (the rest were not timed)")
        for t in tasks[done:]:
            if t.final:
                t.run()
    finally:
        prog.close()
        res.say = print
        b.inputs(None, lambda: None)
    for title in res.tables():
        res.print_table(title)
    if res.notes:
        print("\nnotes:\n" + "\n".join(f"  - {n}" for n in res.notes))
    meta = {"device": dev, "cpu": bool(args.cpu), "torch": torch.__version__,
            "cuda": torch.version.cuda, "cupipe": cupipe.__version__, "date": date,
            "timer": timer, "reps": reps, "copy_GBps": b.copy_bw, "copy_what": copy_what,
            "dtype": args.dtype or "suite default", "ops": ops, "argv": argv_given,
            "command": ("python -m cupipe.bench " + shlex.join(argv_given)).rstrip(),
            "path_note": path_note}
    _write_outputs(args, res, meta)
    if interrupted:
        print(f"\ninterrupted after {done} of {len(tasks)} measurements", file=sys.stderr)
        return 130
    if res.failures:
        print(f"\n{len(res.failures)} measurement(s) failed or did not match their reference "
              "(not timed):")
        for f in res.failures:
            print("  " + f)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
