"""Bad input: one line on stderr that names the problem, a non-zero exit, no traceback."""
import os
import shlex
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tf_numba.cli import main
from tests.conftest import FIXTURES, PYTHONPATH


@pytest.fixture
def bad(tiny_assets, tmp_path):
    """A copy of the tiny assets to spoil."""
    out = tmp_path / "assets"
    shutil.copytree(tiny_assets, out)
    return out


def one_line_error(capsys, argv, *words):
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc != 0
    assert err.count("\n") == 1 and err.startswith("tf_numba: error:"), err
    assert "Traceback" not in err
    for w in words:
        assert w in err, err
    return err


def rewrite_model(path, drop=None, change=None):
    from safetensors.numpy import load_file, save_file
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as f:
        metadata = f.metadata()
    tensors = load_file(str(path))
    if drop:
        del tensors[drop]
    if change:
        name, value = change
        tensors[name] = value
    save_file(tensors, str(path), metadata=metadata)


def test_missing_model_says_how_to_get_it(capsys, tmp_path):
    one_line_error(capsys, ["--assets", str(tmp_path)], "not found", "tf_assets.py download", "synth")


def test_truncated_model(capsys, bad):
    p = bad / "model.safetensors"
    p.write_bytes(p.read_bytes()[:-100])
    one_line_error(capsys, ["--assets", str(bad)], "truncated")


def test_model_shorter_than_its_header(capsys, bad):
    p = bad / "model.safetensors"
    p.write_bytes(p.read_bytes()[:20])
    one_line_error(capsys, ["--assets", str(bad)], "truncated")


def test_header_not_json(capsys, bad):
    p = bad / "model.safetensors"
    raw = bytearray(p.read_bytes())
    raw[8] = ord("#")
    p.write_bytes(bytes(raw))
    one_line_error(capsys, ["--assets", str(bad)], "not JSON")


def shift_last_tensor(path, by):
    """Moves the last tensor's data_offsets by `by` bytes (its data after them, padded with zeros),
    leaving its length: (its name, the name of the tensor before it)."""
    import json
    import struct

    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    order = sorted((e["data_offsets"][0], name) for name, e in header.items() if name != "__metadata__")
    (begin, last), before = order[-1], order[-2][1]
    end = header[last]["data_offsets"][1]
    header[last]["data_offsets"] = [begin + by, end + by]
    data = data[:begin] + bytes(max(by, 0)) + data[begin:] if by > 0 else data
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)
    return last, before


@pytest.mark.parametrize("by, what", [(-4, "overlap"), (4, "leave a gap")])
def test_tensors_that_overlap_or_leave_a_gap(capsys, bad, by, what):
    # the safetensors library refuses both, naming one tensor of the two
    last, before = shift_last_tensor(bad / "model.safetensors", by)
    one_line_error(capsys, ["--assets", str(bad)], repr(last), repr(before), what)


def test_assets_that_is_a_file(capsys, bad):
    one_line_error(capsys, ["--assets", str(bad / "model.safetensors")], "is not a folder", "--assets")


def test_a_tensor_named_twice(capsys, bad):
    # tf.c finds a name's first entry (strstr), json and the safetensors library keep the last:
    # the first pointing at another tensor's bytes gave other tokens than tf.c, without a word
    import json
    import struct

    p = bad / "model.safetensors"
    raw = p.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    twice = json.dumps(header["ln_f.weight"])
    text = raw[8:8 + n].decode().replace('{', '{"ln_f.bias":' + twice + ',', 1).encode()
    p.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n:])
    one_line_error(capsys, ["--assets", str(bad)], "'ln_f.bias' twice")
    text = raw[8:8 + n].replace(b'"dtype"', b'"dtype":"F16","dtype"', 1)  # a field twice: F16 or F32?
    p.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n:])
    one_line_error(capsys, ["--assets", str(bad)], "gives 'dtype' twice")


def test_bytes_after_the_last_tensor(capsys, bad):
    p = bad / "model.safetensors"
    p.write_bytes(p.read_bytes() + bytes(4))
    one_line_error(capsys, ["--assets", str(bad)], "bytes after the last tensor")


