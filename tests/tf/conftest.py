"""tf tests: tiny synthetic assets, and the seed tf.c with clang."""
import shutil

import pytest

from tf_assets import TINY_INPUT_SIZE, write_synthetic
from tf_numba.config import TINY


@pytest.fixture(scope="session")
def tiny_assets(tmp_path_factory):
    """model.safetensors, enc and data of the tiny preset (what the tiny fixtures were made from)."""
    out = tmp_path_factory.mktemp("tf_tiny")
    write_synthetic(out, TINY)
    return out


@pytest.fixture(scope="session")
def tiny_input_size():
    return TINY_INPUT_SIZE


@pytest.fixture(scope="session")
def tf_c(shared):
    """The seed tf.c, when ../shared and clang are both here."""
    path = shared / "seeds" / "tf.c"
    if not path.is_file():
        pytest.skip(f"{path} is not here")
    if shutil.which("clang") is None:
        pytest.skip("clang is not installed (apt-get install clang); the oracle cannot be rebuilt")
    return path


@pytest.fixture(scope="session")
def bpe_file(shared):
    """GPT-2's BPE ranks in tiktoken's format, from ../shared/data."""
    path = shared / "data" / "gpt2.tiktoken"
    if not path.is_file():
        pytest.skip(f"{path} is not here")
    return path
