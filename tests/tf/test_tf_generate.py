"""Greedy generation against the oracle's tokens (tf.c built with tf_validation 0), and the
full-size 128-token run on a GPU."""
import json
import sys
import time
from pathlib import Path

import pytest

from tf_numba import assets
from tf_numba.cli import main
from tf_numba.generate import GENERATE, generate
from tf_numba.model import TFModel
from tests.conftest import FIXTURES

ORACLE = json.loads((FIXTURES / "tf_oracle_tiny_generate.json").read_text())
# The simulator re-runs the forward pass per token at about 0.4 s per token of context;
# two tokens prove the loop (greedy tokens depend only on the prefix), the GPU runs all 24.
CPU_TOKENS = 2


def tiny_model(tiny_assets):
    cfg, tensors = assets.load_model(Path(tiny_assets) / "model.safetensors")
    data = assets.load_data(Path(tiny_assets) / "data", cfg.d_vocab)
    return TFModel(cfg, tensors, ORACLE["fp_model"]), data


def test_generate_tiny_prefix(tiny_assets):
    m, data = tiny_model(tiny_assets)
    assert [int(t) for t in data[: len(ORACLE["prompt"])]] == ORACLE["prompt"]
    assert generate(m, ORACLE["prompt"], CPU_TOKENS) == ORACLE["tokens"][:CPU_TOKENS]


@pytest.mark.gpu
def test_generate_tiny_all(tiny_assets, capsysbinary):
    """The CLI streams the prompt and the oracle's 24 tokens through enc."""
    enc = assets.load_enc(Path(tiny_assets) / "enc", 96)
    assert main(["--assets", str(tiny_assets), "--tokens", str(ORACLE["generate"])]) == 0
    want = b"".join(enc[t] for t in ORACLE["prompt"] + ORACLE["tokens"]) + b"\n"
    assert capsysbinary.readouterr().out == want


@pytest.mark.gpu
def test_generate_gpt2_128(tmp_path_factory):
    """GPT-2 124M-shaped synthetic weights: 128 greedy tokens from a 64-token prompt."""
    from tf_assets import write_synthetic

    from tf_numba.config import GPT2

    out = tmp_path_factory.mktemp("tf_gpt2_gen")
    write_synthetic(out, GPT2)
    cfg, tensors = assets.load_model(out / "model.safetensors")
    data = assets.load_data(out / "data", cfg.d_vocab)
    m = TFModel(cfg, tensors, "fma")
    prompt = [int(t) for t in data[:64]]
    generate(m, prompt, 1)  # compiles the kernels
    t = time.perf_counter()
    tokens = generate(m, prompt, GENERATE)
    seconds = time.perf_counter() - t
    print(f"\ngenerate GPT-2 124M shape: {GENERATE} tokens from 64 in {seconds:.3f} s; first 16: {tokens[:16]}",
          file=sys.stderr)
    assert len(tokens) == GENERATE and all(0 <= t < cfg.d_vocab for t in tokens)
