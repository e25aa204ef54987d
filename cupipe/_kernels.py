"""The kernel instances cupipe can launch, by id, and the ones built ahead of time.

An instance is a kernel template with its arguments; its id is the template-id text the
launchers compose (csrc/kernels/kernel_id.h), e.g.
``stencil_kernel<engine::Mechanism::Tma,2,float,StencilFamily::Box,2>``. ``all_instances()`` is
every id a launch can ask for; ``default_instances()`` the ones the tuning table's choices
(mechanism="auto", stages=0: csrc/ops/tuning.cpp) lead to, which the build compiles ahead of
time (``CUPIPE_AOT=all``: every one). Any other instance is compiled on first use
(cupipe/_kernel_cache.py). tests/test_kernel_cache.py checks the table against DEFAULT_CHOICES.

Standard library only: setup.py loads this file before torch or the package exist.
"""
from __future__ import annotations

import re

from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

MECHANISMS = ("sync", "pipeline", "pipeline_thread", "primitives", "cg", "barrier", "specialized", "tma")
_ENUM = {"sync": "Sync", "pipeline": "Pipeline", "pipeline_thread": "PipelineThread", "primitives": "Primitives",
         "cg": "Cg", "barrier": "Barrier", "specialized": "Specialized", "tma": "Tma"}
STAGES = tuple(range(1, 9))
# dtype name (as torch spells it) -> the C++ type of the kernels, and its size.
DTYPES = {"float32": ("float", 4), "float16": ("__half", 2), "bfloat16": ("__nv_bfloat16", 2),
          "float64": ("double", 8)}
STENCIL_FAMILIES = ("Row", "Box", "Narrow3", "Narrow5", "Wide9", "Mma5", "Mma7", "Mma9", "BoxMma", "BoxFixed",
                    "SteppedRow", "SteppedBox")
MMA_TERMS = 2  # kMmaTerms<T> (consumer_mma.cuh): a Mma instance's weight terms; 1 for exact weights
WGRAD_BLOCKINGS = ("RowBlocking", "BoxBlocking<1>", "BoxBlocking<3>", "BoxBlocking<5>", "BoxBlocking<9>")
# stencil3d_kernel<M, S, T, RZ, R, odd, star> (csrc/kernels/stencil/volume.cuh): depth radius 1..4 (0 runs as
# stencil2d), in-plane radius class R (volume_radius_class: ry, rx <= R), odd: x's rows not 16-byte multiples apart,
# star: the axis taps' instance of the star pair (launched with the general one where ry or rx > 0).
VOLUME_RZ = (1, 2, 3, 4)
VOLUME_R = (1, 2, 4)

# The header that defines each kernel: the kernel alone, without its launcher's host code (which
# an instance's compile would only parse). The launchers name the same headers (kernel_ref).
HEADERS = {
    "stream_copy": "kernels/stream_copy.cuh",
    "stencil": "kernels/stencil/kernel.cuh",
    "stencil_wgrad": "kernels/stencil/weight_grad.cuh",
    "stencil3d": "kernels/stencil/volume.cuh",
    "stencil_steps": "kernels/stencil/steps.cuh",
    "reduce_rows": "kernels/reduce/rows.cuh",
    "reduce_cols": "kernels/reduce/columns.cuh",
    "reduce_cols_direct": "kernels/reduce/columns_direct.cuh",
    "reduce_partials": "kernels/reduce/partials.cuh",
    "reduce_state": "kernels/reduce/stateful.cuh",
    "reduce_state_direct": "kernels/reduce/state_direct.cuh",
}
# reduce_state_kernel<M, S, T, K> (csrc/kernels/reduce/stateful.cuh): var/std, argmax/argmin,
# logsumexp, norm.
STATE_KINDS = ("Moments", "Arg", "Lse", "Norm")


