"""Bad assets, tokenizer files and oracle fixtures: tf_numba.assets and training.fixture_expected
raise AssetError with one line that names the file and the field, never a traceback.

The test_cli_* tests run `python -m tf_numba`'s main() and expect exit status 1 (bad data)."""
import builtins
import copy
import errno
import json
import os
import shutil

import pytest

from tf_numba.assets import AssetError, encode_prompt, gpt2_encoding, load_data, load_enc, load_model, read_header
from tf_numba.cli import main
from tf_numba.config import TINY
from tests.conftest import FIXTURES

AGAIN = "fetch or generate the file again"


def one_line(exc_info, *words):
    message = str(exc_info.value)
    assert "\n" not in message, message
    for word in words:
        assert word in message, message
    return message


def cli_error(capsys, argv, *words):
    """main(argv) exits 1 with one line `tf_numba: error: ...` holding words."""
    rc = main(argv)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("tf_numba: error: "), err
    for word in words:
        assert word in err, err
    assert rc == 1


def write_model(path, header, data):
    """A safetensors file by hand: 8-byte little-endian JSON length, the JSON, the data."""
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data)


@pytest.fixture(scope="module")
def tiny_header(tiny_assets):
    """(header, data section) of the tiny model, to spoil one field at a time."""
    path = tiny_assets / "model.safetensors"
    header, raw = read_header(path)
    return header, path.read_bytes()[8 + len(raw):]


@pytest.fixture
def spoiled(tiny_header, tmp_path):
    """spoiled(edit): the tiny model with edit(header) applied, written to tmp_path/assets."""
    header, data = tiny_header
    (tmp_path / "assets").mkdir()

    def spoil(edit):
        h = copy.deepcopy(header)
        edit(h)
        path = tmp_path / "assets" / "model.safetensors"
        write_model(path, h, data)
        return path

    return spoil


def setter(name, field, value):
    def edit(header):
        header[name][field] = value
    return edit


def dropper(name, field):
    def edit(header):
        del header[name][field]
    return edit


def begin_of(header, name):
    return header[name]["data_offsets"][0]


def offsets(name, begin, end):
    """Set name's data_offsets to [its begin + begin, its begin + end] (end None: 10**12)."""
    def edit(header):
        start = begin_of(header, name)
        header[name]["data_offsets"] = [start + begin, 10**12 if end is None else start + end]
    return edit


def empty(name, shape):
    """name as an empty tensor of this shape."""
    def edit(header):
        header[name].update(shape=shape, data_offsets=[begin_of(header, name)] * 2)
    return edit


