"""Reading assets/: model.safetensors, enc and data, with tf.c's checks and more; and GPT-2's
tokenizer. tools/tf_assets.py and tools/tf_oracle.py read through this module too.

Every problem raises AssetError with one line that names it and says how to fix it.
"""
import base64
import contextlib
import hashlib
import json
import math
import os
import re
import struct

import numpy as np

from cudakit.files import special_file

from .config import Config

DATA_SIZE_MAX = 1_000_000  # tf.c's tf_data_size_max, in bytes
D_K_GPT2 = 64  # tf.c's tf_d_k: the head width when the file does not say how many heads
AGAIN = "fetch or generate the file again"

GPT2_PAT = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
GPT2_RANKS = 50256  # mergeable ranks; <|endoftext|> is token 50256
# sha256 of GPT-2's ranks written in tiktoken's format ("base64 rank\n", by rank): tiktoken's
# published r50k_base.tiktoken, whose ranks are GPT-2's.
GPT2_RANKS_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"


class AssetError(Exception):
    """A bad or missing asset; str() is the one line to print."""


def excerpt(value, limit=60) -> str:
    """A JSON value as a short one-line excerpt, for messages."""
    text = json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@contextlib.contextmanager
def opened(path, missing: str, label=""):
    """The file open for reading; a missing one raises AssetError(missing), any other OS error
    (permissions, a folder in its place, an I/O error) and a FIFO or device one line that names
    it (`label`, e.g. an option, then the path) with the reason."""
    kind = special_file(path)
    if kind:
        raise AssetError(f"cannot read {label}{path}: it is {kind}, not a file: give a regular file")
    try:
        with open(path, "rb") as f:
            yield f
    except FileNotFoundError:
        raise AssetError(missing) from None
    except OSError as exc:
        raise AssetError(f"cannot read {label}{path}: {exc.strerror or exc}: make it a readable file "
                         f"(check its permissions, or make it again)") from None


def parameter_shapes(cfg: Config):
    """[(tensor name, shape)] of every tensor tf.c reads, in struct tf_parameters' order."""
    D = cfg.d_model
    shapes = [("wte.weight", (cfg.d_vocab, D)), ("wpe.weight", (cfg.d_seq, D))]
    for h in range(cfg.n_layers):
        shapes += [
            (f"h.{h}.ln_1.bias", (D,)),
            (f"h.{h}.ln_1.weight", (D,)),
            (f"h.{h}.attn.c_attn.bias", (3 * D,)),
            (f"h.{h}.attn.c_attn.weight", (D, 3 * D)),
            (f"h.{h}.attn.c_proj.bias", (D,)),
            (f"h.{h}.attn.c_proj.weight", (D, D)),
            (f"h.{h}.ln_2.bias", (D,)),
            (f"h.{h}.ln_2.weight", (D,)),
            (f"h.{h}.mlp.c_fc.bias", (4 * D,)),
            (f"h.{h}.mlp.c_fc.weight", (D, 4 * D)),
            (f"h.{h}.mlp.c_proj.bias", (D,)),
            (f"h.{h}.mlp.c_proj.weight", (4 * D, D)),
        ]
    shapes += [("ln_f.bias", (D,)), ("ln_f.weight", (D,))]
    return shapes


def _missing_model(path):
    return (f"{path} not found: get GPT-2 124M with `python tools/tf_assets.py download --out "
            f"{os.path.dirname(path) or '.'}` (needs a network), or run on synthetic weights made by "
            f"`python tools/tf_assets.py synth --preset gpt2 --out DIR` with --assets DIR")


def is_int(value):
    """A JSON integer: true and false are not sizes, though Python's bool is an int."""
    return isinstance(value, int) and not isinstance(value, bool)


def _check_tensor(path, name, entry, data_size):
    """One header entry's fields, each type and range checked before it is used."""
    def bad(what):
        return AssetError(f"{path}: tensor {name!r}: {what}: {AGAIN}")

    if not isinstance(entry, dict):
        raise bad(f"the entry must be an object, got {excerpt(entry)}")
    for field in ("dtype", "shape", "data_offsets"):
        if field not in entry:
            raise bad(f"{field} is missing")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str):
        raise bad(f"dtype must be a string, got {excerpt(dtype)}")
    if not isinstance(shape, list) or not all(is_int(n) and n >= 0 for n in shape):
        raise bad(f"shape must be a list of non-negative integers, got {excerpt(shape)}")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(is_int(n) for n in offsets):
        raise bad(f"data_offsets must be two integers, got {excerpt(offsets)}")
    begin, end = offsets
    if not 0 <= begin <= end:
        raise bad(f"data_offsets must be 0 <= begin <= end, got {excerpt(offsets)}")
    if end > data_size:
        raise AssetError(f"{path} is truncated: tensor {name!r}'s data_offsets end at byte {end} of the "
                         f"data, which has {data_size} bytes: {AGAIN}")
    if dtype == "F32" and end - begin != math.prod(shape) * 4:
        raise bad(f"data_offsets {excerpt(offsets)} hold {end - begin} bytes, but F32 of shape "
                  f"{excerpt(shape)} is {math.prod(shape) * 4}")