class Instance(NamedTuple):
    op: str          # stream_copy, stencil, stencil_wgrad, stencil3d, stencil_steps, reduce
    header: str      # the header that declares its kernel
    id: str          # the template-id
    mechanism: str   # "" where the kernel has none
    stages: int      # 0 where the kernel has none
    dtype: str       # torch's name; "" for stream_copy (bytes)
    family: str      # stencil family, reduce kernel, copy width, or wgrad blocking

    @property
    def cost(self) -> int:
        """Rough compile cost, to order and group builds (stencils are the slowest)."""
        return {"stencil": 8, "stencil_wgrad": 6, "stencil3d": 6, "stencil_steps": 6, "reduce": 2}.get(self.op, 1)


def _m(mech: str) -> str:
    return "engine::Mechanism::" + _ENUM[mech]


def _b(v: bool) -> str:
    return "true" if v else "false"


def stencil_family_exists(family: str, stages: int, dtype: str) -> bool:
    """stencil_family_exists<T>(F, S) (csrc/kernels/stencil/family.cuh)."""
    size = DTYPES[dtype][1]
    if family in ("Row", "Box", "BoxFixed", "SteppedRow", "SteppedBox"):
        return True
    if family == "Narrow3":
        return stages <= 2 and size <= 4
    if family == "Narrow5":
        return stages <= 2 and dtype == "float32"
    if family == "Wide9":
        return stages == 2 and dtype == "float32"
    if family == "BoxMma":
        return size == 2
    return stages == 2 and size == 2  # Mma5/7/9


