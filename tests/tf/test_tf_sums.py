"""tf.c's 39 checkpoints, bit for bit against the oracle's fixtures (tf.c compiled and run on the
same synthetic weights): the tiny model in the simulator, GPT-2 124M's shape on a real GPU."""
import hashlib
import json
import sys
from pathlib import Path

import pytest

from tf_numba import assets
from tf_numba.checkpoints import TF_C_SUMS, c_hex, checkpoints
from tf_numba.config import GPT2
from tf_numba.model import TFModel
from tf_numba.validation import dump_time
from tf_numba.training import fixture_expected, run_step
from tests.conftest import FIXTURES



def check_sums(assets_dir, fixture):
    """Run the training step on assets_dir and compare every checkpoint's exact bits."""
    cfg, tensors = assets.load_model(Path(assets_dir) / "model.safetensors")
    data = assets.load_data(Path(assets_dir) / "data", cfg.d_vocab)
    T, fp_model, expected = fixture_expected(fixture, cfg)
    validation = run_step(TFModel(cfg, tensors, fp_model), data, T)
    # hex strings: exact bits, and a readable diff when one differs
    assert [(l, n, c_hex(s)) for l, n, s in validation.sums] == [(l, n, c_hex(s)) for l, n, s in expected]
    return validation


@pytest.mark.slow
@pytest.mark.parametrize("fp_model", ["fma", "nofma"])
def test_sums_tiny(tiny_assets, fp_model):
    check_sums(tiny_assets, FIXTURES / f"tf_oracle_tiny_{fp_model}.json")


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            h.update(chunk)
    return h.hexdigest()


@pytest.fixture(scope="module")
def gpt2_assets(tmp_path_factory):
    """GPT-2 124M-shaped synthetic assets, regenerated here (548 MB do not travel) and checked
    to be the bytes the oracle ran on."""
    from tf_assets import write_synthetic

    out = tmp_path_factory.mktemp("tf_gpt2")
    write_synthetic(out, GPT2)
    made = json.loads((FIXTURES / "tf_oracle_gpt2_fma.json").read_text())["assets"]
    for name in ("model.safetensors", "enc", "data"):
        assert sha256(out / name) == made[f"sha256({name})"], f"{name} differs from the oracle's"
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("fp_model", ["fma", "nofma"])
def test_sums_gpt2(gpt2_assets, fp_model):
    validation = check_sums(gpt2_assets, FIXTURES / f"tf_oracle_gpt2_{fp_model}.json")
    for name, stages, total in validation.timings:
        dump_time(f"{name}, {fp_model}, GPT-2 124M shape, T=64", stages, total, sys.stdout)


def test_tf_c_constants_sums_match_the_seed_fixture():
    """Our copy of tf.c's 39 constants (the default --validate expectations) equals the oracle
    helper's record of them, label by label."""
    path = FIXTURES / "tf_c_constants.json"
    if not path.is_file():
        pytest.skip(f"{path.name} is not committed yet")
    fixture = json.loads(path.read_text())
    assert [(c["label"], c["count"]) for c in fixture["checkpoints"]] == checkpoints(GPT2)
    assert [float.fromhex(c["sum"]) for c in fixture["checkpoints"]] == TF_C_SUMS


@pytest.mark.slow
@pytest.mark.parametrize("shape, input_size, fp_model", [
    ((80, 16, 32, 2, 1), 4, "fma"),  # one layer: checkpoint 36 repeats checkpoint 14
    ((70, 16, 12, 4, 2), 9, "nofma"),  # heads 3 wide, a vocabulary and widths off every tile
], ids=["one_layer", "odd_heads"])
def test_sums_live_oracle(tf_c, tmp_path, shape, input_size, fp_model):
    """Other shapes, read from the weights alone (d_vocab, d_seq, d_model, n_heads, n_layers): the
    seed tf.c, built and run here by the oracle tool, against the port: all 39 sums and the greedy
    tokens."""
    import tf_oracle
    from tf_assets import write_synthetic

    from tf_numba.config import Config
    from tf_numba.generate import generate

    cfg = Config(*shape)
    write_synthetic(tmp_path, cfg, n_tokens=input_size + 4)
    record, generation = tf_oracle.run_oracle(tf_c, tmp_path, fp_model, input_size=input_size, generate=2)
    fixture = tmp_path / "oracle.json"
    fixture.write_text(json.dumps(record))
    check_sums(tmp_path, fixture)

    got_cfg, tensors = assets.load_model(tmp_path / "model.safetensors")
    assert got_cfg == cfg
    assert generate(TFModel(cfg, tensors, fp_model), generation["prompt"], 2) == generation["tokens"]
