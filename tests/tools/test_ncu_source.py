"""tools/ncu_source.py splits one launch's SASS, from Nsight Compute's source page, at its barriers
and exits, and shares out the samples and executed instructions. The rows below have the layout
ncu wrote for tf_attn on the H200 (a kernel-name line, the header, a row an instruction; the real
header has some 40 columns)."""
import os
import subprocess
import sys

from tests.conftest import ROOT, one_line_failure

HEADER = ('"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)",'
          '"# Samples","Instructions Executed"')


def row(address, sass, samples, executed):
    return f'"{address}","{sass}","{samples}","0","{samples}","{executed}"'


def source(*args):
    return subprocess.run([sys.executable, str(ROOT / "tools" / "ncu_source.py"), *args], capture_output=True,
                          text=True, timeout=60)


def test_splits_at_barriers_and_exits(tmp_path):
    csv = tmp_path / "src.csv"
    csv.write_text("\n".join([
        "==PROF== Connected to process 1",
        '"Kernel Name","tf_numba::kernels::tf_attn[abi:v60](Array<float, (int)2, C, mutable, aligned>)",',
        HEADER,
        row("0x10", "LDC R1, c[0x0][0x28]", 10, 1536),
        row("0x20", "DEPBAR.LE SB0, 0x0", 0, 1536),  # a scoreboard wait, not a block barrier
        row("0x30", "BAR.SYNC.DEFER_BLOCKING 0x0", 30, 1536),
        row("0x40", "FSEL R7, R7, R54, P3", 40, "1,536"),
        row("0x50", "@!P0  EXIT", 20, 1536),
        row("0x60", "NOP", 0, 0),
    ]) + "\n")
    out = source(str(csv), "--top", "2")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "6 SASS instructions, 100 samples, 7680 executed"
    assert lines[2].split() == ["0x10-0x30", "40.0%", "60.0%", "3", "BAR.SYNC.DEFER_BLOCKING", "0x0"]
    assert lines[3].split() == ["0x40-0x50", "60.0%", "40.0%", "2", "@!P0", "EXIT"]
    assert lines[4].split() == ["0x60-0x60", "0.0%", "0.0%", "1", "NOP"]
    assert lines[6].split()[:2] == ["0x40", "40.0%"] and lines[7].split()[:2] == ["0x30", "30.0%"]


def one_line(done, code, *words):
    one_line_failure(done, code, "ncu_source: error: ", *words)  # bad data had no `error:`


def test_bad_inputs_are_one_line(tmp_path):
    cases = {
        "details.csv": ('"ID","Metric Name","Metric Value"\n"0","gpu__time_duration.sum","1"\n', "holds no SASS rows"),
        "header_only.csv": (HEADER + "\n", "holds no SASS rows"),
        "counts.csv": (HEADER + "\n" + row("0x10", "FADD R1, R2, R3", "n/a", 1) + "\n", "are not numbers"),
        "binary.csv": ('"\udcff' * 10, "not ncu's CSV"),
    }
    for name, (content, words) in cases.items():
        (tmp_path / name).write_bytes(content.encode("utf-8", "surrogateescape"))
        one_line(source(str(tmp_path / name)), 1, name, words, "--page source")
    one_line(source(str(tmp_path / "missing.csv")), 1, "cannot read")
    os.mkfifo(tmp_path / "fifo")
    one_line(source(str(tmp_path / "fifo")), 1, "a FIFO")


def test_usage_errors_are_one_line_exit_2():
    one_line(source(), 2, "ncu_source: error: ", "csv")
    one_line(source("a.csv", "--top", "x"), 2, "--top")
    one_line(source("a.csv", "--top", "-1"), 2, "--top", "0 or more")  # listed nothing, exit 0