def _family_name(family: str) -> str:
    """stencil_family_name (family.cuh): "BoxMma" -> "box_mma"."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", family).lower()


def stream_copy_widths(mech: str) -> Tuple[int, ...]:
    """The copy widths launch_stream_copy_plan launches under a mechanism."""
    return (16,) if mech == "tma" else (1, 2, 4, 8, 16) if mech == "sync" else (4, 8, 16)


def stream_copy_instances(mech: str, stages: int, widths: Optional[Iterable[int]] = None) -> List[Instance]:
    ws = stream_copy_widths(mech) if widths is None else [w for w in widths if w in stream_copy_widths(mech)]
    return [Instance("stream_copy", HEADERS["stream_copy"], f"stream_copy_kernel<{_m(mech)},{stages},{v}>",
                     mech, stages, "", f"v{v}") for v in ws]


def stencil_instances(mech: str, stages: int, dtype: str, families: Optional[Iterable[str]] = None) -> List[Instance]:
    out = []
    ctype = DTYPES[dtype][0]
    for fam in families if families is not None else STENCIL_FAMILIES:
        if not stencil_family_exists(fam, stages, dtype):
            continue
        for terms in ((MMA_TERMS, 1) if fam.startswith("Mma") else (MMA_TERMS,)):
            out.append(Instance("stencil", HEADERS["stencil"],
                                f"stencil_kernel<{_m(mech)},{stages},{ctype},StencilFamily::{fam},{terms}>",
                                mech, stages, dtype, _family_name(fam) + ("" if terms == MMA_TERMS else "_exact")))
    return out


def volume_radius_class(ry: int, rx: int) -> int:
    """volume_radius_class (csrc/kernels/stencil/volume.cuh)."""
    return 1 if max(ry, rx) <= 1 else 2 if max(ry, rx) <= 2 else 4


def stencil3d_instances(mech: str, stages: int, dtype: str, radii: Optional[Iterable[Tuple[int, int]]] = None
                        ) -> List[Instance]:
    """stencil3d_kernel instances for (rz, R) pairs (None: every depth radius and in-plane class)."""
    ctype = DTYPES[dtype][0]
    pairs = radii if radii is not None else [(rz, r) for rz in VOLUME_RZ for r in VOLUME_R]
    return [Instance("stencil3d", HEADERS["stencil3d"],
                     f"stencil3d_kernel<{_m(mech)},{stages},{ctype},{rz},{r},{_b(odd)},{_b(star)}>",
                     mech, stages, dtype, f"rz{rz}_r{r}") for rz, r in pairs for odd in (False, True)
            for star in (False, True)]


def steps_per_pass(ry: int, esz: int) -> int:
    """stencil_steps_per_pass (csrc/kernels/params.h): the levels of the fused steps kernel for
    these radii; 1 where there is none."""
    if ry == 0:
        return 16
    budget = 32 if ry == 1 and esz <= 4 else 64
    k = budget // (2 * ry * 4 * (2 if esz == 8 else 1))
    return k if k > 1 else 1


def stencil_steps_instances(mech: str, stages: int, dtype: str,
                            radii: Optional[Iterable[Tuple[int, int]]] = None) -> List[Instance]:
    """stencil_steps_kernel instances (the fused steps=k of stencil1d/stencil2d) for (ry, rx) pairs
    (None: every pair of radii 0..4 that has one)."""
    ctype, esz = DTYPES[dtype]
    pairs = radii if radii is not None else [(ry, rx) for ry in range(5) for rx in range(5)]
    return [Instance("stencil_steps", HEADERS["stencil_steps"],
                     f"stencil_steps_kernel<{_m(mech)},{stages},{ctype},{ry},{rx},{_b(star)}>", mech, stages, dtype,
                     f"ry{ry}_rx{rx}") for ry, rx in pairs if steps_per_pass(ry, esz) > 1
            for star in ((False, True) if ry > 0 and rx > 0 else (False,))]


def reduce_instances(mech: str, stages: int, dtype: str, kinds: Sequence[str] = ("rows", "cols")) -> List[Instance]:
    ctype = DTYPES[dtype][0]
    return [Instance("reduce", HEADERS[f"reduce_{kind}"], f"reduce_{kind}_kernel<{_m(mech)},{stages},{ctype}>",
                     mech, stages, dtype, kind) for kind in kinds]


def reduce_wide_instances(mech: str, dtype: str) -> List[Instance]:
    """reduce_wide_rows_kernel<M, T, chunks>: stage-less (one tile per block)."""
    ctype = DTYPES[dtype][0]
    return [Instance("reduce", HEADERS["reduce_rows"], f"reduce_wide_rows_kernel<{_m(mech)},{ctype},{b}>",
                     mech, 0, dtype, "wide_rows" + ("_chunks" if b == "true" else "")) for b in ("false", "true")]


# reduce_cols_direct_kernel<U, T> (csrc/kernels/reduce/columns_direct.cuh): the sync mechanism on 16-byte
# aligned columns, U loads in flight a thread (cols_direct_loads: 4, 8, 16 at 1, 2, 3+ stages; 16
# falls to 8 where the grid is more than a wave).
COLS_DIRECT_LOADS = (4, 8, 16)


def cols_direct_loads(stages: int) -> int:
    """cols_direct_loads (csrc/kernels/reduce/launch_plan.cuh)."""
    return 4 if stages <= 1 else 8 if stages == 2 else 16


def reduce_cols_direct_instances(dtype: str, loads: Iterable[int] = COLS_DIRECT_LOADS) -> List[Instance]:
    ctype = DTYPES[dtype][0]
    return [Instance("reduce", HEADERS["reduce_cols_direct"], f"reduce_cols_direct_kernel<{u},{ctype}>", "sync", 0,
                     dtype, f"cols_direct{u}") for u in loads]


def reduce_cols_fold_instances(dtype: str, loads: Iterable[int] = COLS_DIRECT_LOADS) -> List[Instance]:
    """reduce_cols_fold_kernel<U, T> (columns_direct.cuh): the sum kinds over two runs of reduced dims
    folded into one pass."""
    ctype = DTYPES[dtype][0]
    return [Instance("reduce", HEADERS["reduce_cols_direct"], f"reduce_cols_fold_kernel<{u},{ctype}>", "sync", 0,
                     dtype, f"cols_fold{u}") for u in loads]


def reduce_cols_wrap_instances(dtype: str, loads: Iterable[int] = COLS_DIRECT_LOADS) -> List[Instance]:
    """reduce_cols_wrap_kernel<U, T> (columns_direct.cuh): the sum kinds over columns of rows narrower than
    16 bytes that wrap into 16-byte vectors (none for 8-byte types, whose columns of two are a vector)."""
    if DTYPES[dtype][1] == 8:
        return []
    ctype = DTYPES[dtype][0]
    return [Instance("reduce", HEADERS["reduce_cols_direct"], f"reduce_cols_wrap_kernel<{u},{ctype}>", "sync", 0,
                     dtype, f"cols_wrap{u}") for u in loads]


def reduce_cols_narrow_instances(dtype: str, loads: Iterable[int] = COLS_DIRECT_LOADS) -> List[Instance]:
    """reduce_cols_narrow_kernel<U, T, VB> (columns_direct.cuh): the sum kinds over columns whose rows are one
    VB-byte vector (8 or 4; rows of two elements or more) that do not wrap (odd r, x aligned to VB only)."""
    if DTYPES[dtype][1] == 8:
        return []
    ctype = DTYPES[dtype][0]
    return [Instance("reduce", HEADERS["reduce_cols_direct"], f"reduce_cols_narrow_kernel<{u},{ctype},{vb}>", "sync",
                     0, dtype, f"cols_narrow{u}_{vb}") for vb in (8, 4) if vb > DTYPES[dtype][1] for u in loads]


def reduce_partials_instances() -> List[Instance]:
    """The partials passes, per accumulation type (float, double)."""
    return [Instance("reduce", HEADERS["reduce_partials"], f"{k}<{a}>", "", 0, "", k.replace("_kernel", "") + "_" + a)
            for k in ("reduce_partials_block_kernel", "reduce_col_partials_kernel", "reduce_partials_kernel")
            for a in ("float", "double")]


def reduce_state_instances(mech: str, stages: int, dtype: str, kinds: Sequence[str] = STATE_KINDS) -> List[Instance]:
    ctype = DTYPES[dtype][0]
    return [Instance("reduce", HEADERS["reduce_state"], f"reduce_state_kernel<{_m(mech)},{stages},{ctype},StateKind::{k}>",
                     mech, stages, dtype, "state_" + k.lower()) for k in kinds]


def reduce_state_direct_instances(dtype: str, loads: Iterable[int] = COLS_DIRECT_LOADS,
                                  kinds: Sequence[str] = STATE_KINDS) -> List[Instance]:
    """reduce_state_cols_direct_kernel<U, T, K>, reduce_state_rows_direct_kernel<U, T, K>,
    reduce_state_cols_fold_kernel<U, T, K>, reduce_state_cols_wrap_kernel<U, T, K> and
    reduce_state_cols_narrow_kernel<U, T, K, VB> (csrc/kernels/reduce/state_direct.cuh): the state reductions
    under sync on aligned columns, along aligned rows, over two runs of reduced dims folded into one pass
    (every kind but Arg), over narrow columns wrapped into vectors, and over rows of one VB-byte vector (8
    or 4, rows of two elements or more) that do not wrap (none of the last two for 8-byte types)."""
    ctype, esz = DTYPES[dtype]
    layouts = ("cols_direct", "rows_direct", "cols_fold") + (("cols_wrap",) if esz < 8 else ())
    out = [Instance("reduce", HEADERS["reduce_state_direct"],
                    f"reduce_state_{layout}_kernel<{u},{ctype},StateKind::{k}>", "sync", 0, dtype,
                    f"state_{layout}{u}_{k.lower()}")
           for layout in layouts for u in loads for k in kinds
           if layout != "cols_fold" or k != "Arg"]
    out += [Instance("reduce", HEADERS["reduce_state_direct"],
                     f"reduce_state_cols_narrow_kernel<{u},{ctype},StateKind::{k},{vb}>", "sync", 0, dtype,
                     f"state_cols_narrow{u}_{vb}_{k.lower()}")
            for vb in (8, 4) if esz < vb for u in loads for k in kinds]
    return out


def reduce_state_partials_instances() -> List[Instance]:
    """The state reductions' partials pass, per accumulation type and kind."""
    return [Instance("reduce", HEADERS["reduce_state"], f"reduce_state_partials_kernel<{a},StateKind::{k}>", "", 0, "",
                     f"state_partials_{k.lower()}_{a}") for a in ("float", "double") for k in STATE_KINDS]


