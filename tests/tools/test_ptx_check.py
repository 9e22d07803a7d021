"""The kernels that run in large blocks compile for sm_90 and fit their blocks (tools/ptx_check.py).

The simulator never compiles a kernel, so this is what catches, on a machine without a GPU, a
kernel that would not launch on one. It needs the CUDA toolkit's ptxas and libdevice; without
them it skips.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

CUDA_HOME = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))


@pytest.mark.slow
def test_large_block_kernels_fit_their_blocks():
    for need in (CUDA_HOME / "bin" / "ptxas", CUDA_HOME / "nvvm" / "libdevice" / "libdevice.10.bc"):
        if not need.is_file():
            pytest.skip(f"{need} is missing (the CUDA toolkit; set CUDA_HOME)")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["CUDA_HOME"] = str(CUDA_HOME)
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "ptx_check.py")], capture_output=True, text=True,
                            env=env, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == "ok"


def run_ptx_check(*args, **env):
    """ptx_check.py outside the simulator (it refuses that first), with env's changes."""
    environ = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    return subprocess.run([sys.executable, str(ROOT / "tools" / "ptx_check.py"), *args], capture_output=True,
                          text=True, env={**environ, **env}, timeout=120)


def test_a_missing_toolkit_is_one_line():
    # A 29-line FileNotFoundError from inside Numba, before.
    done = run_ptx_check(CUDA_HOME="/nonexistent")
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert "CUDA_HOME=/nonexistent" in done.stderr and "/nonexistent/bin/ptxas" in done.stderr
    assert done.stdout == ""


def test_an_unknown_option_is_a_usage_error():
    done = run_ptx_check("--bogus", CUDA_HOME="/nonexistent", NUMBA_ENABLE_CUDASIM="1")  # nothing compiles
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("ptx_check: error: ") and "--bogus" in done.stderr
