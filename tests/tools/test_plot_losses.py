"""tools/plot_losses.py: it reads --loss-log CSVs and stdout logs (microgpt.cu's \\r or \\n lines),
draws a PNG when matplotlib is there, never replaces a picture without --force, and says in one
line what is wrong. tools/bench.py's microgpt entry saves the picture, or notes why not."""
import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

import bench
import plot_losses
from tests.conftest import ROOT

LOSSES = [np.float32(x) for x in (3.2389, 3.11241, 2.9)]


@pytest.fixture
def csv_log(tmp_path):
    path = tmp_path / "ours.csv"
    rows = ["step,loss,loss_hex"] + ["%d,%.4f,%s" % (i + 1, x, float(x).hex()) for i, x in enumerate(LOSSES)]
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture
def stdout_log(tmp_path):
    """microgpt.cu's stdout: header lines, the step lines ending in \\r, the samples."""
    path = tmp_path / "microgpt_cu.log"
    steps = b"".join(b"step %4d / %4d | loss %.4f\r" % (i + 1, len(LOSSES), x) for i, x in enumerate(LOSSES))
    path.write_bytes(b"num docs: 3\nvocab size: 4\nnum params: 4192\n" + steps +
                     b"\n--- inference (new, hallucinated names) ---\nsample  1: ab\n")
    return path


def test_reads_a_loss_log_csv_exactly(csv_log):
    steps, losses = plot_losses.read_log(csv_log)
    assert steps == [1, 2, 3] and losses == [float(x) for x in LOSSES]  # the float32s, not the 4 decimals


def test_reads_a_csv_without_the_exact_column(tmp_path):
    path = tmp_path / "short.csv"
    path.write_text("step,loss\n1,3.2389\n2,3.1124\n")
    assert plot_losses.read_log(path) == ([1, 2], [3.2389, 3.1124])


def test_reads_a_stdout_log_with_carriage_returns(stdout_log):
    assert plot_losses.read_log(stdout_log) == ([1, 2, 3], [3.2389, 3.1124, 2.9])


def test_reads_newline_separated_step_lines():
    text = b"corpus: x\nstep    1 / 1000 | loss 3.2389\nstep    2 / 1000 | loss 3.1124\n"
    steps, losses = plot_losses.parse_stdout(text)
    assert steps == [1, 2] and losses == [3.2389, 3.1124]


def test_reads_the_anchor_log(shared):
    steps, losses = plot_losses.read_log(shared / "anchors" / "microgpt_cu_names_1000.log")
    assert steps == list(range(1, 1001)) and losses[0] == 3.2389


