"""tools/tf_assets.py: the synthetic generator, enc and data files, safetensors layout, CLI.
Files are read back with tf_numba.assets, the one reader the package and the tools share."""
import contextlib
import http.server
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
from safetensors.numpy import load_file

import tf_assets
from tf_assets import (GPT2_ENC_SIZE, ToolError, encode_data, encode_enc, hash64, synthetic_values, tensor_shapes,
                       write_synthetic)
from tf_numba.assets import AssetError, config_from_header, load_data, load_enc, read_header
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


def tf_offset_size(json_raw: bytes, key: str):
    """tf.c's key search: the first `key` in the JSON, then the first `"data_offsets":[` after
    it (the value begins 15 bytes after `data_offsets`); returns (offset, size) in bytes."""
    start = json_raw.find(b"data_offsets", json_raw.index(key.encode())) + 15
    comma = json_raw.index(b",", start)
    offset = int(json_raw[start:comma])
    return offset, int(json_raw[comma + 1:json_raw.index(b"]", comma)]) - offset


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
    tokens = load_enc(tiny_assets / "enc", TINY.d_vocab)
    assert len(set(tokens)) == TINY.d_vocab and all(tokens)
    data = load_data(tiny_assets / "data", TINY.d_vocab)
    assert len(data) == 65 and data.max() < TINY.d_vocab


def test_enc_and_data_round_trip(tmp_path):
    tokens = [b"a", b"bc", b"\xff\x00", b"<|endoftext|>"]
    raw = encode_enc(tokens)
    (tmp_path / "enc").write_bytes(raw)
    assert len(raw) == 8 * 4 + sum(map(len, tokens)) and load_enc(tmp_path / "enc", 4) == tokens
    ids = [0, 1, 50256, 65535, 7]
    (tmp_path / "data").write_bytes(encode_data(ids))
    assert load_data(tmp_path / "data", 65536).tolist() == ids
    assert encode_data(ids)[:4] == b"\x00\x00\x01\x00"  # little-endian uint16
    with pytest.raises(ToolError, match="1000000-byte data limit"):
        encode_data(np.zeros(500_001, dtype=np.uint16))



def test_gpt2_enc_is_tf_c_size(bpe_file, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("Hello world, a test of the enc.\n")
    subprocess.run([sys.executable, TOOL, "text", "--input", str(text), "--out", str(tmp_path / "a"),
                    "--bpe-file", str(bpe_file)], check=True, capture_output=True)
    assert (tmp_path / "a" / "enc").stat().st_size == GPT2_ENC_SIZE
    tokens = load_enc(tmp_path / "a" / "enc", 50257)
    assert tokens[50256] == b"<|endoftext|>" and all(tokens)
    data = load_data(tmp_path / "a" / "data", 50257)
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
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "--force" in done.stderr
    assert (tmp_path / "enc").read_bytes() == b"user file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["enc"]
    assert run_tool("synth", "--preset", "tiny", "--out", str(tmp_path), "--force").returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "enc", "model.safetensors"]


@pytest.mark.parametrize("sizes,words", [(("--heads", "3"), "multiple of heads"), (("--vocab", "0"), "at least 1"),
                                         (("--layers", "-1"), "at least 1"), (("--vocab", "65537"), "uint16"),
                                         (("--tokens", "0"), "--tokens 0"),
                                         (("--bpe-file", "gpt2.tiktoken"), "drop --bpe-file"),  # it exited 1
                                         (("--vocab", "1_6"), "invalid int value")])  # int() read 16
def test_bad_sizes_are_usage_errors(tmp_path, sizes, words):
    """Sizes tf.c cannot take are a bad option: one line, exit 2 (the tool's docstring), nothing written."""
    done = run_tool("synth", "--preset", "tiny", *sizes, "--out", str(tmp_path))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and words in done.stderr, done.stderr
    assert not any(tmp_path.iterdir())


def one_line(done, code, *words):
    """The tool failed with exit status `code` and one line `tf_assets.py: error: ...` holding words."""
    assert done.returncode == code, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("tf_assets.py: error: "), done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


def test_download_checks_the_size(tmp_path):
    small = tmp_path / "small.bin"
    small.write_bytes(b"not gpt-2")
    one_line(run_tool("download", "--out", str(tmp_path / "a"), "--url", small.as_uri()), 1, "548105171")
    assert not (tmp_path / "a").exists()  # the folder it made goes too
    one_line(run_tool("download", "--out", str(tmp_path / "b"), "--url", "http://127.0.0.1:9/none"), 1,
             "cannot download")
    assert not (tmp_path / "b").exists()


def test_failed_download_removes_only_what_it_made(tmp_path):
    # New nested folders go; an existing folder and its other files stay, with no temporary left.
    one_line(run_tool("download", "--out", str(tmp_path / "new" / "sub"), "--url", "http://127.0.0.1:9/none"), 1)
    assert not (tmp_path / "new").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("user file")
    one_line(run_tool("download", "--out", str(tmp_path / "mine" / "a"), "--url", "http://127.0.0.1:9/none"), 1)
    one_line(run_tool("download", "--out", str(tmp_path / "mine"), "--url", "http://127.0.0.1:9/none"), 1)
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]
    assert (tmp_path / "mine" / "notes.txt").read_text() == "user file"


