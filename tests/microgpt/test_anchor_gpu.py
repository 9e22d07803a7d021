"""On a GPU: names.txt runs of 1,000, 5,000 and 20,000 steps against microgpt.cu's own logs from
an H200 (the H200 image's CUDA 13 cuBLAS; docs/microgpt.md, "Agreement over long runs").

Every printed loss must equal the anchor's, and every sample. The two engines (the reference one
replaying CUDA graphs, the fast one in persistent kernels) compute the same floats, so their
outputs must be identical byte for byte. And no library warning reaches a user's terminal.
"""
import os
import subprocess
import sys

import pytest

from logcompare import compare_runs
from tests.conftest import PYTHONPATH, ROOT

RUNS = {}
LENGTHS = [1000, 5000, 20000]


def names_run(shared, engine, steps):
    if (engine, steps) not in RUNS:
        result = subprocess.run([sys.executable, "-m", "microgpt_numba", "--input", str(shared / "data" / "names.txt"),
                                 "--engine", engine, "--steps", str(steps)],
                                capture_output=True, cwd=ROOT, timeout=600,
                                env={**os.environ, "PYTHONPATH": PYTHONPATH})
        assert result.returncode == 0, result.stderr.decode()
        RUNS[engine, steps] = result
    return RUNS[engine, steps]


@pytest.mark.gpu
@pytest.mark.parametrize("steps", LENGTHS)
@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_names_run_matches_microgpt_cu(shared, engine, steps):
    anchor = (shared / "anchors" / f"microgpt_cu_names_{steps}.log").read_bytes()
    summary = compare_runs(names_run(shared, engine, steps).stdout, anchor)
    print(engine, summary)
    assert summary["header_identical"] and summary["same_steps"] and summary["steps"] == steps, summary
    assert summary["losses_equal"] == steps, summary
    assert summary["samples_identical"], summary


@pytest.mark.gpu
@pytest.mark.parametrize("steps", LENGTHS)
def test_engines_print_the_same_run(shared, steps):
    assert names_run(shared, "fast", steps).stdout == names_run(shared, "reference", steps).stdout


@pytest.mark.gpu
def test_default_command_prints_no_warning():
    """The default run (the names package's corpus) on a GPU: nothing on stderr but our own lines."""
    result = subprocess.run([sys.executable, "-m", "microgpt_numba", "--steps", "20", "--samples", "2"],
                            capture_output=True, cwd=ROOT, timeout=180, env={**os.environ, "PYTHONPATH": PYTHONPATH})
    assert result.returncode == 0, result.stderr.decode()
    err = result.stderr.decode()
    assert "Warning" not in err and "warn" not in err.lower(), err
