"""The benchmark CLI's CPU paths: it runs as a module, says so and exits 0 without a GPU, and
``--cpu`` runs a tiny suite end to end (tables, JSON, CSV, markdown, plots when matplotlib is
there)."""
from __future__ import annotations

import csv
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys

import pytest

import cupipe
from cupipe import bench, plots

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HAS_MPL = importlib.util.find_spec("matplotlib") is not None


def _run(*args, env_extra=None, timeout=120):
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "cupipe.bench", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_module_runs_and_exits_cleanly_without_a_gpu(tmp_path):
    # CUDA_VISIBLE_DEVICES="" hides any GPU, so this is the no-GPU path on every machine.
    p = _run("--quick", "--out", str(tmp_path / "o"), env_extra={"CUDA_VISIBLE_DEVICES": ""})
    assert p.returncode == 0, p.stderr
    assert "no CUDA device" in p.stdout and "--cpu" in p.stdout
    assert not (tmp_path / "o").exists()                  # nothing measured, nothing written


def test_help_lists_the_flags(capsys):
    with pytest.raises(SystemExit) as e:
        bench.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--ops", "--dtype", "--sweep", "--quick", "--out", "--cpu", "--suite",
                 "--markdown", "--markdown-brief", "--cold-l2"):
        assert flag in out