def test_url_that_is_not_a_url(tmp_path):
    # a malformed or empty option is a usage error (2); it exited 1, as for a failed download
    one_line(run_tool("download", "--out", str(tmp_path / "a"), "--url", "notaurl"), 2, "notaurl", "not a URL")
    one_line(run_tool("download", "--out", str(tmp_path / "a"), "--url", ""), 2, "not a URL")
    assert not (tmp_path / "a").exists()


def test_out_under_a_regular_file(tmp_path):
    (tmp_path / "somefile").write_text("user file")
    one_line(run_tool("synth", "--out", str(tmp_path / "somefile" / "sub")), 1, "somefile", "not a folder")
    assert (tmp_path / "somefile").read_text() == "user file"


def test_text_refuses_an_empty_file(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    # Refused before the tokenizer loads, so no --bpe-file is needed.
    one_line(run_tool("text", "--input", str(tmp_path / "empty.txt"), "--out", str(tmp_path / "a")), 1,
             "empty.txt", "no text")
    assert not (tmp_path / "a").exists()


def test_text_refuses_a_truncated_bpe_file(bpe_file, tmp_path):
    # The package's checked tokenizer: a cut ranks file would tokenize into single bytes.
    cut = tmp_path / "cut.tiktoken"
    cut.write_bytes(b"".join(bpe_file.read_bytes().splitlines(keepends=True)[:1000]))
    (tmp_path / "t.txt").write_text("Hello world")
    one_line(run_tool("text", "--input", str(tmp_path / "t.txt"), "--out", str(tmp_path / "a"),
                      "--bpe-file", str(cut)), 1, "cut.tiktoken", "1000 ranks")
    assert not (tmp_path / "a").exists()


def test_usage_error_is_one_line_exit_2(tmp_path):
    one_line(run_tool("synth"), 2, "--out")
    one_line(run_tool("synth", "--out", str(tmp_path), "--heads", "four"), 2, "--heads")
    assert not any(tmp_path.iterdir())


def test_other_sizes_write_consistent_files(tmp_path):
    cfg = Config(d_vocab=130, d_seq=16, d_model=32, n_heads=2, n_layers=1)
    write_synthetic(tmp_path, cfg, n_tokens=20)
    path = tmp_path / "model.safetensors"
    assert config_from_header(read_header(path)[0], path) == cfg
    assert len(load_enc(tmp_path / "enc", 130)) == 130
    assert len(load_data(tmp_path / "data", 130)) == 20


def without_n_head(path):
    """Rewrite a safetensors file with its metadata's n_head dropped (the real GPT-2 file has none)."""
    header, raw = read_header(path)
    del header["__metadata__"]["n_head"]
    new = json.dumps(header, separators=(",", ":")).encode()
    path.write_bytes(len(new).to_bytes(8, "little") + new + path.read_bytes()[8 + len(raw):])


def test_heads_without_n_head_are_64_wide(tmp_path):
    # tf.c's tf_d_k: with no n_head a file has d_model / 64 heads, for the tools and the package alike.
    cfg = Config(d_vocab=130, d_seq=16, d_model=128, n_heads=8, n_layers=1)
    write_synthetic(tmp_path, cfg, n_tokens=20)
    path = tmp_path / "model.safetensors"
    without_n_head(path)
    assert config_from_header(read_header(path)[0], path).n_heads == 2
    write_synthetic(tmp_path, Config(d_vocab=130, d_seq=16, d_model=96, n_heads=2, n_layers=1), 20, force=True)
    without_n_head(path)
    with pytest.raises(AssetError, match="no n_head metadata.*d_model 96 is not a multiple of 64"):
        config_from_header(read_header(path)[0], path)


def run_tool_in(cwd, *args, timeout=60):
    """The tool in a subprocess, killed after `timeout` s: a read that never ends fails the test."""
    return subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)


def test_text_refuses_a_fifo_and_a_device(tmp_path):
    # Both were read forever (a FIFO blocks in open(), /dev/zero grows memory without end).
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    one_line(run_tool_in(tmp_path, "text", "--input", str(fifo), "--out", str(tmp_path / "a")), 1, "fifo", "a FIFO")
    one_line(run_tool_in(tmp_path, "text", "--input", "/dev/zero", "--out", str(tmp_path / "a")), 1,
             "/dev/zero", "a character device")
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize("sizes", [["--seq", "100000"], ["--d-model", "100000000", "--heads", "1"],
                                   ["--layers", "99999999999999999999999"]], ids=["seq", "d_model", "layers"])
def test_synth_refuses_a_file_tf_c_cannot_address(tmp_path, sizes):
    # A 37 GiB mask allocation, many GB written, a loop over 10**23 layers: refused from the sizes.
    one_line(run_tool_in(tmp_path, "synth", *sizes, "--out", str(tmp_path / "a"), timeout=30), 2,
             "atoi", f"{tf_assets.TF_C_MAX_BYTES:,}")
    assert not (tmp_path / "a").exists()