def test_missing_tensor(capsys, bad):
    rewrite_model(bad / "model.safetensors", drop="h.1.mlp.c_proj.weight")
    one_line_error(capsys, ["--assets", str(bad)], "h.1.mlp.c_proj.weight")


def test_wrong_shape(capsys, bad):
    rewrite_model(bad / "model.safetensors", change=("h.0.attn.c_attn.weight", np.zeros((64, 64), np.float32)))
    one_line_error(capsys, ["--assets", str(bad)], "h.0.attn.c_attn.weight", "shape")


def test_wrong_dtype(capsys, bad):
    rewrite_model(bad / "model.safetensors", change=("ln_f.bias", np.zeros(64, np.float16)))
    one_line_error(capsys, ["--assets", str(bad)], "ln_f.bias", "F16", "F32")


def test_enc_wrong_size(capsys, bad):
    p = bad / "enc"
    p.write_bytes(p.read_bytes()[:-1])
    one_line_error(capsys, ["--assets", str(bad)], "enc", "wrong size")


def test_enc_of_a_terabyte_is_refused_unread(capsys, bad):
    """The size is checked against the token table before the text is read (a sparse file: reading
    it would need a terabyte of memory)."""
    os.truncate(bad / "enc", 1 << 40)
    one_line_error(capsys, ["--assets", str(bad)], "enc", "wrong size", f"{(1 << 40) - 96 * 8} bytes of text")


def test_enc_empty_token(capsys, bad):
    p = bad / "enc"
    raw = bytearray(p.read_bytes())
    raw[4:8] = (0).to_bytes(4, "little")  # token 0's size
    p.write_bytes(bytes(raw))
    one_line_error(capsys, ["--assets", str(bad)], "token 0 is empty")


def test_data_odd_length(capsys, bad):
    p = bad / "data"
    p.write_bytes(p.read_bytes() + b"\0")
    one_line_error(capsys, ["--assets", str(bad)], "odd length")


def test_data_too_big(capsys, bad):
    (bad / "data").write_bytes(bytes(1_000_002))
    one_line_error(capsys, ["--assets", str(bad)], "1000000")


def test_token_id_not_below_vocab(capsys, bad):
    tokens = np.fromfile(bad / "data", dtype="<u2")
    tokens[3] = 96
    tokens.tofile(bad / "data")
    one_line_error(capsys, ["--assets", str(bad)], "token 3", "96")


def test_too_few_tokens_to_validate(capsys, bad):
    np.arange(5, dtype="<u2").tofile(bad / "data")
    one_line_error(capsys, ["--assets", str(bad), "--validate", "--expected",
                            str(FIXTURES / "tf_oracle_tiny_fma.json")], "needs 9 tokens", f"{bad / 'data'} has 5")


def test_tf_c_constants_need_gpt2(capsys, tiny_assets):
    one_line_error(capsys, ["--assets", str(tiny_assets), "--validate"], "--expected")


def test_unknown_flag(capsys):
    one_line_error(capsys, ["--no-such-flag"], "--no-such-flag")