class _Object(dict):
    """A JSON object of a header, with the first name it gives twice, if any (json keeps the
    last)."""
    repeated = None


def _object(pairs):
    obj = _Object(pairs)
    if len(obj) < len(pairs):
        seen = set()
        obj.repeated = next(k for k, _ in pairs if k in seen or seen.add(k))
    return obj


def read_header(path):
    """(header dict, raw JSON bytes) of a safetensors file, every entry checked the way the
    format defines it: `__metadata__` an object of strings, each tensor's dtype, shape and
    data_offsets (inside the file)."""
    with opened(path, _missing_model(path)) as f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(8)
        if len(head) < 8:
            raise AssetError(f"{path} is truncated ({size} bytes, no header): {AGAIN}")
        (json_size,) = struct.unpack("<Q", head)
        if 8 + json_size > size:
            raise AssetError(f"{path} is truncated: its header says {json_size} bytes of JSON but the file "
                             f"has {size} bytes: {AGAIN}")
        raw = f.read(json_size)
    try:
        header = json.loads(raw, object_pairs_hook=_object)
    except (ValueError, RecursionError):  # not UTF-8, not JSON, or nested too deep for a header
        raise AssetError(f"{path}: the header is not JSON, so this is not a safetensors file: {AGAIN}") from None
    if not isinstance(header, dict):
        raise AssetError(f"{path}: the header is not a JSON object, so this is not a safetensors file: {AGAIN}")
    if header.repeated is not None:
        raise AssetError(f"{path}: the header names {header.repeated!r} twice; tf.c would read the first, the "
                         f"safetensors library the last: {AGAIN}")
    for name, entry in header.items():
        if isinstance(entry, _Object) and entry.repeated is not None:
            raise AssetError(f"{path}: {name!r} gives {entry.repeated!r} twice: {AGAIN}")
        if name != "__metadata__":
            _check_tensor(path, name, entry, size - 8 - json_size)
        elif not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
            raise AssetError(f"{path}: __metadata__ must be an object of strings, got {excerpt(entry)}: {AGAIN}")
    return header, raw


def _check_layout(path, header, data_size):
    """The format's rule on where tensors lie, which the safetensors library enforces naming one
    tensor: taken by their offsets, each begins where the one before ends, and the last ends at
    the end of the file."""
    at, before = 0, None
    for begin, end, name in sorted((*entry["data_offsets"], name) for name, entry in header.items()
                                   if name != "__metadata__"):
        if begin != at:
            where = f"tensor {before!r} ends at byte {at} of the data" if before else "the data begins at byte 0"
            what = "overlap" if begin < at else "leave a gap"
            raise AssetError(f"{path}: tensor {name!r} begins at byte {begin} and {where}: tensors that {what} "
                             f"are not a safetensors file: {AGAIN}")
        at, before = end, name
    if at != data_size:
        raise AssetError(f"{path}: its tensors end at byte {at} of the data, which has {data_size} bytes: "
                         f"bytes after the last tensor are not a safetensors file: {AGAIN}")


def _n_heads(header, path, d_model):
    """The file's metadata `n_head` (HF's name) when it has one, else tf.c's head width of 64."""
    meta = header.get("__metadata__", {})
    if "n_head" not in meta:
        if d_model % D_K_GPT2:
            raise AssetError(f"{path} has no n_head metadata, so heads are {D_K_GPT2} wide (tf.c's tf_d_k), "
                             f"but d_model {d_model} is not a multiple of {D_K_GPT2}: regenerate it with "
                             f"tools/tf_assets.py synth, which records n_head")
        return d_model // D_K_GPT2
    n_head = meta["n_head"]
    if not re.fullmatch(r"[0-9]+", n_head) or int(n_head) == 0 or d_model % int(n_head):
        raise AssetError(f"{path}: metadata n_head {n_head!r} must be a positive integer that divides "
                         f"d_model {d_model}: regenerate it with tools/tf_assets.py synth")
    return int(n_head)