def wgrad_instances(dtype: str) -> List[Instance]:
    ctype = DTYPES[dtype][0]
    return [Instance("stencil_wgrad", HEADERS["stencil_wgrad"], f"stencil_wgrad_kernel<{ctype},{b}>",
                     "primitives", 2, dtype, b) for b in WGRAD_BLOCKINGS]


def all_instances() -> List[Instance]:
    """Every instance a launch can ask for."""
    out: List[Instance] = []
    for mech in MECHANISMS:
        for s in STAGES:
            out += stream_copy_instances(mech, s)
            for dt in DTYPES:
                out += stencil_instances(mech, s, dt)
                out += stencil3d_instances(mech, s, dt)
                out += stencil_steps_instances(mech, s, dt)
                out += reduce_instances(mech, s, dt)
                out += reduce_state_instances(mech, s, dt)
        for dt in DTYPES:
            out += reduce_wide_instances(mech, dt)
    for dt in DTYPES:
        out += reduce_cols_direct_instances(dt) + reduce_cols_fold_instances(dt) + reduce_cols_wrap_instances(dt)
        out += reduce_cols_narrow_instances(dt)
        out += reduce_state_direct_instances(dt)
    out += reduce_partials_instances() + reduce_state_partials_instances()
    for dt in DTYPES:
        out += wgrad_instances(dt)
    return out


