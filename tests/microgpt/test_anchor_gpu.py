"""On a GPU: the default 1,000-step run on names.txt against microgpt.cu's own log from an H200.

Every printed loss must equal the anchor's to its 4 decimals or differ by at most 2e-3 (cuBLAS's
summation order inside sgemv/sger is not ours), and the 20 samples must be identical.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from microgpt_numba.logcompare import compare_runs

ROOT = Path(__file__).resolve().parents[2]
PYTHONPATH = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))


@pytest.mark.gpu
@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_names_run_matches_microgpt_cu(shared, engine):
    anchor = (shared / "anchors" / "microgpt_cu_names_1000.log").read_bytes()
    result = subprocess.run([sys.executable, "-m", "microgpt_numba", "--input", str(shared / "data" / "names.txt"),
                             "--engine", engine],
                            capture_output=True, cwd=ROOT, timeout=600,
                            env={**os.environ, "PYTHONPATH": PYTHONPATH})
    assert result.returncode == 0, result.stderr.decode()
    summary = compare_runs(result.stdout, anchor)
    print(summary)
    assert summary["header_identical"] and summary["same_steps"] and summary["steps"] == 1000, summary
    assert summary["within_tolerance"], summary
    assert summary["samples_identical"], summary