def config_from_header(header, path) -> Config:
    """(vocab, seq, d_model, heads, layers) from a checked header (read_header), and every tensor
    tf.c reads checked for its name, dtype F32 and shape."""
    for name, rows in (("wte.weight", "d_vocab"), ("wpe.weight", "d_seq")):
        if name not in header:
            raise AssetError(f"{path} has no tensor {name!r}: it is not a GPT-2 safetensors file")
        shape = header[name]["shape"]
        if len(shape) != 2 or 0 in shape:
            raise AssetError(f"{path}: tensor {name!r} has shape {shape}, expected [{rows}, d_model], "
                             f"both at least 1: {AGAIN}")
    d_vocab, d_model = header["wte.weight"]["shape"]
    d_seq = header["wpe.weight"]["shape"][0]
    n_layers = 0
    while f"h.{n_layers}.ln_1.weight" in header:
        n_layers += 1
    if n_layers == 0:
        raise AssetError(f"{path} has no layers (no tensor 'h.0.ln_1.weight'): it is not a GPT-2 safetensors file")
    beyond = sorted({int(m.group(1)) for m in map(re.compile(r"h\.([0-9]+)\.").match, header) if m} - set(range(n_layers)))
    if beyond:  # layers past a gap would be dropped without a word
        raise AssetError(f"{path} has tensors of layer {beyond[0]} but no 'h.{n_layers}.ln_1.weight': its layers "
                         f"must be numbered 0, 1, 2, ... without a gap: {AGAIN}")
    cfg = Config(d_vocab=d_vocab, d_seq=d_seq, d_model=d_model, n_heads=_n_heads(header, path, d_model),
                 n_layers=n_layers)
    for name, shape in parameter_shapes(cfg):
        if name not in header:
            raise AssetError(f"{path} has no tensor {name!r}: {AGAIN}")
        entry = header[name]
        if entry["dtype"] != "F32":
            raise AssetError(f"{path}: {name} has dtype {entry['dtype']}, expected F32: {AGAIN}")
        if tuple(entry["shape"]) != shape:
            raise AssetError(f"{path}: {name} has shape {entry['shape']}, expected {list(shape)}: {AGAIN}")
    return cfg


def load_model(path):
    """(Config, {name: float32 array}) for every tensor tf.c uses, the header checked here
    (read_header, config_from_header, _check_layout), the tensors read with the safetensors library."""
    from safetensors import SafetensorError, safe_open

    header, raw = read_header(path)
    cfg = config_from_header(header, path)
    _check_layout(path, header, os.path.getsize(path) - 8 - len(raw))  # after what says more: a shape, a dtype
    try:
        with safe_open(str(path), framework="numpy") as f:
            tensors = {name: f.get_tensor(name) for name, _ in parameter_shapes(cfg)}
    except (SafetensorError, OSError) as exc:
        raise AssetError(f"{path} is not a readable safetensors file ({exc}): {AGAIN}") from None
    for name, tensor in tensors.items():  # tf.c would compute on, and print nonsense tokens
        finite = np.isfinite(tensor)
        if not finite.all():
            index = np.unravel_index(int(np.argmin(finite)), tensor.shape)
            raise AssetError(f"{path}: tensor {name!r} holds {tensor[index]} at {list(map(int, index))}: the "
                             f"weights must be finite: {AGAIN}")
    return cfg, tensors


def load_enc(path, d_vocab):
    """tf.c's decoder: a list of the byte string of every token id."""
    table_size = d_vocab * 8
    with opened(path, f"{path} not found: make it with `python tools/tf_assets.py text` or `synth`") as f:
        size = os.fstat(f.fileno()).st_size
        if size <= table_size:
            raise AssetError(
                f"{path} has {size} bytes, too few for {d_vocab} (offset, size) pairs and their bytes: "
                f"make it again for this vocabulary"
            )
        items = np.frombuffer(f.read(table_size), dtype="<u4").reshape(d_vocab, 2)
        if np.any(items[:, 1] == 0):
            raise AssetError(f"{path}: token {int(np.argmin(items[:, 1]))} is empty: make the file again")
        if int(items[-1, 0]) + int(items[-1, 1]) != size - table_size:  # checked before the text is read
            raise AssetError(
                f"{path} has the wrong size: its last token ends at {int(items[-1, 0]) + int(items[-1, 1])} "
                f"but there are {size - table_size} bytes of text: make it again for this vocabulary"
            )
        text = f.read()
    if np.any(items[:, 0].astype(np.int64) + items[:, 1] > len(text)):
        raise AssetError(f"{path}: a token runs past the end of the file: make it again")
    return [text[o : o + s] for o, s in items.tolist()]


