"""Usage: python3 tools/plot_bench.py BENCH_LOG [--out DIR] [--stream-copy-figure PNG]

Plot a saved ``python -m cupipe.bench`` text log (the ``table=... key=value`` lines that
``CUPIPE_BENCH_STREAM=1`` prints) with the bench's own plotting functions (``cupipe.plots``):
``--out`` writes every plot the log supports; ``--stream-copy-figure`` the README's two-panel
stream_copy figure (full occupancy and the latency-bound study side by side). Needs matplotlib,
not a GPU or a built cupipe._C. An example log: tests/data/bench_h200.txt.
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import os
import re
import sys
from typing import List, Tuple

_HERE = os.path.dirname(os.path.abspath(__file__))


def _plots_module():
    """cupipe/plots.py, loaded by path: plotting a log needs no compiled extension."""
    path = os.path.join(_HERE, "..", "cupipe", "plots.py")
    spec = importlib.util.spec_from_file_location("cupipe_plots", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _value(v: str):
    v = v.strip()
    if v == "nan":
        return float("nan")
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return v


def parse_log(text: str) -> Tuple[List[dict], dict]:
    """(rows, meta) from a bench log. Rows come from lines ``  table=T  k=v  k=v ...`` (fields
    separated by two or more spaces; values may contain single spaces); meta from the
    ``device: ...`` header and the ``copy bandwidth ...: N GB/s`` line."""
    rows, meta = [], {}
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("table="):
            row = {}
            for field in re.split(r"\s{2,}", s):
                k, sep, v = field.partition("=")
                if sep:
                    row[k.strip()] = _value(v)
            rows.append(row)
        elif s.startswith("device:"):
            parts = [p.strip() for p in s[len("device:"):].split("|")]
            meta["device"] = parts[0]
            for p in parts[1:]:
                if p.startswith("torch "):
                    meta["torch"] = p.split()[1]
                elif re.fullmatch(r"\d{4}-\d{2}-\d{2}", p):
                    meta["date"] = p
                elif p.startswith("median of"):
                    meta["timer"] = p + " (CUDA events)"
        else:
            m = re.match(r"copy bandwidth .*?:\s*([0-9.]+)\s*GB/s", s)
            if m:
                meta["copy_GBps"] = float(m.group(1))
    return rows, meta


def stream_copy_figure(rows: List[dict], meta: dict, path: str, plots) -> None:
    full = [r for r in rows if str(r.get("table", "")).startswith("stream_copy 2^")]
    lat = [r for r in rows if str(r.get("table", "")).startswith("latency-bound")]
    if not full and not lat:
        raise SystemExit("plot_bench: the log has no stream_copy or latency-bound table")
    panels = []
    if full:
        panels.append((f"whole device busy: {full[0]['table']}", full))
    if lat:
        panels.append((f"{lat[0]['table']}", lat))
    title = (f"stream_copy through the stage ring: effective bandwidth vs stages - "
             f"{meta.get('device', '?')}")
    note = (f"{meta.get('timer', 'CUDA events')}, torch {meta.get('torch', '?')}, "
            f"{meta.get('date', '')}; bytes read + written once / time; dashed line: y.copy_(x) "
            f"measured in the same run. Source: {meta.get('source', 'bench log')}")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    plots.plot_stages(panels, path, title, copy_GBps=meta.get("copy_GBps"), note=note)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Plot a saved cupipe.bench text log.",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log", help="a cupipe.bench text log")
    ap.add_argument("--out", help="directory for every plot the log supports")
    ap.add_argument("--stream-copy-figure", help="PNG path for the two-panel stream_copy figure")
    args = ap.parse_args(argv)
    plots = _plots_module()
    if not plots.have_matplotlib():
        print("plot_bench: matplotlib is not installed (pip install matplotlib)", file=sys.stderr)
        return 1
    with open(args.log, encoding="utf-8") as f:
        rows, meta = parse_log(f.read())
    meta.setdefault("source", os.path.relpath(args.log))
    print(f"{len(rows)} rows in {len({r.get('table') for r in rows})} tables; "
          f"device {meta.get('device', '?')}, copy {meta.get('copy_GBps', math.nan)} GB/s")
    if not args.out and not args.stream_copy_figure:
        ap.error("nothing to do: give --out and/or --stream-copy-figure")
    if args.out:
        for p in plots.plot_results(rows, meta, args.out):
            print(f"wrote {p}")
    if args.stream_copy_figure:
        stream_copy_figure(rows, meta, args.stream_copy_figure, plots)
        print(f"wrote {args.stream_copy_figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