# (id, edit, words the one line must hold). The first ten crashed with a traceback before.
BIAS = "h.0.ln_1.bias"
MALFORMED = [
    ("entry-not-an-object", lambda h: h.update({BIAS: [0, 256]}),
     [f"tensor '{BIAS}'", "must be an object", "[0, 256]"]),
    ("data_offsets-missing", dropper(BIAS, "data_offsets"), [f"tensor '{BIAS}'", "data_offsets is missing"]),
    ("data_offsets-not-a-list", setter(BIAS, "data_offsets", "0-256"),
     [f"tensor '{BIAS}'", "data_offsets must be two integers", '"0-256"']),
    ("data_offsets-one-value", setter(BIAS, "data_offsets", [0]), ["data_offsets must be two integers", "[0]"]),
    ("data_offsets-three-values", setter(BIAS, "data_offsets", [0, 1, 2]), ["data_offsets must be two integers"]),
    ("data_offsets-strings", setter(BIAS, "data_offsets", ["0", "256"]), ["data_offsets must be two integers"]),
    ("shape-missing", dropper(BIAS, "shape"), [f"tensor '{BIAS}'", "shape is missing"]),
    ("shape-not-a-list", setter(BIAS, "shape", 64), [f"tensor '{BIAS}'", "shape must be a list", "64"]),
    ("shape-strings", setter(BIAS, "shape", ["64"]), ["shape must be a list of non-negative integers"]),
    ("metadata-not-an-object", lambda h: h.update({"__metadata__": "pt"}),
     ["__metadata__ must be an object of strings"]),
    # Every other field's type and range.
    ("dtype-missing", dropper(BIAS, "dtype"), [f"tensor '{BIAS}'", "dtype is missing"]),
    ("dtype-not-a-string", setter(BIAS, "dtype", 4), [f"tensor '{BIAS}'", "dtype must be a string"]),
    ("shape-bool", setter(BIAS, "shape", [True]), ["shape must be a list of non-negative integers", "[true]"]),
    ("shape-negative", setter(BIAS, "shape", [-64]), ["shape must be a list of non-negative integers"]),
    ("shape-float", setter(BIAS, "shape", [64.0]), ["shape must be a list of non-negative integers"]),
    ("data_offsets-bools", setter(BIAS, "data_offsets", [False, True]), ["data_offsets must be two integers"]),
    ("data_offsets-negative", setter(BIAS, "data_offsets", [-4, 252]), ["0 <= begin <= end"]),
    ("data_offsets-backwards", offsets(BIAS, 256, 0), ["0 <= begin <= end"]),
    ("data_offsets-past-the-data", offsets(BIAS, 0, None), ["truncated", f"tensor '{BIAS}'", "data_offsets"]),
    ("data_offsets-wrong-size", offsets(BIAS, 0, 4), [f"tensor '{BIAS}'", "hold 4 bytes", "F32 of shape [64] is 256"]),
    ("metadata-value-not-a-string", lambda h: h["__metadata__"].update(n_head=4),
     ["__metadata__ must be an object of strings"]),
    ("n_head-zero", lambda h: h["__metadata__"].update(n_head="0"), ["n_head '0'", "positive integer"]),
    ("n_head-not-dividing", lambda h: h["__metadata__"].update(n_head="3"), ["n_head '3'", "divides d_model 64"]),
    ("n_head-not-a-number", lambda h: h["__metadata__"].update(n_head="four"), ["n_head 'four'"]),
    ("n_head-negative", lambda h: h["__metadata__"].update(n_head="-4"), ["n_head '-4'"]),
    # An empty model: refused here, not later as a --tokens range or an enc fault.
    ("wte-zero-rows", empty("wte.weight", [0, 64]), ["tensor 'wte.weight' has shape [0, 64]"]),
    ("wpe-zero-rows", empty("wpe.weight", [0, 64]), ["tensor 'wpe.weight' has shape [0, 64]"]),
    ("d_model-zero", empty("wte.weight", [96, 0]), ["tensor 'wte.weight' has shape [96, 0]"]),
    ("wte-one-dimension", setter("wte.weight", "shape", [96 * 64]), ["tensor 'wte.weight' has shape [6144]"]),
    ("no-layers", lambda h: h.pop("h.0.ln_1.weight"), ["no layers", "h.0.ln_1.weight"]),
    ("no-wpe", lambda h: h.pop("wpe.weight"), ["no tensor 'wpe.weight'"]),
]


