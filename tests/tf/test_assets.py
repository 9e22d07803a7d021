"""tools/tf_assets.py: the synthetic generator, enc and data files, safetensors layout, CLI."""
import json
import math
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import load_file

import tf_assets
from tf_assets import (GPT2_ENC_SIZE, ToolError, decode_data, decode_enc, encode_data, encode_enc, hash64,
                       read_header, synthetic_values, tensor_shapes, tf_offset_size, write_synthetic)
from tf_numba.config import TINY, Config
from tests.conftest import ROOT

TOOL = str(ROOT / "tools" / "tf_assets.py")
M64 = (1 << 64) - 1


def splitmix64_finalizer(key, index):
    """The hash in plain Python integers, to check numpy's wrapping uint64 arithmetic."""
    z = (((key << 32) | index) + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def test_hash_is_splitmix64_and_reproducible():
    index = np.array([0, 1, 2, 12345, 38_597_375, 2**32 - 1], dtype=np.uint64)
    key = tf_assets.tensor_key("h.11.mlp.c_fc.weight")
    first, second = hash64(key, index), hash64(key, index)
    assert np.array_equal(first, second)
    assert [int(z) for z in first] == [splitmix64_finalizer(key, int(i)) for i in index]
    # splitmix64's first output from state 0, a published value.
    assert int(hash64(0, np.array([0], dtype=np.uint64))[0]) == 0xE220A8397B1DCDAF


def test_values_do_not_depend_on_chunking():
    whole = synthetic_values("wte.weight", 0, 1000, TINY)
    parts = np.concatenate([synthetic_values("wte.weight", s, 250, TINY) for s in range(0, 1000, 250)])
    assert whole.dtype == np.float32 and np.array_equal(whole.view(np.uint32), parts.view(np.uint32))


def test_tiny_files_have_the_recorded_digests(tiny_assets):
    # The digests the tiny oracle fixtures were made from: the generator must not drift.
    recorded = json.loads((ROOT / "tests" / "fixtures" / "tf_oracle_tiny_fma.json").read_text())["assets"]
    for name in ("model.safetensors", "enc", "data"):
        assert tf_assets.sha256(tiny_assets / name) == recorded[f"sha256({name})"], name


def test_safetensors_library_loads_the_tiny_file(tiny_assets):
    tensors = load_file(tiny_assets / "model.safetensors")
    shapes = tensor_shapes(TINY)
    assert {k: list(v.shape) for k, v in tensors.items()} == shapes
    assert all(v.dtype == np.float32 for v in tensors.values())
    S = TINY.d_seq
    for h in range(TINY.n_layers):
        assert np.array_equal(tensors[f"h.{h}.attn.bias"][0, 0], np.tril(np.ones((S, S), np.float32)))
    wte = tensors["wte.weight"].ravel()
    assert np.array_equal(wte, synthetic_values("wte.weight", 0, wte.size, TINY))
    # GPT-2-like scales: layernorm weights near 1, projections near 1/sqrt(fan-in).
    assert abs(tensors["h.0.ln_1.weight"].mean() - 1) < 0.05
    assert abs(tensors["h.0.mlp.c_fc.weight"].std() - 1 / math.sqrt(TINY.d_model)) < 0.01


def test_tf_c_key_search_finds_every_tensor(tiny_assets):
    header, json_raw = read_header(tiny_assets / "model.safetensors")
    looked_up = ["wte", "wpe", "ln_f.bias", "ln_f.weight"] + [
        f"h.{h}.{part}" for h in range(TINY.n_layers) for part in (
            "ln_1.bias", "ln_1.weight", "attn.c_attn.bias", "attn.c_attn.weight", "attn.c_proj.bias",
            "attn.c_proj.weight", "ln_2.bias", "ln_2.weight", "mlp.c_fc.bias", "mlp.c_fc.weight",
            "mlp.c_proj.bias", "mlp.c_proj.weight")]
    for key in looked_up:
        name = key + ".weight" if key in ("wte", "wpe") else key
        start, end = header[name]["data_offsets"]
        assert tf_offset_size(json_raw, key) == (start, end - start), key
    assert len(json_raw) % 8 == 0


def test_synthetic_enc_and_data(tiny_assets):
    tokens = decode_enc((tiny_assets / "enc").read_bytes(), TINY.d_vocab)
    assert len(set(tokens)) == TINY.d_vocab and all(tokens)
    data = decode_data((tiny_assets / "data").read_bytes())
    assert len(data) == 65 and data.max() < TINY.d_vocab


def test_enc_and_data_round_trip():
    tokens = [b"a", b"bc", b"\xff\x00", b"<|endoftext|>"]
    raw = encode_enc(tokens)
    assert len(raw) == 8 * 4 + sum(map(len, tokens)) and decode_enc(raw, 4) == tokens
    ids = [0, 1, 50256, 65535, 7]
    assert decode_data(encode_data(ids)).tolist() == ids
    assert encode_data(ids)[:4] == b"\x00\x00\x01\x00"  # little-endian uint16
    with pytest.raises(ToolError, match="1000000-byte data limit"):
        encode_data(np.zeros(500_001, dtype=np.uint16))


@pytest.fixture(scope="module")
def bpe_file(shared):
    path = shared / "data" / "gpt2.tiktoken"
    if not path.is_file():
        pytest.skip(f"{path} is not here")
    return path


def test_gpt2_enc_is_tf_c_size(bpe_file, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("Hello world, a test of the enc.\n")
    subprocess.run([sys.executable, TOOL, "text", "--input", str(text), "--out", str(tmp_path / "a"),
                    "--bpe-file", str(bpe_file)], check=True, capture_output=True)
    enc = (tmp_path / "a" / "enc").read_bytes()
    assert len(enc) == GPT2_ENC_SIZE
    tokens = decode_enc(enc, 50257)
    assert tokens[50256] == b"<|endoftext|>" and all(tokens)
    data = decode_data((tmp_path / "a" / "data").read_bytes())
    assert b"".join(tokens[t] for t in data).decode() == text.read_text()


def run_tool(*args):
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True)


@pytest.mark.parametrize("sub", ["text", "download", "synth"])
def test_help(sub):
    done = run_tool(sub, "--help")
    assert done.returncode == 0 and "--out" in done.stdout


def test_never_overwrites_without_force(tmp_path):
    (tmp_path / "enc").write_bytes(b"user file")
    done = run_tool("synth", "--preset", "tiny", "--out", str(tmp_path))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--force" in done.stderr
    assert (tmp_path / "enc").read_bytes() == b"user file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["enc"]
    assert run_tool("synth", "--preset", "tiny", "--out", str(tmp_path), "--force").returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "enc", "model.safetensors"]


def test_bad_sizes_are_one_line(tmp_path):
    done = run_tool("synth", "--preset", "tiny", "--heads", "3", "--out", str(tmp_path))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "multiple of heads" in done.stderr
    assert not any(tmp_path.iterdir())


def test_download_checks_the_size(tmp_path):
    small = tmp_path / "small.bin"
    small.write_bytes(b"not gpt-2")
    done = run_tool("download", "--out", str(tmp_path / "a"), "--url", small.as_uri())
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "548105171" in done.stderr
    assert not any((tmp_path / "a").iterdir())
    done = run_tool("download", "--out", str(tmp_path / "b"), "--url", "http://127.0.0.1:9/none")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "cannot download" in done.stderr


def test_other_sizes_write_consistent_files(tmp_path):
    cfg = Config(d_vocab=130, d_seq=16, d_model=32, n_heads=2, n_layers=1)
    write_synthetic(tmp_path, cfg, n_tokens=20)
    assert tf_assets.config_from_file(tmp_path / "model.safetensors") == cfg
    assert len(decode_enc((tmp_path / "enc").read_bytes(), 130)) == 130
    assert len(decode_data((tmp_path / "data").read_bytes())) == 20
