"""The README's simulator examples work as written (they run under NUMBA_ENABLE_CUDASIM=1, each
with its one-line output checked), so they cannot rot."""
import os
import re
import shlex
import subprocess
import sys

import pytest

from cudakit.gpu import unavailable_reason
from tests.conftest import PYTHONPATH, ROOT

BLOCK = re.compile(r"<!-- simulator examples[^>]*-->\s*```bash\n(.*?)```", re.S)


def examples():
    commands = BLOCK.search((ROOT / "README.md").read_text()).group(1).strip().splitlines()
    assert commands[0] == "export NUMBA_ENABLE_CUDASIM=1"
    return commands[1:]


def test_the_readme_has_simulator_examples():
    assert [c.split()[:3] for c in examples()] == [["python", "-m", "microgpt_numba"],
                                                   ["python", "tools/tf_assets.py", "synth"],
                                                   ["python", "-m", "tf_numba"]]


@pytest.mark.slow
@pytest.mark.skipif(unavailable_reason(simulator_ok=False) is None,
                    reason="the simulator examples run in the simulator suite (CI); on a GPU the GPU tests run")
def test_simulator_examples_run(tmp_path):
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "NUMBA_ENABLE_CUDASIM": "1"}
    outputs = []
    for command in examples():
        argv = [sys.executable if a == "python" else a.replace("/tmp/tiny", str(tmp_path / "tiny"))
                for a in shlex.split(command)]
        result = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, timeout=900)
        assert result.returncode == 0, (command, result.stderr.decode())
        outputs.append(result.stdout)
    microgpt, _, tf = outputs
    assert re.search(rb"step    1 /    1 \| loss \d\.\d{4}", microgpt) and b"sample  1: " in microgpt
    assert tf.endswith(b"39 of 39 checkpoints match\n")
