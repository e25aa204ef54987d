"""Plots of benchmark results (matplotlib, optional): bandwidth vs stages per mechanism, and
cupipe vs PyTorch bars. Used by ``python -m cupipe.bench --out DIR`` and by
``tools/plot_bench.py`` (which re-plots a saved bench log).

Rows are the dicts the bench records (``results.json``'s ``rows``); a table whose rows have
``mechanism``, ``stages`` and ``GBps`` becomes a bandwidth-vs-stages plot, one whose rows have
``workload``, ``ms`` and ``eager_ms`` a bar chart.
"""
from __future__ import annotations

import math
import os
import re
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

MECH_ORDER = ["sync", "pipeline", "pipeline_thread", "primitives", "cg", "barrier", "specialized",
              "tma"]


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _plt():
    import matplotlib
    if "matplotlib.pyplot" not in __import__("sys").modules:
        matplotlib.use("Agg")  # files only; leaves an interactive backend alone if one is in use
    import matplotlib.pyplot as plt
    return plt


def _num(v) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return float("nan")
    return f


# One colour and marker per mechanism, the same in every plot (gray is kept for y.copy_(x)).
_STYLE = {"sync": ("tab:blue", "o"), "pipeline": ("tab:orange", "s"),
          "pipeline_thread": ("tab:green", "^"), "primitives": ("tab:red", "v"),
          "cg": ("tab:purple", "D"), "barrier": ("tab:brown", "P"),
          "specialized": ("tab:pink", "X"), "tma": ("tab:olive", "*")}


def _style(mech: str):
    return _STYLE.get(mech, ("tab:cyan", "o"))


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").lower()[:80] or "plot"


def plot_stages(panels: Sequence[Tuple[str, List[dict]]], path: Optional[str], title: str, *,
                copy_GBps: Optional[float] = None, ylabel: str = "effective bandwidth (GB/s)",
                note: str = "", show: bool = False):
    """Effective bandwidth vs ring depth, one line per mechanism, one subplot per panel
    (``(subtitle, rows)``; rows need ``mechanism``, ``stages``, ``GBps``). A row with mechanism
    ``auto`` is drawn as a dotted horizontal line (what the shipped table / cache picks), and
    ``copy_GBps`` as a dashed one (``y.copy_(x)`` measured in the same run). Saves to ``path``
    (PNG) when given; returns the figure."""
    plt = _plt()
    n = len(panels)
    fig, axes = plt.subplots(1, n, figsize=(5.2 * n + 2.4, 4.6), sharey=True, squeeze=False,
                             layout="constrained")
    ymax = 0.0
    for ax, (sub, rows) in zip(axes[0], panels):
        mechs = [m for m in MECH_ORDER if any(r.get("mechanism") == m for r in rows)]
        mechs += sorted({r["mechanism"] for r in rows} - set(mechs) - {"auto"})
        stages_all = sorted({int(r["stages"]) for r in rows if r.get("mechanism") != "auto"})
        for m in mechs:
            pts = sorted((int(r["stages"]), _num(r.get("GBps"))) for r in rows if r.get("mechanism") == m)
            pts = [(s, g) for s, g in pts if not math.isnan(g)]
            if not pts:
                continue
            col, mk = _style(m)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=mk, lw=1.6, ms=6,
                    color=col, label=m, alpha=0.9)
            ymax = max(ymax, max(p[1] for p in pts))
        for r in rows:
            if r.get("mechanism") == "auto" and not math.isnan(_num(r.get("GBps"))):
                lab = "auto" + (f" = {r['resolved']}" if r.get("resolved") else "")
                ax.axhline(_num(r["GBps"]), color="black", ls=":", lw=1.5, label=lab)
                ymax = max(ymax, _num(r["GBps"]))
        if sub:
            ax.set_title(sub, fontsize=10)
        ax.set_xlabel("stages (depth of the shared-memory ring)")
        if stages_all:
            ax.set_xticks(stages_all)
        ax.grid(True, alpha=0.3)
    if copy_GBps:
        # The copy bandwidth as a dashed line when it fits the data's scale; far above it (slow
        # kernels, or the CPU path) it would flatten every curve, so it is only named then.
        on_scale = ymax == 0 or copy_GBps <= 2.5 * ymax
        for ax in axes[0]:
            if on_scale:
                ax.axhline(copy_GBps, color="gray", ls="--", lw=1.2,
                           label=f"y.copy_(x)\n{copy_GBps:.0f} GB/s")
            else:
                ax.plot([], [], color="none", label=f"y.copy_(x): {copy_GBps:.0f} GB/s\n(off scale)")
        if on_scale:
            ymax = max(ymax, copy_GBps)
    axes[0][0].set_ylabel(ylabel)
    axes[0][0].set_ylim(0, ymax * 1.1 if ymax > 0 else 1)
    # one legend for the figure: the union of every panel's entries, in order
    seen: Dict[str, object] = {}
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    fig.legend(list(seen.values()), list(seen.keys()), loc="outside right center", fontsize=9,
               title="mechanism", title_fontsize=9)
    fig.suptitle(title, fontsize=12)
    return _finish(fig, note, path, show)


