"""Usage: python3 tools/run_notebook.py NOTEBOOK [--out EXECUTED.ipynb] [--no-kernel]

Execute a notebook top to bottom, headless: with nbclient (a real Jupyter kernel) when it and
ipykernel are installed, else (or with --no-kernel) by running its code cells in order in this
Python process (IPython magics such as ``%matplotlib inline`` are skipped; figures go to Agg).
Cells run with the notebook's directory as the working directory. Exit status 0 when every cell
ran, 1 (with the failing cell's error) otherwise. E.g.

    python3 tools/run_notebook.py examples/cupipe_tour.ipynb --out /tmp/tour_executed.ipynb
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback


def _have_nbclient() -> bool:
    try:
        import ipykernel  # noqa: F401
        import nbclient  # noqa: F401
        import nbformat  # noqa: F401
    except ImportError:
        return False
    return True


def run_with_nbclient(path: str, out: str | None, timeout: int) -> int:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": os.path.dirname(os.path.abspath(path))}})
    t0 = time.time()
    try:
        client.execute()
    except CellExecutionError as e:
        print(f"run_notebook: a cell failed:\n{e}", file=sys.stderr)
        return 1
    finally:
        if out:
            nbformat.write(nb, out)
    n = sum(c.cell_type == "code" for c in nb.cells)
    for i, c in enumerate(nb.cells):
        if c.cell_type != "code":
            continue
        for o in c.get("outputs", []):
            if o.get("output_type") == "stream":
                sys.stdout.write(o.get("text", ""))
            elif o.get("output_type") in ("display_data", "execute_result"):
                kinds = ", ".join(sorted(o.get("data", {})))
                print(f"[cell {i}: {kinds}]")
    print(f"run_notebook: {n} code cells ran with nbclient in {time.time() - t0:.1f} s")
    return 0


def run_in_process(path: str) -> int:
    import matplotlib
    matplotlib.use("Agg")
    with open(path, encoding="utf-8") as f:
        nb = json.load(f)
    os.chdir(os.path.dirname(os.path.abspath(path)))
    ns = {"__name__": "__main__"}
    t0 = time.time()
    n = 0
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        lines = [ln for ln in src.splitlines() if not ln.lstrip().startswith(("%", "!"))]
        try:
            exec(compile("\n".join(lines), f"<cell {i}>", "exec"), ns)
        except Exception:
            traceback.print_exc()
            print(f"run_notebook: cell {i} failed", file=sys.stderr)
            return 1
        n += 1
    print(f"run_notebook: {n} code cells ran in-process in {time.time() - t0:.1f} s")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Execute a notebook top to bottom, headless.")
    ap.add_argument("notebook")
    ap.add_argument("--out", help="write the executed notebook here (nbclient only)")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per cell (nbclient)")
    ap.add_argument("--no-kernel", action="store_true", help="run in-process even with nbclient")
    args = ap.parse_args(argv)
    if not args.no_kernel and _have_nbclient():
        return run_with_nbclient(args.notebook, args.out, args.timeout)
    if not args.no_kernel:
        print("run_notebook: nbclient/ipykernel not installed; running the code cells in-process")
    return run_in_process(args.notebook)


if __name__ == "__main__":
    sys.exit(main())
