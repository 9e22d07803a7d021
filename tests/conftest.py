"""Shared test plumbing: the project's paths, ../shared (seeds, data, anchors), when a real GPU is
there, and the check of a tool's one-line failure. Test modules import ROOT, FIXTURES, SHARED and
one_line_failure from here; `tools/` is on sys.path through pyproject's pytest settings."""
import os
from pathlib import Path

import pytest

from cudakit.gpu import unavailable_reason

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
SHARED = Path(os.environ.get("MICROGPT_SHARED", ROOT.parent / "shared"))
# A subprocess running the project (python -m microgpt_numba, a tool) finds the packages here.
PYTHONPATH = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))


def one_line_failure(done, code, prefix, *words):
    """A tool's run (subprocess.run's result) exited with `code` and wrote one line to stderr,
    starting with `prefix` and holding every word, with no traceback."""
    assert done.returncode == code and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(prefix) and "Traceback" not in done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


def real_gpu_reason():
    """None when kernels can run on a real CUDA GPU, else why not."""
    return unavailable_reason(simulator_ok=False)


def pytest_collection_modifyitems(config, items):
    reason = real_gpu_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"needs a real GPU ({reason})")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shared():
    """The ../shared folder (seeds, data, anchors); tests that need it skip without it."""
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} is not here (seeds, data and anchors live there)")
    return SHARED