def plot_vs_torch(rows: List[dict], path: Optional[str], title: str, *,
                  copy_GBps: Optional[float] = None, unit: str = "GB/s", note: str = "",
                  show: bool = False):
    """Horizontal grouped bars per workload: effective bandwidth of cupipe, eager PyTorch and
    ``torch.compile`` (missing / NaN ones are left out). Rows need ``workload``, ``ms``,
    ``GBps`` and ``eager_ms`` (``compiled_ms`` optional). Higher is better."""
    plt = _plt()
    rows = [r for r in rows if not math.isnan(_num(r.get("ms"))) and _num(r.get("ms")) > 0]
    names = [str(r["workload"]) for r in rows]
    series = [("cupipe", "tab:blue", [_num(r.get("GBps")) for r in rows])]

    def other(key):
        out = []
        for r in rows:
            t = _num(r.get(key))
            out.append(_num(r.get("GBps")) * _num(r.get("ms")) / t if t > 0 else float("nan"))
        return out

    series.append(("PyTorch eager", "tab:orange", other("eager_ms")))
    comp = other("compiled_ms")
    if any(not math.isnan(v) for v in comp):
        series.append(("torch.compile", "tab:green", comp))
    k = len(series)
    h = 0.8 / k
    fig, ax = plt.subplots(figsize=(10, 1.6 + 0.28 * k * max(len(rows), 1)), layout="constrained")
    vmax = copy_GBps or 0.0
    for j, (lab, col, vals) in enumerate(series):
        ys = [i + (j - (k - 1) / 2) * h for i in range(len(rows))]
        vv = [0 if math.isnan(v) else v for v in vals]
        bars = ax.barh(ys, vv, height=h, color=col, label=lab)
        for b, v in zip(bars, vals):
            if not math.isnan(v):
                ax.text(b.get_width(), b.get_y() + b.get_height() / 2, f" {v:.0f}", va="center",
                        fontsize=7)
                vmax = max(vmax, v)
    if copy_GBps:
        ax.axvline(copy_GBps, color="gray", ls="--", lw=1.2, label=f"y.copy_(x): {copy_GBps:.0f} {unit}")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, vmax * 1.15 if vmax > 0 else 1)
    ax.set_xlabel(f"effective bandwidth ({unit}; bytes read + written once / time) - higher is better")
    ax.set_title(title, fontsize=12)
    ax.legend(loc="best", fontsize=9)
    ax.grid(True, axis="x", alpha=0.3)
    return _finish(fig, note, path, show)


def plot_layout_sweep(rows: List[dict], path: Optional[str], title: str, *, note: str = "",
                      show: bool = False):
    """One bar per sweep row: cupipe's speedup over the faster of eager and torch.compile (log
    scale; the 0.95 target and parity marked), rows grouped by op, sorted within the group."""
    plt = _plt()
    rows = [r for r in rows if _num(r.get("speedup_vs_best")) > 0]
    rows.sort(key=lambda r: (str(r.get("op", "")), _num(r.get("speedup_vs_best"))))
    vals = [_num(r["speedup_vs_best"]) for r in rows]
    colors = {"reduce": "tab:blue", "stencil1d": "tab:orange", "stencil2d": "tab:green"}
    fig, ax = plt.subplots(figsize=(10, 1.6 + 0.17 * max(len(rows), 1)), layout="constrained")
    ax.barh(range(len(rows)), vals, color=[colors.get(str(r.get("op")), "tab:gray") for r in rows])
    ax.axvline(1.0, color="black", lw=1)
    ax.axvline(0.95, color="tab:red", ls="--", lw=1, label="0.95 (target)")
    ax.set_xscale("log")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([str(r.get("workload")) for r in rows], fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("cupipe speedup over the faster of eager and torch.compile (log) - higher is better")
    ax.set_title(title, fontsize=11)
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(True, axis="x", alpha=0.3, which="both")
    return _finish(fig, note, path, show)


def plot_steps(tables: Dict[str, List[dict]], path: Optional[str], title: str, *, note: str = "",
               show: bool = False):
    """One panel per steps table: cell updates/s against k (log2) for cupipe's k-step call, k
    separate calls and torch.compile of the k-step loop, with R1 (one step at copy_ speed)."""
    plt = _plt()
    n = max(len(tables), 1)
    cols = min(n, 3)
    fig, axes = plt.subplots((n + cols - 1) // cols, cols, figsize=(5 * cols, 3.6 * ((n + cols - 1) // cols)),
                             layout="constrained", squeeze=False)
    for ax, (table, rows) in zip(axes.flat, tables.items()):
        rows = sorted((r for r in rows if _num(r.get("Gupd_s")) > 0), key=lambda r: _num(r["k"]))
        ks = [_num(r["k"]) for r in rows]
        rate = [_num(r["Gupd_s"]) for r in rows]
        ax.plot(ks, rate, "o-", color="tab:red", label="cupipe steps=k")
        ax.plot(ks, [g * _num(r["ms"]) / _num(r["loop_ms"]) for g, r in zip(rate, rows)], "s--",
                color="tab:blue", label="k cupipe calls")
        comp = [(k, g * _num(r["ms"]) / _num(r["compiled_ms"])) for k, g, r in zip(ks, rate, rows)
                if _num(r.get("compiled_ms")) > 0]
        if comp:
            ax.plot(*zip(*comp), "^:", color="tab:green", label="torch.compile of the loop")
        if rows:
            ax.axhline(rate[0] / _num(rows[0]["x_R1"]), color="gray", ls="--", lw=1, label="R1: one step at copy_")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("steps k")
        ax.set_ylabel("G cell updates/s")
        ax.set_title(table.removeprefix("steps: "), fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(tables):]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=11)
    return _finish(fig, note, path, show)


