"""The examples' CPU paths, run as subprocesses the way a user runs them (tiny sizes), and the
tour notebook executed top to bottom when nbclient and ipykernel are installed."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAS_MPL = importlib.util.find_spec("matplotlib") is not None


def _run(script, *args, timeout=180):
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, os.path.join(ROOT, script), *args], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{script} {' '.join(args)} failed:\n{p.stdout}\n{p.stderr}"
    return p.stdout


def test_quickstart_cpu():
    out = _run("examples/quickstart.py", "--cpu")
    assert out.strip().endswith("OK")


def test_heat_diffusion_tiny(tmp_path):
    png = tmp_path / "heat.png"
    out = _run("examples/heat_diffusion.py", "--cpu", "--size", "32", "--steps", "5",
               "--png", str(png))
    assert "max |cupipe - eager|" in out and "ms/step" in out and out.strip().endswith("OK")
    assert png.exists() == HAS_MPL


def test_train_smoothing_two_steps():
    # aot_eager: dynamo + AOTAutograd trace forward and backward through the fake kernels
    # (fullgraph=True), without inductor's slow C++ build on a CPU runner.
    out = _run("examples/train_smoothing.py", "--cpu", "--steps", "2", "--size", "32",
               "--backend", "aot_eager")
    assert "step    1" in out and out.strip().endswith("OK")


@pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in ("nbclient", "nbformat", "ipykernel")),
                    reason="nbclient, nbformat and ipykernel are needed to execute the notebook")
def test_tour_notebook_executes(tmp_path):
    out = _run("tools/run_notebook.py", "examples/cupipe_tour.ipynb", "--out",
               str(tmp_path / "tour.ipynb"), timeout=600)
    assert "code cells ran with nbclient" in out
    assert "max abs err" in out


def test_heat3d_tiny():
    """k steps of the 3-D heat stencil in one call decay the eigenmode exactly (fp64 on the CPU),
    and L-BFGS through the steps recovers the diffusion number."""
    out = _run("examples/heat3d.py", "--cpu", "--size", "12", "--steps", "6")
    assert "max |error|" in out and "fitted a = 0.100000" in out and out.strip().endswith("OK")
