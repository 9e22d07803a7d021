"""tools/ncu_summary.py groups Nsight Compute's per-launch CSV rows by kernel name. The rows below
have the columns and the name forms ncu wrote for this project's kernels on the H200."""
import os
import subprocess
import sys

from tests.conftest import ROOT, one_line_failure

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
          '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def row(i, name, ns):
    return (f'"{i}","1","python3","h","{name}","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0",'
            f'"Command line profiler metrics","gpu__time_duration.sum","ns","{ns}"')


def test_groups_launches_by_kernel(tmp_path):
    csv = tmp_path / "prof.csv"
    csv.write_text("\n".join([
        "==PROF== Connected to process 1",  # ncu's own log lines come before the CSV
        HEADER,
        row(0, "tf_ln[v3,cw51cXTLSUwv1sDUaKthqaNgoKmjgOR3W3Cw](Array<float, 1, C, mutable, aligned>, long long)", "17,520"),
        row(1, "tf_ln[v3,cw51cXTLSUwv1sDUaKthqaNgoKmjgOR3W3Cw](Array<float, 1, C, mutable, aligned>, long long)", "2,480"),
        row(2, "tf_numba::matmul::tf_fc[abi:v1](Array<float, 2, C, mutable, aligned>)", "30,000"),
    ]) + "\n")
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "ncu_summary.py"), str(csv)], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out[1].split() == ["tf_fc", "1", "30.0", "30.00", "60.0%"]
    assert out[2].split() == ["tf_ln", "2", "20.0", "10.00", "40.0%"]
    assert out[3].split() == ["all", "kernels", "3", "50.0"]


def test_rejects_a_file_without_metric_rows(tmp_path):
    csv = tmp_path / "empty.csv"
    csv.write_text("==PROF== no kernels were profiled\n")
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "ncu_summary.py"), str(csv)], capture_output=True,
                            text=True)
    assert result.returncode != 0 and "holds no ncu CSV metric rows" in result.stderr
    assert "Traceback" not in result.stderr


def summary(*args):
    return subprocess.run([sys.executable, str(ROOT / "tools" / "ncu_summary.py"), *args], capture_output=True,
                          text=True, timeout=60)


def one_line(done, code, *words):
    one_line_failure(done, code, "ncu_summary: error: ", *words)  # bad data had no `error:`


def test_a_fifo_or_a_device_is_refused(tmp_path):
    # A FIFO blocked the read for ever, /dev/zero (no newline) filled memory.
    os.mkfifo(tmp_path / "fifo")
    one_line(summary(str(tmp_path / "fifo")), 1, "a FIFO")
    one_line(summary("/dev/zero"), 1, "a character device")


def test_bad_csvs_are_one_line(tmp_path):
    cases = {
        "binary.csv": (b'"\xff\xfe\x00' * 100, "not ncu's CSV"),
        "field.csv": ((HEADER + "\n" + row(0, "k" * 200_000, "1") + "\n").encode(), "field limit"),
        "value.csv": ((HEADER + "\n" + row(0, "tf_ln", "n/a") + "\n").encode(), "'n/a' is not a number"),
        "columns.csv": (b'"ID","Metric Value"\n"0","1"\n', "no ncu CSV metric rows"),
        # rows of other metrics: an empty table, exit 0
        "metric.csv": ((HEADER + "\n" + row(0, "tf_ln", "1").replace("gpu__time_duration.sum", "sm__cycles_elapsed.avg")
                        + "\n").encode(), "no gpu__time_duration.sum rows"),
    }
    for name, (content, words) in cases.items():
        (tmp_path / name).write_bytes(content)
        one_line(summary(str(tmp_path / name)), 1, name, words)


def test_usage_errors_are_one_line_exit_2(tmp_path):
    one_line(summary(), 2, "ncu_summary: error: ", "csv", "--help")
    one_line(summary("a.csv", "b.csv"), 2, "unrecognized arguments")
    one_line(summary(""), 2, "empty")