def _tables(rows: Iterable[dict]) -> Dict[str, List[dict]]:
    out: Dict[str, List[dict]] = {}
    for r in rows:
        out.setdefault(str(r.get("table", "")), []).append(r)
    return out


def plot_results(rows: List[dict], meta: dict, outdir: str) -> List[str]:
    """Every plot the rows support, as PNGs in ``outdir``; returns their paths."""
    os.makedirs(outdir, exist_ok=True)
    dev = meta.get("device", "?")
    cpu = bool(meta.get("cpu"))
    note = ("CPU path: wall-clock medians (time.perf_counter) on tiny inputs.\nThe engine "
            "knobs are ignored on the CPU: differences between mechanisms are noise." if cpu else
            f"{meta.get('timer', 'median of CUDA-event-timed reps')}; torch {meta.get('torch', '?')}, "
            f"{meta.get('date', '')}")
    unit = "GB/s, CPU" if cpu else "GB/s"
    copy = meta.get("copy_GBps")
    paths = []
    bars: List[dict] = []
    for table, trs in _tables(rows).items():
        grid = [r for r in trs if "mechanism" in r and "stages" in r and "GBps" in r]
        if len({r["stages"] for r in grid if r.get("mechanism") != "auto"}) > 1:
            vecs = sorted({r.get("vec") for r in grid if r.get("vec") not in (None, "")},
                          key=lambda v: int(v))
            if len(vecs) > 1:
                panels = [(f"vec_bytes={v}", [r for r in grid if r.get("vec") in (v, None, "")
                                              or r.get("mechanism") == "auto"]) for v in vecs]
            else:
                panels = [("", grid)]
            p = os.path.join(outdir, f"stages_{slug(table)}.png")
            plot_stages(panels, p, f"{table}\n{dev}", copy_GBps=copy,
                        ylabel=f"effective bandwidth ({unit})", note=note)
            paths.append(p)
        if table.startswith("layout:") or table.startswith("steps:"):
            continue
        bars += [r for r in trs if "workload" in r and "eager_ms" in r]
    sweep = [r for r in rows if str(r.get("table", "")).startswith("layout:") and "speedup_vs_best" in r]
    if sweep:
        p = os.path.join(outdir, "layout_sweep.png")
        plot_layout_sweep(sweep, p, f"layout sweep: cupipe vs the faster of eager and torch.compile - {dev}",
                          note=note)
        paths.append(p)
    steps = {t: trs for t, trs in _tables(rows).items() if t.startswith("steps:")}
    if steps:
        p = os.path.join(outdir, "steps.png")
        plot_steps(steps, p, f"steps=k: cell updates/s against k - {dev}", note=note)
        paths.append(p)
    if bars:
        p = os.path.join(outdir, "cupipe_vs_pytorch.png")
        plot_vs_torch(bars, p, f"cupipe vs PyTorch - {dev}", copy_GBps=copy, unit=unit, note=note)
        paths.append(p)
    return paths


def _finish(fig, note, path, show):
    """Footnote, save, and close unless the caller shows the figure (notebooks)."""
    plt = _plt()
    if note:
        fig.supxlabel(note, fontsize=8, color="dimgray")
    if path:
        fig.savefig(path, dpi=120)
    if not show:
        plt.close(fig)
    return fig
