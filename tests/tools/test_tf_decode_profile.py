"""tools/tf_decode_profile.py's command line: a bad option or unreadable assets is one line and a
non-zero exit, before any GPU work."""
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, real_gpu_reason


@pytest.mark.parametrize("args, code, words", [
    (["--assets", "{tmp}", "--bogus"], 2, "unrecognized arguments"),
    (["--assets", "{tmp}", "--tokens", "0"], 2, "--tokens"),
    (["--assets", "{tmp}"], 1, "model.safetensors"),  # an empty folder: no weights
])
def test_bad_input_is_one_line(tmp_path, args, code, words):
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "tf_decode_profile.py"),
                           *(a.format(tmp=tmp_path) for a in args)], capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode == code and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("tf_decode_profile: error: ") and words in done.stderr and done.stdout == ""


@pytest.fixture
def tiny(tmp_path):
    from tf_assets import write_synthetic
    from tf_numba.config import TINY

    write_synthetic(tmp_path / "tiny", TINY)  # d_seq 32
    return tmp_path / "tiny"


def profile(tiny, *args, sim=True):
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    return subprocess.run([sys.executable, str(ROOT / "tools" / "tf_decode_profile.py"), "--assets", str(tiny), *args],
                          capture_output=True, text=True, env={**env, "NUMBA_ENABLE_CUDASIM": "1"} if sim else env,
                          timeout=60)


def test_tokens_past_the_context_are_a_usage_error(tiny):
    # a traceback from the token buffer: the 64-token prompt and --tokens must fit d_seq
    done = profile(tiny, "--tokens", "32")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("tf_decode_profile: error: --tokens 32") and "1 to 31" in done.stderr


def test_no_gpu_is_one_line(tiny):
    if real_gpu_reason() is None:
        pytest.skip("a CUDA GPU is here")
    done = profile(tiny, sim=False)  # Numba's traceback of 41 lines
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("tf_decode_profile: error: ") and "GPU" in done.stderr and done.stdout == ""
