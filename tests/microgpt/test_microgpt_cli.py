"""The command line: output lines, and one-line errors for bad input."""
import os
import re
import subprocess
import sys

import pytest

from microgpt_numba.cli import USAGE, main
from tests.conftest import PYTHONPATH, ROOT



def run_cli(args, **env):
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, **env}
    return subprocess.run([sys.executable, "-m", "microgpt_numba", *args], capture_output=True, env=env,
                          cwd=ROOT, timeout=300)


@pytest.mark.parametrize("args, message", [
    (["--input", "/nonexistent/input.txt"], "does not exist"),
    (["--steps", "0"], "--steps must be a positive integer"),
    (["--steps", "-3"], "--steps must be a positive integer"),
    (["--steps", "abc"], "--steps must be a positive integer"),
    (["--temperature", "0"], "--temperature must be a number > 0"),
    (["--samples", "-1"], "--samples must be a non-negative integer"),
    (["--bogus"], "unknown option '--bogus'"),
    (["--steps"], "--steps needs a value"),
    (["--engine", "turbo"], "--engine must be one of fast, reference"),
])
def test_bad_input_is_one_line_and_exit_1(args, message, capsys):
    assert main(args) == 1
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and message in captured.err and "Traceback" not in captured.err
    assert captured.out == ""


def test_file_without_documents(tmp_path, capsys):
    blank = tmp_path / "blank.txt"
    blank.write_bytes(b"\n\r\n")
    assert main(["--input", str(blank)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no non-empty line" in err


def test_unknown_flag_exit_status_from_python_m():
    result = run_cli(["--bogus"])
    assert result.returncode == 1 and result.stdout == b""
    assert result.stderr.decode().splitlines() == [f"microgpt_numba: unknown option '--bogus'; {USAGE}"]


def test_no_cuda_gpu_or_driver():
    """Without the simulator and with no visible device, the CLI refuses before doing any work."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    result = subprocess.run([sys.executable, "-m", "microgpt_numba", "--steps", "1"], capture_output=True,
                            env={**env, "PYTHONPATH": PYTHONPATH, "CUDA_VISIBLE_DEVICES": ""}, cwd=ROOT, timeout=120)
    lines = result.stderr.decode().splitlines()
    assert result.returncode == 1 and result.stdout == b""
    assert len(lines) == 1 and "no CUDA GPU or driver found" in lines[0] and "NUMBA_ENABLE_CUDASIM=1" in lines[0]


@pytest.fixture(scope="module")
def piped_runs(tmp_path_factory):
    """Both engines on a tiny file: 1 step, 1 sample, stdout a pipe."""
    path = tmp_path_factory.mktemp("cli") / "tiny.txt"
    path.write_bytes(b"ab\r\nba\n\nabc\n")
    runs = {}
    for engine in ("fast", "reference"):
        result = run_cli(["--input", str(path), "--steps", "1", "--samples", "1", "--temperature", "0.9",
                          "--engine", engine])
        assert result.returncode == 0, result.stderr
        runs[engine] = result.stdout
    return path, runs


def test_output_lines_when_piped(piped_runs):
    path, runs = piped_runs
    lines = runs["fast"].split(b"\n")
    num_params = 2 * 4 * 16 + 16 * 16 + 4 * 16 * 16 + 2 * 64 * 16  # wte, lm_head (vocab 4), wpe, attention, mlp
    assert lines[:4] == [f"corpus: {path}".encode(), b"num docs: 3", b"vocab size: 4", b"num params: %d" % num_params]
    assert re.fullmatch(rb"step    1 /    1 \| loss \d\.\d{4}", lines[4])
    assert lines[5:7] == [b"", b"--- inference (new, hallucinated names) ---"]
    assert re.fullmatch(rb"sample  1: [abc]*", lines[7]) and lines[8:] == [b""]


def test_engines_print_the_same_run(piped_runs):
    _, runs = piped_runs
    assert runs["fast"] == runs["reference"]