# What the tuning table (csrc/ops/tuning.cpp) can choose, per op: (mechanism, stages, restriction).
# Families and kernels within a choice follow from the call's geometry at run time, so each
# choice takes every family its (stages, dtype) has, except where the table's rule fixes it.
DEFAULT_CHOICES: Dict[str, List[Tuple[str, int]]] = {
    # sync/1 on sm_90, primitives/2 before; widths under 4 bytes run sync at the same stages.
    "stream_copy": [("sync", 1), ("primitives", 2), ("sync", 2)],
    # tma/2 (2-byte rows, rows16 boxes, stepped boxes), primitives/2 (other boxes, strided, before
    # sm_90), barrier/2 (4- and 8-byte rows), barrier/1 (stepped rows), primitives/1 (wide steps).
    "stencil": [("tma", 2), ("primitives", 2), ("barrier", 2), ("barrier", 1), ("primitives", 1)],
    # rows: tma/1 (sm_90), primitives/1 (4-32 KiB rows), primitives/2 (before sm_90);
    # columns: sync/3 (16-byte aligned rows on sm_90: the direct kernel), tma/1 (rows under 4 KiB),
    # tma/3 (congruent rows), primitives/1. (The state ops' kernels compile on first use.)
    "reduce": [("tma", 1), ("primitives", 1), ("primitives", 2), ("tma", 3), ("sync", 3)],
}


def _before_sm90(arch_list: Optional[str]) -> bool:
    """Whether the build's architectures include one below sm_90, where the table's other branch
    (primitives/2 for every stencil) applies. None: assume so."""
    if arch_list is None:
        return True
    for entry in arch_list.replace(";", " ").split():
        try:
            if float(entry.replace("+PTX", "").rstrip("af")) < 9.0:
                return True
        except ValueError:
            return True
    return False


