"""tools/tf_matmul_sweep.py's command line: a bad option or an --out that cannot be written is one line,
before the sweep (which needs a GPU) starts. Under the simulator a sweep that started would run
for many minutes: the subprocess's timeout fails such a test."""
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def sweep(*args):
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    return subprocess.run([sys.executable, str(ROOT / "tools" / "tf_matmul_sweep.py"), *args], capture_output=True,
                          text=True, env=env, timeout=60)


@pytest.mark.parametrize("args, code, words", [
    (["--out", ""], 2, "empty"),  # ran the sweep, then wrote nothing (an empty --out was false)
    (["--bogus"], 2, "unrecognized arguments"),
    (["--fp-model", "fast"], 2, "invalid choice"),
    (["--out", "{tmp}/file/sweep.json"], 1, "file is a file"),  # a traceback after the whole sweep
    (["--out", "{tmp}"], 1, "it is a folder"),
    (["--out", "{tmp}/file"], 1, "pass --force"),  # written over after the sweep
    (["--kinds", "tf_fc,tf_bogus"], 2, "unknown kind 'tf_bogus'"),
    (["--jobs", "0"], 2, "must be a positive integer"),
    (["--tiles", "2x2/4x8"], 2, "bad tile '2x2/4x8'"),  # a label short of its fields
    (["--tiles", "t_wide,2x2/4x8/64/four/q"], 2, "bad tile '2x2/4x8/64/four/q'"),
    (["--tiles", "0x2/4x8/64/4"], 2, "bad tile '0x2/4x8/64/4'"),  # a tile of no rows: the sweep ran
    (["--kinds", "tf_fc"], 1, "the sweep times kernels"),  # the simulator ran it for minutes; no GPU: "t_wide failed"
])
def test_bad_options_are_one_line_before_the_sweep(tmp_path, args, code, words):
    (tmp_path / "file").write_text("user file")
    done = sweep(*(a.format(tmp=tmp_path) for a in args))
    assert done.returncode == code and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("tf_matmul_sweep: error: ") and words in done.stderr and done.stdout == ""