def test_no_gpu(tiny_assets):
    from numba import config

    if not config.ENABLE_CUDASIM:
        pytest.skip("this machine may have a GPU; the check is for machines without one")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = PYTHONPATH
    env["CUDA_VISIBLE_DEVICES"] = ""  # no GPU even where there is one
    r = subprocess.run([sys.executable, "-m", "tf_numba", "--assets", str(tiny_assets)],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert r.stderr.count("\n") == 1 and "no CUDA GPU" in r.stderr, r.stderr


def test_prompt_not_in_a_tiny_vocabulary(capsys, tiny_assets, shared):
    bpe = shared / "data" / "gpt2.tiktoken"
    if not bpe.is_file():
        pytest.skip(f"{bpe} is not here")
    one_line_error(capsys, ["--assets", str(tiny_assets), "--tokens", "2", "--prompt", "Hello world",
                            "--bpe-file", str(bpe)], "vocabulary of 96")


def test_prompt_that_is_not_utf8(capsys, tiny_assets, tmp_path):
    """argv's bytes that are not UTF-8 (Python hands them on as lone surrogates) would reach the
    encoder as U+FFFD: a prompt other than the one typed."""
    argv = ["--assets", str(tiny_assets), "--tokens", "2", "--prompt", "a\udcffb", "--bpe-file", str(tmp_path / "x")]
    one_line_error(capsys, argv, "--prompt is not UTF-8")
    assert main(argv) == 2  # a usage error


def test_unreadable_bpe_file(capsys, tiny_assets, tmp_path):
    one_line_error(capsys, ["--assets", str(tiny_assets), "--tokens", "2", "--prompt", "Hi",
                            "--bpe-file", str(tmp_path / "missing.tiktoken")], "--bpe-file")


def test_too_many_tokens_for_the_model(capsys, tiny_assets):
    one_line_error(capsys, ["--assets", str(tiny_assets), "--tokens", "40"], "pick 1 to 31")


@pytest.mark.parametrize("argv, words", [
    (["--no-such-flag"], ["--no-such-flag"]),
    (["--valid"], ["unrecognized arguments: --valid"]),  # flags whole only, as microgpt_numba takes them
    (["--temp", "1"], ["unrecognized arguments: --temp"]),
    (["--validate", "--prompt", "Hello"], ["--prompt means nothing with --validate"]),
    (["--validate", "--tokens", "3"], ["--tokens means nothing with --validate"]),
    (["--validate", "--recompute"], ["--recompute means nothing with --validate"]),
    (["--validate", "--temperature", "0.5"], ["--temperature means nothing with --validate"]),
    (["--expected", "x.json"], ["--expected means nothing without --validate"]),
    (["--bpe-file", "gpt2.tiktoken"], ["--bpe-file only encodes --prompt"]),
    (["--top-k", "3"], ["--top-k only shapes sampling"]),
    (["--seed", "3"], ["--seed only shapes sampling"]),
    (["--temperature", "1", "--top-k", "0"], ["--top-k must be at least 1"]),
    (["--temperature", "1", "--top-k", "-2"], ["--top-k must be at least 1"]),
    (["--temperature", "1", "--seed", "-1"], ["--seed must be a non-negative integer"]),
    (["--temperature", "1", "--seed", "x"], ["--seed", "invalid int value"]),
    (["--temperature", "1", "--seed", "1_2"], ["--seed", "invalid int value"]),  # int() takes both
    (["--tokens", "\u0663"], ["--tokens", "invalid int value"]),  # an Arabic-Indic 3
    (["--prompt", ""], ["--prompt is empty"]),
    (["--temperature", "-1"], ["--temperature must be a finite number >= 0"]),
    (["--temperature", "nan"], ["--temperature must be a finite number >= 0"]),
    (["--temperature", "inf"], ["--temperature must be a finite number >= 0"]),
    (["--tokens", "0"], ["--tokens must be at least 1"]),
])
def test_usage_errors_exit_2(capsys, tiny_assets, argv, words):
    """Options that are malformed or mean nothing together: one line, exit 2, before anything runs."""
    rc = main(["--assets", str(tiny_assets), *argv])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and err.startswith("tf_numba: error:"), err
    assert all(w in err for w in words), err


@pytest.mark.parametrize("argv, words", [
    (["--tokens", "40"], ["--tokens 40: the model holds 32 tokens"]),  # the tiny model's d_seq is 32
    (["--temperature", "1", "--top-k", "1000"], ["--top-k 1000 is more than the vocabulary's 96 tokens"]),
])
def test_sizes_the_model_cannot_hold_exit_2(capsys, tiny_assets, argv, words):
    rc = main(["--assets", str(tiny_assets), *argv])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and all(w in err for w in words), err


def test_prompt_and_tokens_past_d_seq(capsys, tmp_path, shared):
    """A prompt plus the tokens to make that do not fit d_seq: one line, exit 2 (a GPT-2 vocabulary
    on a 16-position model, so that text prompts encode)."""
    from tf_assets import write_synthetic

    from tf_numba.config import Config

    write_synthetic(tmp_path, Config(d_vocab=50257, d_seq=16, d_model=8, n_heads=2, n_layers=1))
    rc = main(["--assets", str(tmp_path), "--prompt", "Hello world, hello world", "--tokens", "12",
               "--bpe-file", str(shared / "data" / "gpt2.tiktoken")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "exceeds d_seq 16" in err, err


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
@pytest.mark.parametrize("name", ["model.safetensors", "enc", "data"])
def test_an_asset_that_is_not_a_file(capsys, bad, name, kind):
    """A FIFO would block the read and /dev/zero never end it: refused before they are opened."""
    (bad / name).unlink()
    if kind == "fifo":
        os.mkfifo(bad / name)
    else:
        (bad / name).symlink_to("/dev/zero")
    one_line_error(capsys, ["--assets", str(bad)], str(bad / name),
                   "it is a FIFO" if kind == "fifo" else "it is a character device", "give a regular file")


def test_a_bpe_file_that_is_a_fifo(capsys, tiny_assets, tmp_path):
    os.mkfifo(tmp_path / "ranks")
    one_line_error(capsys, ["--assets", str(tiny_assets), "--tokens", "2", "--prompt", "Hi",
                            "--bpe-file", str(tmp_path / "ranks")], "--bpe-file", "it is a FIFO")


def test_layers_numbered_with_a_gap(capsys, bad):
    """h.0, h.2: the model must not run as one layer, dropping the rest without a word."""
    from safetensors.numpy import load_file, save_file

    path = bad / "model.safetensors"
    tensors = {k.replace("h.1.", "h.2."): v for k, v in load_file(str(path)).items()}
    save_file(tensors, str(path), metadata={"n_head": "4"})
    one_line_error(capsys, ["--assets", str(bad)], "tensors of layer 2 but no 'h.1.ln_1.weight'", "without a gap")


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_weights_that_are_not_finite(capsys, bad, value):
    from safetensors.numpy import load_file

    weight = load_file(str(bad / "model.safetensors"))["h.1.mlp.c_fc.weight"]
    weight[3, 5] = value
    rewrite_model(bad / "model.safetensors", change=("h.1.mlp.c_fc.weight", weight))
    one_line_error(capsys, ["--assets", str(bad)], "'h.1.mlp.c_fc.weight' holds", "at [3, 5]", "must be finite")


def test_a_context_of_one_token_leaves_nothing_to_generate(capsys, tmp_path):
    from tf_assets import write_synthetic

    from tf_numba.config import Config

    write_synthetic(tmp_path, Config(d_vocab=20, d_seq=1, d_model=8, n_heads=2, n_layers=1))
    one_line_error(capsys, ["--assets", str(tmp_path)], "holds 1 token", "nothing is left to generate")


def run_tf(argv, stdout, env=None):
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, **(env or {})}
    return subprocess.run([sys.executable, "-m", "tf_numba", *argv], stdout=stdout, stderr=subprocess.PIPE,
                          env=env, text=True, timeout=300)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_stdout_full_or_closed(tiny_assets):
    """No traceback when stdout cannot be written (a full disk) or is not there at all."""
    with open("/dev/full", "w") as full:
        r = run_tf(["--assets", str(tiny_assets), "--tokens", "1"], full)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "No space left on device" in r.stderr, r.stderr
    r = subprocess.run(f"exec {shlex.quote(sys.executable)} -m tf_numba --assets {shlex.quote(str(tiny_assets))} >&-",
                       shell=True, stderr=subprocess.PIPE, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": PYTHONPATH})
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "stdout is closed" in r.stderr, r.stderr


def test_simulator_flag_that_is_not_an_integer(tiny_assets):
    r = run_tf(["--assets", str(tiny_assets)], subprocess.PIPE, {"NUMBA_ENABLE_CUDASIM": "yes"})
    assert r.returncode == 2 and r.stderr == ("tf_numba: error: NUMBA_ENABLE_CUDASIM='yes' is not an integer: set "
                                              "it to 1 for Numba's CPU simulator, or unset it\n"), r.stderr


@pytest.mark.parametrize("cfg, words", [
    ((20, 1025, 8, 2, 1), "d_seq 1025 is longer than the 1024 positions"),
    ((20, 8, 2050, 1, 1), "d_model 2050 is wider than the 2048"),
])
def test_shapes_past_the_shared_memory_rows(capsys, tmp_path, cfg, words):
    """tf.c would run them; our layer norm and softmax kernels stage a row in shared memory."""
    from tf_assets import write_synthetic

    from tf_numba.config import Config

    write_synthetic(tmp_path, Config(*cfg))
    one_line_error(capsys, ["--assets", str(tmp_path), "--tokens", "1"], words, "use a model with")