def default_instances(arch_list: Optional[str] = None) -> List[Instance]:
    """The instances the table's choices lead to for devices of ``arch_list``
    (TORCH_CUDA_ARCH_LIST; None: any): what the build compiles ahead of time. Within a choice, the
    families its geometry can reach: the fixed consumers and their alone-kernels need rows of whole
    16-byte multiples (rows16), which the sm_90 table sends to tma; primitives/2 takes the rest."""
    old = _before_sm90(arch_list)
    out: List[Instance] = []
    out += stream_copy_instances("sync", 1) + stream_copy_instances("primitives", 2)
    out += stream_copy_instances("sync", 2, widths=(1, 2))
    for dt in DTYPES:
        size = DTYPES[dt][1]
        # tma/2: 2-byte rows (Row), rows16 boxes (every box family), stepped boxes (SteppedBox).
        out += stencil_instances("tma", 2, dt, families=[f for f in STENCIL_FAMILIES if f != "SteppedRow" and
                                                         (size == 2 or f != "Row")])
        # primitives/2: boxes that are not rows16 (Box; BoxMma where only the pointer is unaligned),
        # fp64 boxes (Box, BoxFixed), fp32 boxes of unequal radii up to 5 wide (the fixed 3- and
        # 5-row consumers), strided dims and points (Row, Box); before sm_90 everything.
        out += stencil_instances("primitives", 2, dt, families=None if old else
                                 ("Row", "Box", "BoxFixed", "Narrow3", "Narrow5", "BoxMma"))
        if size >= 4:
            out += stencil_instances("barrier", 2, dt, families=("Row",))   # rows of 4- and 8-byte types
        out += stencil_instances("barrier", 1, dt, families=("SteppedRow",))     # stepped rows
        out += stencil_instances("primitives", 1, dt, families=("SteppedBox",))  # stepped boxes of wide points
        out += reduce_instances("tma", 1, dt) + reduce_instances("primitives", 2, dt, kinds=("rows",))
        out += reduce_instances("primitives", 1, dt)  # rows of 4-32 KiB; columns not in 128-byte rows
        out += reduce_instances("tma", 3, dt, kinds=("cols",))
        out += reduce_cols_direct_instances(dt, loads=(8, 16))  # sync/3 on aligned columns: 16 loads, or 8
        out += reduce_cols_fold_instances(dt, loads=(8, 16))    # the same, two runs of reduced dims folded
        out += reduce_cols_wrap_instances(dt, loads=(8, 16))    # the same, narrow rows wrapped into vectors
        out += reduce_cols_narrow_instances(dt, loads=(8, 16))  # the same, rows of one 8- or 4-byte vector
        out += reduce_wide_instances("tma", dt) + reduce_wide_instances("primitives", dt)
        out += wgrad_instances(dt)
    out += reduce_partials_instances()
    return out


def select(instances: Iterable[Instance], op=None, dtype=None, mechanism=None, stages=None) -> List[Instance]:
    """The instances that match every filter given (each a value or a collection of values). An
    instance without the property (a copy has no dtype, a partials pass no mechanism or stages)
    matches any filter of it: the calls it serves need it whatever they choose."""
    def ok(value, want):
        if want is None or value in ("", 0):
            return True
        if isinstance(want, (str, int)):
            want = (want,)
        return value in tuple(want)
    return [i for i in instances if ok(i.op, op) and ok(i.dtype, dtype) and ok(i.mechanism, mechanism)
            and ok(i.stages, stages)]


def normalize_id(instance_id: str) -> str:
    """An id without blanks (registry.h compares them so)."""
    return "".join(instance_id.split())


def translation_unit(instances: Sequence[Instance]) -> str:
    """The source of a file that compiles these instances (all of one header and, for the ahead-of-
    time files, one mechanism): the ahead-of-time files and the one-instance files of first-use
    compiles are both this text."""
    headers = sorted({i.header for i in instances})
    # Only the rings these instances name (CUPIPE_ENGINE_MECHANISMS, engine/rings.cuh); from the
    # ids, which are all a first-use compile knows.
    enums = list(_ENUM.values())
    mask = sum(1 << enums.index(e) for e in {e for i in instances for e in re.findall(r"Mechanism::(\w+)", i.id)})
    lines = [f"#define CUPIPE_ENGINE_MECHANISMS {mask:#04x}", '#include "kernels/instance.h"']
    lines += [f'#include "{h}"' for h in headers]
    lines += ["", "namespace cupipe {", "namespace kernels {"]
    lines += [f"CUPIPE_KERNEL_INSTANCE({i.id})" for i in instances]
    lines += ["}  // namespace kernels", "}  // namespace cupipe", ""]
    return "\n".join(lines)