@pytest.mark.parametrize("edit, words", [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_header_is_one_line(spoiled, edit, words):
    path = spoiled(edit)
    with pytest.raises(AssetError) as info:
        load_model(path)
    assert one_line(info, *words).startswith(str(path))


def test_malformed_header_message(spoiled):
    path = spoiled(setter(BIAS, "data_offsets", ["a", 1]))
    with pytest.raises(AssetError) as info:
        load_model(path)
    assert str(info.value) == (f"{path}: tensor 'h.0.ln_1.bias': data_offsets must be two integers, "
                               f'got ["a", 1]: {AGAIN}')


def test_long_values_are_cut_short(spoiled):
    with pytest.raises(AssetError) as info:
        load_model(spoiled(setter(BIAS, "shape", ["x"] * 10_000)))
    assert len(one_line(info, "shape must be", "...")) < 300


@pytest.mark.parametrize("header", [b"[" * 100_000, b'{"a": 1', b"\xff\xfe", b"[]", b"7"],
                         ids=["nested-too-deep", "cut-json", "not-utf8", "a-list", "a-number"])
def test_header_that_is_not_a_json_object(tmp_path, header):
    path = tmp_path / "model.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header)
    with pytest.raises(AssetError) as info:
        load_model(path)
    one_line(info, str(path), "not a safetensors file")


def test_tensor_the_port_does_not_read_is_checked_too(spoiled):
    # h.N.attn.bias (the causal mask) is not used, but a bad entry is a bad file.
    with pytest.raises(AssetError) as info:
        load_model(spoiled(setter("h.1.attn.bias", "shape", "big")))
    one_line(info, "tensor 'h.1.attn.bias'", "shape must be a list")


def test_cli_malformed_header_exits_1(capsys, spoiled, tiny_assets):
    path = spoiled(setter(BIAS, "data_offsets", ["a", 1]))
    for name in ("enc", "data"):
        shutil.copy(tiny_assets / name, path.parent / name)
    cli_error(capsys, ["--assets", str(path.parent)], "tensor 'h.0.ln_1.bias'", "data_offsets")


def test_cli_zero_row_wpe_exits_1(capsys, spoiled, tiny_assets):
    path = spoiled(empty("wpe.weight", [0, 64]))
    for name in ("enc", "data"):
        shutil.copy(tiny_assets / name, path.parent / name)
    cli_error(capsys, ["--assets", str(path.parent), "--tokens", "2"], "wpe.weight", "[0, 64]")


# ---------------------------------------------------------------------------------------------
# Files that cannot be read


def loaders(assets):
    """{name: () -> load it} for the three asset files in a folder."""
    return {"model.safetensors": lambda: load_model(assets / "model.safetensors"),
            "enc": lambda: load_enc(assets / "enc", TINY.d_vocab),
            "data": lambda: load_data(assets / "data", TINY.d_vocab)}


@pytest.fixture
def assets_copy(tiny_assets, tmp_path):
    out = tmp_path / "assets"
    shutil.copytree(tiny_assets, out)
    return out


@pytest.mark.parametrize("name", ["model.safetensors", "enc", "data"])
def test_a_folder_in_place_of_the_file(assets_copy, name):
    (assets_copy / name).unlink()
    (assets_copy / name).mkdir()
    with pytest.raises(AssetError) as info:
        loaders(assets_copy)[name]()
    one_line(info, f"cannot read {assets_copy / name}: Is a directory")


def refuse_open(monkeypatch, path, error):
    """open() of path raises error; every other open() is the real one."""
    real_open = builtins.open

    def fake_open(file, *args, **kwargs):
        if os.fspath(file) == os.fspath(path):
            raise error
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", fake_open)


OS_ERRORS = [PermissionError(errno.EACCES, "Permission denied"), OSError(errno.EIO, "Input/output error")]


@pytest.mark.parametrize("error", OS_ERRORS, ids=["permission", "io-error"])
@pytest.mark.parametrize("name", ["model.safetensors", "enc", "data"])
def test_a_file_that_cannot_be_opened(assets_copy, monkeypatch, name, error):
    refuse_open(monkeypatch, assets_copy / name, error)
    with pytest.raises(AssetError) as info:
        loaders(assets_copy)[name]()
    one_line(info, f"cannot read {assets_copy / name}: {error.strerror}")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod 000 file anyway")
@pytest.mark.parametrize("name", ["model.safetensors", "enc", "data"])
def test_a_file_without_read_permission(assets_copy, name):
    (assets_copy / name).chmod(0)
    with pytest.raises(AssetError) as info:
        loaders(assets_copy)[name]()
    one_line(info, f"cannot read {assets_copy / name}: Permission denied")


def test_cli_unreadable_model_exits_1(capsys, assets_copy):
    (assets_copy / "model.safetensors").unlink()
    (assets_copy / "model.safetensors").mkdir()
    cli_error(capsys, ["--assets", str(assets_copy)], "model.safetensors", "Is a directory")


# ---------------------------------------------------------------------------------------------
# GPT-2's tokenizer



@pytest.fixture(scope="module")
def bpe_lines(bpe_file):
    return bpe_file.read_bytes().splitlines(keepends=True)


def test_gpt2_tokens_from_the_ranks_file(bpe_file):
    assert encode_prompt("Hello world", bpe_file) == [15496, 995]
    assert encode_prompt("<|endoftext|>", bpe_file) != [50256]  # special tokens stay text


def test_ranks_in_another_line_order_are_gpt2s(bpe_lines, tmp_path):
    path = tmp_path / "reversed.tiktoken"
    path.write_bytes(b"".join(reversed(bpe_lines)))
    assert encode_prompt("Hello world", path) == [15496, 995]


def swap_ranks(lines, a, b):
    lines = list(lines)
    (ta, ra), (tb, rb) = lines[a].split(), lines[b].split()
    lines[a], lines[b] = ta + b" " + rb + b"\n", tb + b" " + ra + b"\n"
    return lines


SPOILED_RANKS = [
    ("truncated", lambda lines: lines[:1000], "has 1000 ranks, GPT-2 has 50256"),
    ("one-entry", lambda lines: lines[:1], "has 1 ranks, GPT-2 has 50256"),
    ("empty", lambda lines: [], "has 0 ranks"),
    ("rank-twice", lambda lines: lines[:-1] + [lines[-1].split()[0] + b" 50254\n"], "not 0 to 50255, each once"),
    ("no-single-byte", lambda lines: [b"AAECA3p6cXE= 0\n"] + lines[1:], "lacks some of the 256 single-byte tokens"),
    ("two-ranks-swapped", lambda lines: swap_ranks(lines, 1000, 1001), "not GPT-2's"),
    ("text", lambda lines: [b"this is not a ranks file\n"], "is not a .tiktoken ranks file"),
    ("binary", lambda lines: [bytes(range(256)) * 4], "is not a .tiktoken ranks file"),
    ("bad-rank", lambda lines: [b"IQ== zero\n"] + lines[1:], "is not a .tiktoken ranks file"),
]


@pytest.mark.parametrize("spoil, words", [s[1:] for s in SPOILED_RANKS], ids=[s[0] for s in SPOILED_RANKS])
def test_ranks_that_are_not_gpt2s_are_refused(bpe_lines, tmp_path, capfd, spoil, words):
    path = tmp_path / "spoiled.tiktoken"
    path.write_bytes(b"".join(spoil(bpe_lines)))
    with pytest.raises(AssetError) as info:
        encode_prompt("Hello world", path)
    one_line(info, f"--bpe-file {path}", words)
    assert "panicked" not in capfd.readouterr().err  # refused before tiktoken could panic


def test_missing_or_unreadable_ranks_file(tmp_path, monkeypatch):
    with pytest.raises(AssetError) as info:
        gpt2_encoding(tmp_path / "none.tiktoken")
    one_line(info, "none.tiktoken not found", "gpt2.tiktoken")
    (tmp_path / "dir.tiktoken").mkdir()
    with pytest.raises(AssetError) as info:
        gpt2_encoding(tmp_path / "dir.tiktoken")
    one_line(info, "dir.tiktoken", "Is a directory")
    refuse_open(monkeypatch, tmp_path / "locked.tiktoken", OS_ERRORS[0])
    with pytest.raises(AssetError) as info:
        gpt2_encoding(tmp_path / "locked.tiktoken")
    one_line(info, "locked.tiktoken", "Permission denied")


def test_no_ranks_file_and_no_network(monkeypatch):
    import tiktoken

    def offline(name):
        raise ConnectionError("Failed to resolve 'openaipublic.blob.core.windows.net'")

    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    with pytest.raises(AssetError) as info:
        encode_prompt("Hello world", None)
    one_line(info, "could not fetch GPT-2's tokenizer", "ConnectionError", "--bpe-file")


class FakePanic(BaseException):
    """What pyo3 raises for a Rust panic: a BaseException, not an Exception."""


def test_tokenizer_panics_are_one_line(bpe_file, monkeypatch):
    import tiktoken

    class Panicking:
        def __init__(self, **kwargs):
            pass

        def encode_ordinary(self, text):
            raise FakePanic("no entry found for key")

    monkeypatch.setattr(tiktoken, "Encoding", Panicking)
    with pytest.raises(AssetError) as info:
        encode_prompt("Hello world", bpe_file)
    one_line(info, "tokenizer failed on the text", "FakePanic")

    def panics(**kwargs):
        raise FakePanic("at build")

    monkeypatch.setattr(tiktoken, "Encoding", panics)
    with pytest.raises(AssetError) as info:
        gpt2_encoding(bpe_file)
    one_line(info, "could not build GPT-2's tokenizer", "FakePanic")


def test_cli_truncated_ranks_file_exits_1(capsys, tiny_assets, bpe_lines, tmp_path):
    path = tmp_path / "cut.tiktoken"
    path.write_bytes(b"".join(bpe_lines[:1000]))
    cli_error(capsys, ["--assets", str(tiny_assets), "--tokens", "2", "--prompt", "Hello world",
                       "--bpe-file", str(path)], "cut.tiktoken", "1000 ranks")


# ---------------------------------------------------------------------------------------------
# --expected: an oracle fixture, field by field


TINY_FIXTURE = FIXTURES / "tf_oracle_tiny_fma.json"


def fixture_error(tmp_path, edit):
    """fixture_expected's one line for the tiny fma fixture with edit(fixture) applied."""
    from tf_numba.training import fixture_expected

    fixture = json.loads(TINY_FIXTURE.read_text())
    edit(fixture)
    path = tmp_path / "fixture.json"
    path.write_text(json.dumps(fixture))
    with pytest.raises(AssetError) as info:
        fixture_expected(path, TINY)
    return one_line(info, f"--expected {path}")


def config_set(key, value):
    return lambda f: f["config"].update({key: value})


def checkpoint_set(i, key, value):
    return lambda f: f["checkpoints"][i].update({key: value})


BAD_FIXTURES = [
    ("fp_model-bogus", lambda f: f.update(fp_model="bogus"), 'fp_model must be one of fma, nofma, got "bogus"'),
    ("fp_model-missing", lambda f: f.pop("fp_model"), "fp_model is missing"),
    ("input_size-zero", config_set("input_size", 0), "config.input_size must be 1 to d_seq 32, got 0"),
    ("input_size-negative", config_set("input_size", -8), "config.input_size must be 1 to d_seq 32, got -8"),
    ("input_size-over-d_seq", config_set("input_size", 33), "config.input_size must be 1 to d_seq 32, got 33"),
    ("input_size-string", config_set("input_size", "8"), 'config.input_size must be an integer, got "8"'),
    ("input_size-float", config_set("input_size", 8.0), "config.input_size must be an integer, got 8.0"),
    ("input_size-bool", config_set("input_size", True), "config.input_size must be an integer, got true"),
    ("input_size-missing", lambda f: f["config"].pop("input_size"), "config.input_size is missing"),
    ("d_model-string", config_set("d_model", "64"), 'config.d_model must be an integer, got "64"'),
    ("n_layers-missing", lambda f: f["config"].pop("n_layers"), "config.n_layers is missing"),
    ("config-missing", lambda f: f.pop("config"), "config is missing"),
    ("config-a-list", lambda f: f.update(config=[96, 32]), "config must be an object, got [96, 32]"),
    ("checkpoints-missing", lambda f: f.pop("checkpoints"), "checkpoints is missing"),
    ("checkpoints-not-a-list", lambda f: f.update(checkpoints={}), "checkpoints must be a list, got {}"),
    ("checkpoints-38", lambda f: f["checkpoints"].pop(), "it has 38 checkpoints, tf.c has 39"),
    ("checkpoints-40", lambda f: f["checkpoints"].append(f["checkpoints"][0]), "it has 40 checkpoints, tf.c has 39"),
    ("checkpoint-not-an-object", lambda f: f["checkpoints"].__setitem__(3, 5),
     "checkpoints[3] must be an object, got 5"),
    ("label-wrong", checkpoint_set(0, "label", "forward.nothing"), "checkpoints[0] is 'forward.nothing' of 512"),
    ("label-not-a-string", checkpoint_set(0, "label", 0), "checkpoints[0].label must be a string, got 0"),
    ("count-wrong", checkpoint_set(1, "count", 511), "checkpoints[1] is 'forward.h0.ln_1' of 511 elements, "
                                                      "but tf.c's is 'forward.h0.ln_1' of 512"),
    ("count-string", checkpoint_set(0, "count", "512"), 'checkpoints[0].count must be an integer, got "512"'),
    ("sum-missing", lambda f: f["checkpoints"][5].pop("sum"), "checkpoints[5].sum is missing"),
    ("sum-not-hex", checkpoint_set(5, "sum", "zz"), 'checkpoints[5].sum must be a finite hex float as C\'s %a prints it, got "zz"'),
    ("sum-overflows", checkpoint_set(5, "sum", "0x1p99999"), "checkpoints[5].sum must be a finite hex float"),
    ("sum-decimal", checkpoint_set(5, "sum", "1e5000"), "checkpoints[5].sum must be a finite hex float"),  # read as 0x1e5000
    ("sum-nan", checkpoint_set(5, "sum", "nan"), "checkpoints[5].sum must be a finite hex float"),
    ("sum-inf", checkpoint_set(5, "sum", "-inf"), "checkpoints[5].sum must be a finite hex float"),
    ("sum-a-number", checkpoint_set(5, "sum", 1.5), "checkpoints[5].sum must be a hex float string, got 1.5"),
]


@pytest.mark.parametrize("edit, words", [b[1:] for b in BAD_FIXTURES], ids=[b[0] for b in BAD_FIXTURES])
def test_fixture_fields_are_checked(tmp_path, edit, words):
    assert words in fixture_error(tmp_path, edit)


def test_fixture_for_other_weights(tmp_path):
    assert "pick its fixture" in fixture_error(tmp_path, config_set("d_model", 32))


def test_good_fixture(tmp_path):
    from tf_numba.checkpoints import checkpoints
    from tf_numba.training import fixture_expected

    T, fp_model, sums = fixture_expected(TINY_FIXTURE, TINY)
    assert (T, fp_model) == (8, "fma") and [(l, n) for l, n, _ in sums] == checkpoints(TINY, 8)
    assert sums[0][2] == float.fromhex(json.loads(TINY_FIXTURE.read_text())["checkpoints"][0]["sum"])


@pytest.mark.parametrize("content, words", [
    (b"{not json", "is not JSON"), (b"\xff\xfe{}", "is not JSON"), (b"[" * 100_000, "is not JSON"),
    (b"[1, 2]", "it must be a JSON object, got [1, 2]"),
], ids=["not-json", "not-utf8", "nested-too-deep", "a-list"])
def test_fixture_that_is_not_a_json_object(tmp_path, content, words):
    from tf_numba.training import fixture_expected

    path = tmp_path / "fixture.json"
    path.write_bytes(content)
    with pytest.raises(AssetError) as info:
        fixture_expected(path, TINY)
    one_line(info, str(path), words)


def test_fixture_that_cannot_be_read(tmp_path, monkeypatch):
    from tf_numba.training import fixture_expected

    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    for path, words in [(tmp_path / "none.json", ("not found: pick an oracle fixture",)),
                        (tmp_path, ("cannot read --expected", "Is a directory")),
                        (fifo, ("cannot read --expected", "it is a FIFO, not a file")),
                        ("/dev/zero", ("cannot read --expected", "it is a character device"))]:
        with pytest.raises(AssetError) as info:
            fixture_expected(path, TINY)
        one_line(info, str(path), *words)
    refuse_open(monkeypatch, tmp_path / "locked.json", OS_ERRORS[0])
    with pytest.raises(AssetError) as info:
        fixture_expected(tmp_path / "locked.json", TINY)
    one_line(info, "locked.json", "Permission denied")


def test_cli_bogus_fp_model_exits_1(capsys, tiny_assets, tmp_path):
    fixture = json.loads(TINY_FIXTURE.read_text())
    fixture["fp_model"] = "bogus"
    path = tmp_path / "bogus.json"
    path.write_text(json.dumps(fixture))
    cli_error(capsys, ["--assets", str(tiny_assets), "--validate", "--expected", str(path)], "fp_model", "bogus")