def test_draws_a_png(tmp_path, csv_log, stdout_log, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "losses.png"
    assert plot_losses.main([str(stdout_log), str(csv_log), "-o", str(out), "--smooth", "2"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert capsys.readouterr().out == f"{out}\n"


def test_refuses_to_overwrite_without_force(tmp_path, csv_log, capsys):
    out = tmp_path / "losses.png"
    out.write_bytes(b"earlier")
    assert plot_losses.main([str(csv_log), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("plot_losses: error: ") and "--force" in err
    assert out.read_bytes() == b"earlier"


def test_force_replaces(tmp_path, csv_log):
    pytest.importorskip("matplotlib")
    out = tmp_path / "losses.png"
    out.write_bytes(b"earlier")
    assert plot_losses.main([str(csv_log), "-o", str(out), "--force"]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_never_replaces_a_log_it_draws(tmp_path, csv_log, capsys):
    log = tmp_path / "in.csv"
    log.write_bytes(csv_log.read_bytes())
    assert plot_losses.main([str(log), "-o", str(log), "--force"]) == 1  # drew the PNG over its own log
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is one of the logs" in err
    assert log.read_bytes() == csv_log.read_bytes()


def test_dollars_in_a_title_or_a_file_name_are_drawn_as_written(tmp_path, csv_log, capsys):
    pytest.importorskip("matplotlib")
    log = tmp_path / "run$\\frac$.csv"  # matplotlib's math mode failed the picture with a traceback
    log.write_bytes(csv_log.read_bytes())
    out = tmp_path / "losses.png"
    assert plot_losses.main([str(log), "-o", str(out), "--title", "$\\frac$ and $x^2$"]) == 0, capsys.readouterr().err
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_two_runs_in_one_log_are_refused(tmp_path, csv_log, stdout_log, capsys):
    for log, data in (("twice.csv", csv_log.read_bytes() + csv_log.read_bytes().split(b"\n", 1)[1]),
                      ("twice.log", stdout_log.read_bytes() * 2)):
        (tmp_path / log).write_bytes(data)
        assert plot_losses.main([str(tmp_path / log), "-o", str(tmp_path / "x.png")]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "goes back from step" in err and "more than one run" in err, err


def test_without_matplotlib_one_line(tmp_path, csv_log, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    assert plot_losses.main([str(csv_log), "-o", str(tmp_path / "x.png")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "matplotlib is not installed" in err and "[plot]" in err
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("content, words", [
    (b"nothing to see\n", "holds no losses"),
    (b"step,loss\n1,abc\n", "line 2"),
])
def test_a_log_without_losses(tmp_path, capsys, content, words):
    path = tmp_path / "bad.log"
    path.write_bytes(content)
    assert plot_losses.main([str(path), "-o", str(tmp_path / "x.png")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err


def test_usage_errors_exit_2(tmp_path, csv_log, capsys):
    assert plot_losses.main([str(csv_log)]) == 2  # no -o
    assert plot_losses.main([str(csv_log), "-o", str(tmp_path / "x.png"), "--smooth", "0"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("plot_losses: error: ") for line in err)


def test_bench_saves_the_picture_or_notes_why_not(tmp_path, stdout_log, capsys):
    """bench's microgpt entry draws losses_STEPS.png from the runs' logs in --out."""
    logs = {"microgpt_cu_3.log": stdout_log.read_bytes(), "numba-default_3.log": stdout_log.read_bytes()}
    for name, data in logs.items():
        (tmp_path / name).write_bytes(data)
    programs = {"microgpt.cu": ["microgpt_cu"], "numba-default": ["python", "-m", "microgpt_numba"]}
    plots = bench.loss_plots(programs, [3], tmp_path)
    if importlib.util.find_spec("matplotlib") is None:
        assert "matplotlib is not installed" in plots["skipped"]
        assert "no loss picture" in capsys.readouterr().err
        return
    assert plots == {"3": "losses_3.png"} and (tmp_path / "losses_3.png").read_bytes()[:4] == b"\x89PNG"
    assert "![losses](losses_3.png)" in bench.microgpt_markdown({"nvcc": "nvcc", "nvcc_s": 1, "runs": {},
                                                                 "loss_plots": plots})


def test_a_fifo_or_a_device_is_refused(tmp_path, csv_log):
    # A FIFO blocked the read (or, as -o, the write) for ever and /dev/zero filled memory: in a
    # subprocess, so that a hang fails the test.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for args, kind in (([str(fifo), "-o", str(tmp_path / "x.png")], "a FIFO"),
                       (["/dev/zero", "-o", str(tmp_path / "x.png")], "a character device"),
                       ([str(csv_log), "-o", str(fifo), "--force"], "a FIFO")):
        done = subprocess.run([sys.executable, str(ROOT / "tools" / "plot_losses.py"), *args], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 1 and done.stderr.count("\n") == 1 and kind in done.stderr, done.stderr
    assert not (tmp_path / "x.png").exists()


def test_a_csv_field_over_the_csv_limit_is_one_line(tmp_path, capsys):
    path = tmp_path / "big.csv"
    path.write_text("step,loss\n1," + "9" * 200_000 + "\n")
    assert plot_losses.main([str(path), "-o", str(tmp_path / "x.png")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "big.csv" in err and "line 2" in err and "field limit" in err, err


def test_paths_are_checked_before_the_logs_are_read(tmp_path, csv_log, capsys):
    (tmp_path / "file").write_text("user file")
    assert plot_losses.main([str(csv_log), "-o", ""]) == 2  # Path('') is the current folder
    assert plot_losses.main([str(csv_log), "-o", str(tmp_path / "file" / "x.png")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("plot_losses: error: ") for line in err)
    assert "empty" in err[0] and "file is a file" in err[1]


def test_an_out_in_a_missing_folder_is_made(tmp_path, csv_log):
    # unwritable() lets missing folders through, as the tools make them; this one failed on them after drawing
    pytest.importorskip("matplotlib")
    out = tmp_path / "new" / "deeper" / "losses.png"
    assert plot_losses.main([str(csv_log), "-o", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
