"""Shared test plumbing: where ../shared is, and when a real GPU is there."""
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("MICROGPT_SHARED", ROOT.parent / "shared"))
FIXTURES = ROOT / "tests" / "fixtures"


def real_gpu_reason():
    """None when kernels can run on a real CUDA GPU, else why not."""
    from numba import config, cuda

    if config.ENABLE_CUDASIM:
        return "NUMBA_ENABLE_CUDASIM=1: kernels run in the CPU simulator"
    try:
        if not cuda.is_available():
            return "no CUDA GPU or driver"
    except Exception as exc:  # a broken driver install reports here
        return f"CUDA unavailable: {exc}"
    return None


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
