"""Reading assets/: model.safetensors, enc and data, with tf.c's checks and one more.

Every problem raises AssetError with one line that names it and says how to fix it.
"""
import json
import os
import struct

import numpy as np

from .config import Config

DATA_SIZE_MAX = 1_000_000  # tf.c's tf_data_size_max, in bytes
D_K_GPT2 = 64  # tf.c's tf_d_k: the head width when the file does not say how many heads


class AssetError(Exception):
    """A bad or missing asset; str() is the one line to print."""


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
    return AssetError(
        f"{path} not found: get GPT-2 124M with `python tools/tf_assets.py download --out "
        f"{os.path.dirname(path) or '.'}` (needs a network), or run on synthetic weights made by "
        f"`python tools/tf_assets.py synth --preset gpt2 --out DIR` with --assets DIR"
    )


def _header(path):
    """The safetensors JSON header, checked the way the format defines it."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise AssetError(f"{path} is truncated ({size} bytes, no header): fetch or generate it again")
        (json_size,) = struct.unpack("<Q", head)
        if 8 + json_size > size:
            raise AssetError(
                f"{path} is truncated: its header says {json_size} bytes of JSON but the file has "
                f"{size} bytes: fetch or generate it again"
            )
        raw = f.read(json_size)
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        raise AssetError(f"{path}: the header is not JSON, so this is not a safetensors file: fetch or generate it again") from None
    if not isinstance(header, dict):
        raise AssetError(f"{path}: the header is not a JSON object, so this is not a safetensors file: fetch or generate it again")
    end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    if 8 + json_size + end > size:
        raise AssetError(
            f"{path} is truncated: its tensors need {8 + json_size + end} bytes, the file has {size}: "
            f"fetch or generate it again"
        )
    return header


def config_from_header(header, path) -> Config:
    """(vocab, seq, d_model, heads, layers) from the tensors' shapes; heads from the file's
    metadata `n_head` (HF's name) when it has one, else tf.c's head width of 64."""
    for name in ("wte.weight", "wpe.weight"):
        if name not in header:
            raise AssetError(f"{path} has no tensor {name!r}: it is not a GPT-2 safetensors file")
        if len(header[name]["shape"]) != 2:
            raise AssetError(f"{path}: {name} has shape {header[name]['shape']}, expected 2 dimensions")
    d_vocab, d_model = header["wte.weight"]["shape"]
    d_seq = header["wpe.weight"]["shape"][0]
    n_layers = 0
    while f"h.{n_layers}.ln_1.weight" in header:
        n_layers += 1
    meta = header.get("__metadata__") or {}
    try:
        n_heads = int(meta["n_head"]) if "n_head" in meta else d_model // D_K_GPT2
    except ValueError:
        raise AssetError(f"{path}: metadata n_head={meta['n_head']!r} is not an integer") from None
    if n_layers == 0 or n_heads <= 0 or d_model % n_heads:
        raise AssetError(
            f"{path}: cannot read a GPT-2 shape from it (d_model={d_model}, layers={n_layers}, "
            f"heads={n_heads}): regenerate it with tools/tf_assets.py"
        )
    return Config(d_vocab=d_vocab, d_seq=d_seq, d_model=d_model, n_heads=n_heads, n_layers=n_layers)


def load_model(path):
    """(Config, {name: float32 array}) for every tensor tf.c uses, each checked for name,
    dtype F32 and shape, read with the safetensors library."""
    from safetensors import SafetensorError, safe_open

    if not os.path.isfile(path):
        raise _missing_model(path)
    header = _header(path)
    cfg = config_from_header(header, path)
    tensors = {}
    try:
        with safe_open(path, framework="numpy") as f:
            names = set(f.keys())
            for name, shape in parameter_shapes(cfg):
                if name not in names:
                    raise AssetError(f"{path} has no tensor {name!r}: regenerate or re-download the file")
                piece = f.get_slice(name)
                if piece.get_dtype() != "F32":
                    raise AssetError(f"{path}: {name} has dtype {piece.get_dtype()}, expected F32")
                if tuple(piece.get_shape()) != shape:
                    raise AssetError(f"{path}: {name} has shape {list(piece.get_shape())}, expected {list(shape)}")
                tensors[name] = f.get_tensor(name)
    except SafetensorError as exc:
        raise AssetError(f"{path} is not a readable safetensors file ({exc}): fetch or generate it again") from None
    return cfg, tensors


def load_enc(path, d_vocab):
    """tf.c's decoder: a list of the byte string of every token id."""
    if not os.path.isfile(path):
        raise AssetError(f"{path} not found: make it with `python tools/tf_assets.py text` or `synth`")
    raw = open(path, "rb").read()
    table_size = d_vocab * 8
    if len(raw) <= table_size:
        raise AssetError(
            f"{path} has {len(raw)} bytes, too few for {d_vocab} (offset, size) pairs and their bytes: "
            f"make it again for this vocabulary"
        )
    items = np.frombuffer(raw[:table_size], dtype="<u4").reshape(d_vocab, 2)
    text = raw[table_size:]
    if np.any(items[:, 1] == 0):
        raise AssetError(f"{path}: token {int(np.argmin(items[:, 1]))} is empty: make the file again")
    if int(items[-1, 0]) + int(items[-1, 1]) != len(text):
        raise AssetError(
            f"{path} has the wrong size: its last token ends at {int(items[-1, 0]) + int(items[-1, 1])} "
            f"but there are {len(text)} bytes of text: make it again for this vocabulary"
        )
    if np.any(items[:, 0].astype(np.int64) + items[:, 1] > len(text)):
        raise AssetError(f"{path}: a token runs past the end of the file: make it again")
    return [text[o : o + s] for o, s in items.tolist()]


def load_data(path, d_vocab):
    """The token ids of assets/data (little-endian uint16)."""
    if not os.path.isfile(path):
        raise AssetError(f"{path} not found: make it with `python tools/tf_assets.py text` or `synth`")
    size = os.path.getsize(path)
    if size > DATA_SIZE_MAX:
        raise AssetError(f"{path} has {size} bytes, more than tf.c's {DATA_SIZE_MAX}: use a shorter text")
    if size % 2:
        raise AssetError(f"{path} has an odd length ({size} bytes), so it is not uint16 tokens: make it again")
    tokens = np.fromfile(path, dtype="<u2")
    if tokens.size == 0:
        raise AssetError(f"{path} is empty: make it from a text with `python tools/tf_assets.py text`")
    if int(tokens.max()) >= d_vocab:
        bad = int(np.argmax(tokens >= d_vocab))
        raise AssetError(
            f"{path}: token {bad} is id {int(tokens[bad])}, not below the vocabulary size {d_vocab}: "
            f"make the data with the same vocabulary as the weights"
        )
    return tokens