def test_cpu_quick_end_to_end(tmp_path):
    out = tmp_path / "res"
    p = _run("--cpu", "--quick", "--sweep", "--out", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "CPU path" in p.stdout and "[CPU]" in p.stdout
    assert "== suite: stencil2d [CPU]" in p.stdout and "== sweep: reduce" in p.stdout
    # progress: tqdm's bar or the plain counter, on stderr
    assert "[1/" in p.stderr or "step" in p.stderr or "it/s" in p.stderr
    doc = json.loads((out / "results.json").read_text())
    assert doc["meta"]["cpu"] is True and "perf_counter" in doc["meta"]["timer"]
    assert doc["meta"]["failures"] == []
    ops = {r["op"] for r in doc["rows"]}
    assert ops == {"stream_copy", "stencil1d", "stencil2d", "stencil3d", "reduce"}
    assert all(r["table"].endswith("[CPU]") for r in doc["rows"])
    # the engine table's first row is what stream_copy runs by default, named as such
    auto = [r for r in doc["rows"] if r["table"].startswith("stream_copy 2^") and r["mechanism"] == "auto"]
    assert len(auto) == 1 and auto[0]["resolved"] == "cpu: knobs ignored" and auto[0]["ms"] > 0
    with open(out / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(doc["rows"]) and "GBps" in rows[0]
    pngs = sorted(x.name for x in out.glob("*.png"))
    if HAS_MPL:
        assert "cupipe_vs_pytorch.png" in pngs and any(n.startswith("stages_sweep") for n in pngs)
        assert all((out / n).stat().st_size > 10_000 for n in pngs)
    else:
        assert pngs == [] and "matplotlib is not installed" in p.stdout


def test_ops_and_dtype_filters(capsys, tmp_path):
    rc = bench.main(["--cpu", "--quick", "--no-progress", "--suite", "ops", "--ops", "reduce",
                     "--dtype", "bfloat16", "--out", str(tmp_path)])
    assert rc == 0
    doc = json.loads((tmp_path / "results.json").read_text())
    assert {r["op"] for r in doc["rows"]} == {"reduce"}
    assert all(r["workload"].endswith("bf16") for r in doc["rows"])
    assert all(r["ms"] > 0 for r in doc["rows"])
    assert "suite: reduce" in capsys.readouterr().out


def test_sweep_only(capsys):
    rc = bench.main(["--cpu", "--quick", "--no-progress", "--suite", "none", "--sweep",
                     "--ops", "stream_copy,stencil2d"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "== sweep: stream_copy" in out and "== sweep: stencil2d" in out
    assert "suite:" not in out and "sweep: reduce" not in out


def _md_tables(text):
    """{title: (header cells, [row cells])} of every ``### title`` + pipe table in `text`."""
    out, lines = {}, text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("### "):
            continue
        body = []
        for row in lines[i + 1:]:
            if not row.startswith("|"):
                break
            assert row.endswith("|"), row
            body.append([c.strip() for c in re.split(r"(?<!\\)\|", row[1:-1])])
        assert len(body) >= 3, (line, body)          # header, separator, at least one row
        assert len(body[1]) == len(body[0]) and all(re.fullmatch(r"-{3,}:?", c) for c in body[1])
        out[line[4:]] = (body[0], body[2:])
    return out


def _printed_tables(stdout):
    """{title: (header, [row lines])} of the ``== title`` tables a run printed."""
    out, title = {}, None
    for line in stdout.splitlines():
        if line.startswith("== "):
            title = line[3:]
            out[title] = None
        elif title is not None and line.strip():
            if out[title] is None:
                out[title] = (line.split(), [])
            else:
                out[title][1].append(line)
        else:
            title = None
    return out


def test_cpu_quick_markdown(tmp_path):
    import torch

    md = tmp_path / "md" / "cpu.md"
    args = ["--cpu", "--quick", "--markdown", str(md)]
    p = _run(*args)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"wrote {md}" in p.stdout
    text = md.read_text(encoding="utf-8")
    lines = text.splitlines()
    # the device heading, a line of context, the command that regenerates the section
    assert re.fullmatch(r"## CPU \(\d+ threads\)", lines[0]), lines[0]
    assert re.match(r"\d{4}-\d{2}-\d{2} · torch ", lines[1]), lines[1]
    for part in (f"torch {torch.__version__} ", f"CUDA {torch.version.cuda or 'none'} ",
                 f"cupipe {cupipe.__version__} ", " GB/s (2^16 fp32, read+write)",
                 "median of 3 time.perf_counter reps"):
        assert part in lines[1], (part, lines[1])
    assert lines[2] == f"`python -m cupipe.bench {shlex.join(args)}`\\"
    assert lines[3].startswith("CPU path: ")
    # compact: at most one blank line in a row, one newline at the end
    assert "\n\n\n" not in text and text.endswith("\n") and not text.endswith("\n\n")
    # every printed table, in markdown: the same titles in the same order, columns and cells
    tables, printed = _md_tables(text), _printed_tables(p.stdout)
    assert list(tables) == list(printed) and "suite: reduce [CPU]" in tables
    assert any(t.startswith("stream_copy 2^16") for t in tables)
    for title, (header, rows) in tables.items():
        p_header, p_rows = printed[title]
        assert header == p_header, title
        assert rows and len(rows) == len(p_rows), title
        assert all(len(r) == len(header) for r in rows), (title, rows)
        if title.startswith("suite:"):  # no empty cells: a printed row splits on its padding
            assert rows == [re.split(r"\s{2,}", r.strip()) for r in p_rows], title
    assert "\nNotes:\n" in text and "\n- latency-bound study skipped on the CPU" in text
    assert "FAILED" not in text


def test_markdown_brief_leaves_out_the_detail_tables(capsys, tmp_path):
    md = tmp_path / "brief.md"
    argv = ["--cpu", "--quick", "--no-progress", "--suite", "engine", "--sweep", "--ops",
            "stream_copy", "--markdown", str(md), "--markdown-brief"]
    assert bench.main(argv) == 0
    out = capsys.readouterr().out
    assert "== stream_copy copy width [CPU]" in out and "== sweep: stream_copy" in out
    text = md.read_text(encoding="utf-8")
    assert list(_md_tables(text)) == ["stream_copy 2^16 fp32 (vec 16) [CPU]"]
    assert ("\n- left out (--markdown-brief): stream_copy copy width [CPU]; "
            "sweep: stream_copy 2^16 fp32 [CPU]\n") in text
    assert f"`python -m cupipe.bench {shlex.join(argv)}`" in text


def test_markdown_brief_needs_markdown(capsys):
    with pytest.raises(SystemExit) as e:
        bench.main(["--cpu", "--markdown-brief"])
    assert e.value.code == 2
    assert "--markdown-brief needs --markdown" in capsys.readouterr().err


def test_printed_and_markdown_tables_share_their_cells(capsys, monkeypatch):
    """One formatter: the printed and the markdown table hold the same cells; a mismatch's error
    follows its row when printed and fills an ``error`` column in markdown; a ``|`` is escaped."""
    monkeypatch.delenv("CUPIPE_BENCH_STREAM", raising=False)  # else add() echoes each row
    res = bench.Results()
    res.add(table="t", op="reduce", workload="sum a|b", ms=0.12345, GBps=1234.56,
            vs_copy=float("nan"), bytes=8)
    res.add(table="t", op="reduce", workload="sum c", ms=float("nan"), error="differs")
    printed = res.table_lines("t")
    assert printed[0].split() == ["workload", "ms", "GBps", "vs_copy"]
    assert printed[1].split() == ["sum", "a|b", "0.123", "1234.6", "nan"]
    assert printed[2].split() == ["sum", "c", "nan", "ERROR:", "differs"]
    assert res.markdown_lines("t") == [
        "| workload | ms | GBps | vs_copy | error |",
        "|---|---:|---:|---:|---|",
        "| sum a\\|b | 0.123 | 1234.6 | nan |  |",
        "| sum c | nan |  |  | differs |"]
    res.print_table("t")
    assert capsys.readouterr().out == "\n== t\n" + "\n".join(printed) + "\n"
    res.add(table="u", op="x", workload="w", ms=1.0)
    assert res.markdown_lines("u")[1] == "|---|---:|"     # no error column without an error


def test_bad_ops_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        bench.main(["--cpu", "--ops", "stream_copy,conv9d"])
    assert e.value.code == 2
    assert "conv9d" in capsys.readouterr().err


def test_no_gpu_in_process(monkeypatch, capsys):
    monkeypatch.setattr(cupipe, "cuda_available", lambda: False)
    assert bench.main(["--quick"]) == 0
    assert "no CUDA device" in capsys.readouterr().out


def test_progress_plain_counter(capsys):
    p = bench.Progress(3)
    p.bar = None                                            # the fallback, even if tqdm exists
    for i in range(3):
        p.step(f"case {i}")
        p.done_one()
    p.close()
    err = capsys.readouterr().err
    assert "[1/3] case 0" in err and "[3/3]" in err


@pytest.mark.skipif(not HAS_MPL, reason="matplotlib not installed")
def test_plot_bench_script_parses_the_h200_log(tmp_path):
    log = os.path.join(ROOT, "tests", "data", "bench_h200.txt")
    spec = importlib.util.spec_from_file_location("plot_bench", os.path.join(ROOT, "tools", "plot_bench.py"))
    pb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pb)
    rows, meta = pb.parse_log(open(log).read())
    assert meta["device"] == "NVIDIA H200" and meta["copy_GBps"] == 4137.0
    sync2 = [r for r in rows if r["table"].startswith("stream_copy 2^28") and r["mechanism"] == "sync"
             and r["stages"] == 2]
    assert sync2 and sync2[0]["GBps"] == 3729.0
    suite = [r for r in rows if r.get("workload") == "sum rows (4194304, 64) float32"]
    assert suite and suite[0]["eager_ms"] == 0.957
    fig = tmp_path / "f.png"
    assert pb.main([log, "--stream-copy-figure", str(fig), "--out", str(tmp_path / "all")]) == 0
    assert fig.stat().st_size > 20_000
    assert len(list((tmp_path / "all").glob("*.png"))) == 3


def test_compiled_baselines_are_static_per_case_and_take_the_inputs(monkeypatch):
    """Each suite case compiles its torch.compile baseline from a reset dynamo with static shapes
    (the cases share code objects; automatic dynamic shapes had made every case after the first
    a shape-generic kernel), and calls it with the case's inputs as its argument."""
    import torch

    events = []
    monkeypatch.setattr(torch._dynamo, "reset", lambda: events.append("reset"))

    def fake_compile(fn, **kw):
        events.append(("compile", kw))

        def run(*args):
            events.append(("call", args))
            return fn(*args)
        return run
    monkeypatch.setattr(torch, "compile", fake_compile)
    res = bench.Results()
    b = bench.Bench(True, True, 1, None, True, res)
    b.use_compile = True  # the CPU run skips compile baselines; drive the GPU path's logic
    for task in bench.tasks_suite(b, ["reduce"])[:2]:
        task.run()
    compiles = [e for e in events if isinstance(e, tuple) and e[0] == "compile"]
    assert len(compiles) == 2 and all(kw.get("dynamic") is False and kw.get("fullgraph") for _, kw in compiles)
    assert [e for e in events if e == "reset" or e[0] == "compile"] == ["reset", compiles[0], "reset", compiles[1]]
    calls = [e[1] for e in events if isinstance(e, tuple) and e[0] == "call"]
    assert calls and all(len(a) == 1 and isinstance(a[0], torch.Tensor) for a in calls)
    assert all(r["compiled_ms"] > 0 for r in res.rows), res.rows


def test_layout_sweep_runs_checks_and_plots(tmp_path):
    """--suite layout on the CPU: every row checked against eager (none fails), reductions,
    stencil1d and stencil2d tables, fp32 only with --quick, and its own plot."""
    out = tmp_path / "res"
    assert bench.main(["--cpu", "--quick", "--suite", "layout", "--no-progress", "--out", str(out)]) == 0
    rows = json.loads((out / "results.json").read_text())["rows"]
    tables = {r["table"] for r in rows}
    assert tables == {"layout: reduce [CPU]", "layout: stencil1d [CPU]", "layout: stencil2d [CPU]",
                      "layout: summary [CPU]"}
    summary = {r["workload"]: r for r in rows if r["table"] == "layout: summary [CPU]"}
    rows = [r for r in rows if r["table"] != "layout: summary [CPU]"]
    assert all(not r.get("error") and r["ms"] > 0 for r in rows)
    # the summary: a class per row group, each op's rows once more in "<op>: all"
    state = [r for r in rows if "state op" in r["cls"]]  # issue 48's ops: a mean of their own
    assert {r["workload"].split()[0] for r in state} == {"var", "argmax"}
    assert summary["reduce state ops: all"]["rows"] == len(state)
    for op in ("reduce", "stencil1d", "stencil2d"):
        mine = [r for r in rows if r["op"] == op and r not in state]
        s = summary[f"{op}: all"]
        assert s["rows"] == len(mine) and s["min"] <= s["geomean"] <= s["max"]
        assert s["min"] == min(r["speedup_vs_best"] for r in mine)
        assert s["below_0_95"] == sum(r["speedup_vs_best"] < 0.95 for r in mine)
    assert sum(s["rows"] for k, s in summary.items() if not k.endswith(": all")) == len(rows)
    assert "reduce state op var" in summary and "reduce state op argmax" in summary
    assert "reduce several dims" in summary and "stencil2d cropped" in summary
    names = " ".join(r["workload"] for r in rows)
    for what in ("transposed", "permuted", "channels_last", "cropped", "middle dim", "dims (1, 3)"):
        assert what in names, what
    assert "bf16" not in names
    if plots.have_matplotlib():
        assert (out / "layout_sweep.png").stat().st_size > 0
        assert not (out / "cupipe_vs_pytorch.png").exists()  # the sweep keeps out of the headline plot


def test_only_measures_the_matching_cases(tmp_path, capsys):
    """--only REGEX: the layout sweep's matching rows alone (re.search on the case label), the summary
    over them; a bad pattern is a usage error."""
    out = tmp_path / "res"
    assert bench.main(["--cpu", "--quick", "--suite", "layout", "--no-progress", "--only", r"stencil1d r=2 (first|last)",
                       "--out", str(out)]) == 0
    rows = json.loads((out / "results.json").read_text())["rows"]
    measured = [r for r in rows if r["table"] != "layout: summary [CPU]"]
    assert measured and {r["table"] for r in measured} == {"layout: stencil1d [CPU]"}
    assert all(r["workload"].startswith(("stencil1d r=2 first", "stencil1d r=2 last")) for r in measured)
    summary = {r["workload"]: r for r in rows if r["table"] == "layout: summary [CPU]"}
    assert summary["stencil1d: all"]["rows"] == len(measured) and "reduce: all" not in summary
    with pytest.raises(SystemExit):
        bench.main(["--cpu", "--suite", "layout", "--only", "(unclosed"])
    assert "--only: not a regular expression" in capsys.readouterr().err


def test_merge_makes_one_run_of_the_sweeps_halves(tmp_path, capsys):
    """--merge: two runs' results.json (the layout sweep's fp32 and bf16 halves) written as one,
    their summaries dropped and made again over every row, each run's command and copy_ figure
    kept; runs of different devices or timers refused."""
    def run(name, dtype, copy, speedups, device="NVIDIA H200", timer="median of 30 CUDA-event-timed reps"):
        rows = [dict(table="layout: reduce", op="reduce", cls="reduce middle dim, inner 1024",
                     workload=f"sum {i} {dtype}", ms=1.0, speedup_vs_best=v, vs_copy=0.9) for i, v in enumerate(speedups)]
        rows.append(dict(table="layout: summary", workload="reduce: all", rows=99))  # stale: dropped
        meta = dict(device=device, cpu=False, torch="2.11", cuda="13.0", cupipe="0.1.0", date="2026-11-29",
                    timer=timer, copy_GBps=copy, copy_what="2^28 fp32, read+write",
                    dtype=dtype, command=f"python -m cupipe.bench --suite layout --dtype {dtype}", notes=[], failures=[])
        d = tmp_path / name
        d.mkdir()
        (d / "results.json").write_text(json.dumps(dict(meta=meta, rows=rows)))
        return str(d)

    a = run("a", "float32", 4200.0, [1.0, 0.5])
    b = run("b", "bfloat16", 4300.0, [2.0])
    out, md = tmp_path / "merged", tmp_path / "merged.md"
    assert bench.main(["--merge", a, b + "/results.json", "--out", str(out), "--markdown", str(md)]) == 0
    rows = json.loads((out / "results.json").read_text())["rows"]
    summary = {r["workload"]: r for r in rows if r["table"] == "layout: summary"}
    assert summary["reduce: all"]["rows"] == 3 and summary["reduce: all"]["below_0_95"] == 1
    assert summary["reduce: all"]["min"] == 0.5 and summary["reduce: all"]["max"] == 2.0
    assert abs(summary["reduce: all"]["geomean"] - 1.0) < 1e-12
    text = md.read_text()
    assert "--dtype float32` and `python -m cupipe.bench --suite layout --dtype bfloat16`" in text
    assert "y.copy_(x) 4250 GB/s" in text and "4200 / 4300 GB/s" in text
    other = run("c", "float32", 3000.0, [1.0], device="NVIDIA H100 80GB HBM3")
    with pytest.raises(SystemExit):
        bench.main(["--merge", a, other])
    assert "different devices" in capsys.readouterr().err
    cold = run("d", "bfloat16", 4300.0, [1.0], timer="median of 30 CUDA-event-timed reps, each from a cold L2")
    with pytest.raises(SystemExit):
        bench.main(["--merge", a, cold])
    assert "timed differently" in capsys.readouterr().err


def test_cold_l2_reaches_the_gpu_timer(monkeypatch, capsys, tmp_path):
    """--cold-l2: every GPU timing goes through time_ms with cold_l2=True (the CPU timer has no L2 to
    flush: there the flag is ignored, and the run says so)."""
    seen = []
    monkeypatch.setattr(bench, "time_ms", lambda fn, reps, **kw: seen.append(kw) or 1.0)
    b = object.__new__(bench.Bench)
    b.cpu, b.reps, b.cold_l2 = False, 3, True
    assert b.time(lambda: None) == 1.0 and seen == [dict(cold_l2=True)]
    b.cold_l2 = False
    b.time(lambda: None)
    assert seen[-1] == dict(cold_l2=False)
    assert bench.main(["--cpu", "--quick", "--cold-l2", "--no-progress", "--suite", "none", "--sweep",
                       "--only", "stream_copy", "--out", str(tmp_path / "o")]) == 0
    assert "and so is --cold-l2" in capsys.readouterr().out


def test_steps_suite_checks_against_k_calls_and_plots(tmp_path, monkeypatch):
    """--suite steps on the CPU: each stencil's steps=k row checked against k separate calls, rates
    that agree with the times (k cells a step over ms; R1 from the copy bandwidth), its own plot;
    the GPU path's torch.compile baseline of the k-step loop (driven here with a pass-through
    compile) runs up to k = 8 and equals the k calls."""
    import torch

    out = tmp_path / "res"
    assert bench.main(["--cpu", "--suite", "steps", "--ops", "stencil1d,stencil2d", "--no-progress",
                       "--out", str(out)]) == 0
    data = json.loads((out / "results.json").read_text())
    rows = data["rows"]
    assert {r["table"] for r in rows} == {"steps: stencil1d heat r=1 2^16 fp32 [CPU]",
                                          "steps: stencil2d 5-point heat 128x128 fp32 [CPU]",
                                          "steps: stencil2d 5-point heat, reflect 128x128 fp32 [CPU]",
                                          "steps: stencil2d 3x3 mean box 128x128 fp32 [CPU]"}
    assert not data["meta"]["failures"] and all(not r.get("error") for r in rows)
    assert sorted({r["k"] for r in rows}) == bench.step_counts(bench.Bench(True, False, 1, None, False, bench.Results()))
    cells = {"stencil1d": 1 << 16, "stencil2d": 128 * 128}
    for r in rows:
        assert r["Gupd_s"] * 1e9 == pytest.approx(r["k"] * cells[r["op"]] / (r["ms"] * 1e-3), rel=1e-9)
        assert r["vs_loop"] == pytest.approx(r["loop_ms"] / r["ms"], rel=1e-9) and r["x_R1"] > 0
    if plots.have_matplotlib():
        assert (out / "steps.png").stat().st_size > 0
        assert not (out / "cupipe_vs_pytorch.png").exists()

    def passthrough(fn, **kw):
        assert kw.get("fullgraph") and kw.get("dynamic") is False
        return fn
    monkeypatch.setattr(torch, "compile", passthrough)
    res = bench.Results()
    b = bench.Bench(True, False, 1, None, True, res)
    b.use_compile = True
    for task in bench.tasks_steps(b, ["stencil2d"]):
        task.run()
    assert not res.failures and len(res.rows) == 3 * len(bench.step_counts(b))
    assert all(r["compiled_ms"] > 0 for r in res.rows if r["k"] <= 8)
    # the slices formulation of the 5-point heat step is the op's k-step result
    x = torch.randn(9, 11)
    w = bench._heat_weights(2, 0.2, "cpu")
    taps = [t for t in bench._taps((3, 3), star=True) if w[t] != 0]
    for bd in ("zero", "reflect", "replicate", "circular"):
        y = x
        for _ in range(3):
            y = bench._slicing_taps(y, w, taps, bd)
        torch.testing.assert_close(y, cupipe.stencil2d(x, w, boundary=bd, steps=3), atol=1e-5, rtol=1e-5)
    # a 3-D box and a batch of 2-D planes, padded per boundary, against the op
    w3 = bench._mean_box(3, "cpu")
    x3 = torch.randn(5, 6, 7)
    for bd in ("reflect", "circular"):
        torch.testing.assert_close(bench._slicing_taps(x3, w3, bench._taps((3, 3, 3)), bd),
                                   cupipe.stencil3d(x3, w3, boundary=bd), atol=1e-5, rtol=1e-5)
        xb = torch.randn(2, 9, 11)
        torch.testing.assert_close(bench._slicing_taps(xb, w, taps, bd), cupipe.stencil2d(xb, w, boundary=bd),
                                   atol=1e-5, rtol=1e-5)


def test_interrupt_keeps_what_was_measured(tmp_path, monkeypatch, capsys):
    """Ctrl-C (or `timeout -s INT`) mid-run: the rows measured so far and the final summaries are
    written, a note says how far it got, and the exit status is 130."""
    ran = []

    def row(what):
        return lambda: ran.append(what)

    def stop():
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "tasks_suite", lambda b, ops: [
        bench.Task("first", row("first")), bench.Task("stop", stop), bench.Task("never", row("never")),
        bench.Task("summary", row("summary"), final=True)])
    rc = bench.main(["--cpu", "--quick", "--no-progress", "--suite", "ops", "--ops", "reduce",
                     "--out", str(tmp_path)])
    assert rc == 130
    assert ran == ["first", "summary"]
    doc = json.loads((tmp_path / "results.json").read_text())
    assert any(n.startswith("interrupted: 1 of 4") for n in doc["meta"]["notes"])
    assert "interrupted after 1 of 4" in capsys.readouterr().err