def test_size_bound_is_the_files_size(tmp_path):
    cfg = Config(d_vocab=130, d_seq=16, d_model=32, n_heads=2, n_layers=3)
    assert tf_assets.tensor_bytes(cfg) == 4 * sum(math.prod(s) for s in tensor_shapes(cfg).values())
    write_synthetic(tmp_path, cfg, n_tokens=20)
    header_size = len(read_header(tmp_path / "model.safetensors")[1])
    assert (tmp_path / "model.safetensors").stat().st_size == 8 + header_size + tf_assets.tensor_bytes(cfg)


def test_mask_rows_come_in_chunks(monkeypatch):
    monkeypatch.setattr(tf_assets, "CHUNK", 40)  # 40 // 16 = 2 rows a chunk, and the 1-row floor below
    for S in (16, 50):
        chunks = list(tf_assets.tensor_chunks("h.0.attn.bias", [1, 1, S, S], TINY))
        assert len(chunks) > 1 and b"".join(chunks) == np.tril(np.ones((S, S), dtype=np.float32)).tobytes()


def test_synth_refuses_an_empty_out(tmp_path):
    # Path('') is the current folder: the files landed wherever the command ran.
    one_line(run_tool_in(tmp_path, "synth", "--preset", "tiny", "--out", ""), 2, "--out", "empty")
    one_line(run_tool_in(tmp_path, "text", "--input", "x.txt", "--out", ""), 2, "--out", "empty")
    assert not any(tmp_path.iterdir())


def test_synth_refuses_more_than_the_free_space(tmp_path, monkeypatch):
    monkeypatch.setattr(tf_assets.shutil, "disk_usage", lambda path: SimpleNamespace(free=1000))
    with pytest.raises(ToolError, match="bytes but .* has 1,000 free; free some space or pick another --out"):
        write_synthetic(tmp_path / "a", TINY)
    assert not (tmp_path / "a").exists()


def test_download_stops_past_the_expected_size(tmp_path):
    blocks = []

    def endless():  # what /dev/zero or a wrong URL sends
        while len(blocks) < 1000:
            blocks.append(b"\0" * 4)
            yield blocks[-1]
        raise AssertionError("read on past the expected size")

    with pytest.raises(ToolError, match="over 10 bytes"):
        tf_assets.write_files(tmp_path, {"model.safetensors": endless}, False, expect_size=10)
    assert len(blocks) == 3 and not any(tmp_path.iterdir())


def test_download_refuses_a_device_or_fifo_url(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for url, kind in (("file:///dev/zero", "a character device"), (fifo.as_uri(), "a FIFO")):
        one_line(run_tool_in(tmp_path, "download", "--out", str(tmp_path / "a"), "--url", url, timeout=30), 1, kind)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]


class EndlessBody(http.server.BaseHTTPRequestHandler):
    """A server that sends bytes slowly and never ends, so that a download is cut short."""

    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        with contextlib.suppress(OSError):
            for _ in range(10_000):
                self.wfile.write(b"\0" * 65536)
                time.sleep(0.01)

    def log_message(self, *args):
        pass


# A SIGTERM the moment the temporary file exists, before write_files has noted it (inside
# mkstemp): sent by the process to itself, so the window is hit every time, not by chance; and
# with a second thread that takes signals, as a library's may (where masking the main thread's
# signals failed on the H200: the other thread took it, and Python ran the handler all the same).
SIGTERM_IN_MKSTEMP = """
import os, signal, sys, tempfile, threading
sys.path.insert(0, sys.argv[2])
import tf_assets
from pathlib import Path
threading.Thread(target=lambda: threading.Event().wait(60), daemon=True).start()
made = tempfile.mkstemp
def mkstemp(*args, **kwargs):
    fd, path = made(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGTERM)
    signal.pthread_kill(threading.main_thread().ident, 0)  # a moment for the handler to run here
    return fd, path
tempfile.mkstemp = mkstemp
signal.signal(signal.SIGTERM, tf_assets.terminated)
tf_assets.write_files(Path(sys.argv[1]), {"x.bin": lambda: [b"123"]}, False)
"""


def test_sigterm_inside_mkstemp_leaves_nothing(tmp_path):
    out = tmp_path / "a" / "b"
    proc = subprocess.run([sys.executable, "-c", SIGTERM_IN_MKSTEMP, str(out), str(ROOT / "tools")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
    assert not (tmp_path / "a").exists()  # the file, then both folders it made


def test_sigterm_removes_the_temporary_file(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), EndlessBody)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        out = tmp_path / "a"
        proc = subprocess.Popen([sys.executable, TOOL, "download", "--out", str(out), "--url",
                                 f"http://127.0.0.1:{server.server_address[1]}/model.safetensors"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while not (out.is_dir() and any(out.iterdir())) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert out.is_dir() and any(out.iterdir()), "the download never started"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
        assert not out.exists()  # its temporary file, then the folder it made
    finally:
        server.shutdown()
        server.server_close()
