"""tools/tf_decode_profile.py's command line: a bad option or unreadable assets is one line and a
non-zero exit, before any GPU work."""
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


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