def load_data(path, d_vocab):
    """The token ids of assets/data (little-endian uint16)."""
    with opened(path, f"{path} not found: make it with `python tools/tf_assets.py text` or `synth`") as f:
        size = os.fstat(f.fileno()).st_size
        if size > DATA_SIZE_MAX:
            raise AssetError(f"{path} has {size} bytes, more than tf.c's {DATA_SIZE_MAX}: use a shorter text")
        raw = f.read()
    if len(raw) % 2:
        raise AssetError(f"{path} has an odd length ({len(raw)} bytes), so it is not uint16 tokens: make it again")
    tokens = np.frombuffer(raw, dtype="<u2")
    if tokens.size == 0:
        raise AssetError(f"{path} is empty: make it from a text with `python tools/tf_assets.py text`")
    if int(tokens.max()) >= d_vocab:
        bad = int(np.argmax(tokens >= d_vocab))
        raise AssetError(
            f"{path}: token {bad} is id {int(tokens[bad])}, not below the vocabulary size {d_vocab}: "
            f"make the data with the same vocabulary as the weights"
        )
    return tokens


# ---------------------------------------------------------------------------------------------
# GPT-2's tokenizer


def _tokenizer(call, failed, fix):
    """call() with any tokenizer failure as one line: tiktoken's Rust panics arrive as pyo3's
    PanicException, a BaseException."""
    try:
        return call()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        raise AssetError(f"{failed} ({type(exc).__name__}): {fix}") from None


def _tiktoken_listing(ranks) -> bytes:
    """The ranks in tiktoken's file format, by rank: the same bytes however the file was laid out."""
    return b"".join(b"%s %d\n" % (base64.b64encode(token), ranks[token]) for token in sorted(ranks, key=ranks.get))


def gpt2_ranks(bpe_file) -> dict:
    """{token bytes: rank} from a .tiktoken file, refused unless they are exactly GPT-2's.

    Read here, not with tiktoken.load.load_tiktoken_bpe, which caches local files by path in
    the temp folder and then reads the cached copy even after the file changes."""
    with opened(bpe_file, f"--bpe-file {bpe_file} not found: pass GPT-2's gpt2.tiktoken ranks file",
                "--bpe-file ") as f:
        raw = f.read()
    try:
        ranks = {base64.b64decode(token): int(rank)
                 for token, rank in (line.split() for line in raw.splitlines() if line)}
    except ValueError:  # a line that is not `base64 rank`
        raise AssetError(f"--bpe-file {bpe_file} is not a .tiktoken ranks file (lines of `base64 rank`): "
                         f"pass GPT-2's gpt2.tiktoken") from None
    if len(ranks) != GPT2_RANKS:
        problem = f"has {len(ranks)} ranks, GPT-2 has {GPT2_RANKS}"
    elif sorted(ranks.values()) != list(range(GPT2_RANKS)):
        problem = f"has ranks that are not 0 to {GPT2_RANKS - 1}, each once"
    elif not all(bytes([b]) in ranks for b in range(256)):
        problem = "lacks some of the 256 single-byte tokens"
    elif hashlib.sha256(_tiktoken_listing(ranks)).hexdigest() != GPT2_RANKS_SHA256:
        problem = "has tokens or an order that are not GPT-2's"
    else:
        return ranks
    raise AssetError(f"--bpe-file {bpe_file} {problem}, so text would be tokenized wrong: pass GPT-2's "
                     f"gpt2.tiktoken")


def gpt2_encoding(bpe_file=None):
    """tiktoken's GPT-2 encoding: from a .tiktoken ranks file (offline), or tiktoken's own, which
    it downloads."""
    import tiktoken

    if bpe_file is None:
        return _tokenizer(lambda: tiktoken.get_encoding("gpt2"), "tiktoken could not fetch GPT-2's tokenizer",
                          "offline, pass --bpe-file PATH to a gpt2.tiktoken ranks file")
    ranks = gpt2_ranks(bpe_file)  # checked first: a wrong table makes tiktoken panic or tokenize wrong
    return _tokenizer(lambda: tiktoken.Encoding(name="gpt2", pat_str=GPT2_PAT, mergeable_ranks=ranks,
                                                special_tokens={"<|endoftext|>": GPT2_RANKS}),
                      f"tiktoken could not build GPT-2's tokenizer from {bpe_file}", "pass GPT-2's gpt2.tiktoken")


def encode_prompt(text, bpe_file):
    """GPT-2's token ids of text (special tokens as plain text)."""
    encoding = gpt2_encoding(bpe_file)
    return _tokenizer(lambda: encoding.encode_ordinary(text), "GPT-2's tokenizer failed on the text",
                      "reinstall tiktoken (pip install --force-reinstall tiktoken)")
