"""Assets that tf.c and tf_numba read: model.safetensors, enc and data (read by tf_numba.assets).

  text      text -> data (GPT-2 tokens as little-endian uint16) and enc (tf.c's decoder file)
  download  GPT-2 124M model.safetensors from its public model hub
  synth     synthetic weights of any size, with a matching enc and data

Synthetic values come from an integer hash of (tensor name, element index), so the files are
the same bits on every machine and numpy version. Nothing is overwritten without --force, and
every file is written to a temporary name in the same folder, then renamed (a failure or SIGTERM
removes it). synth refuses a model.safetensors over 2**31 - 1 bytes, which tf.c cannot address:
it reads each tensor's data_offsets with atoi, an int.

Exit status: 0 written; 1 bad data or environment (an unreadable input, a file in the way, too
little disk space, a failed download); 2 a usage error (a bad option, sizes tf.c cannot read).
"""
import argparse
import contextlib
import dataclasses
import hashlib
import http.client
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import urllib.parse
import urllib.request
import zlib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tool_cli import OneLineParser, UsageError, integer, not_a_file, parsed, path_arg, unwritable  # noqa: E402
from tf_numba.assets import AssetError, encode_prompt, gpt2_encoding  # noqa: E402
from tf_numba.config import GPT2, INPUT_SIZE, TINY, Config  # noqa: E402

DATA_SIZE_MAX = 1_000_000  # tf.c's tf_data_size_max, in bytes
GPT2_ENC_SIZE = 722_883  # tf.c's tf_enc_file_size
GPT2_FILE_SIZE = 548_105_171  # tf.c's tf_safetensor_file_size
GPT2_URL = "https://huggingface.co/openai-community/gpt2/resolve/main/model.safetensors"
# The tiny preset's training step: T inputs (tf.c's `input_size = 64`, patched by the oracle).
TINY_INPUT_SIZE = 8
PRESETS = {"tiny": TINY, "gpt2": GPT2}
CHUNK = 1 << 22  # elements hashed at a time: bounds memory for the 124M file
# tf.c reads every tensor's data_offsets with atoi, an int: the tensor data must end by INT_MAX.
# synth bounds the whole file by it (the header is small beside the data).
TF_C_MAX_BYTES = 2**31 - 1
# The shortest header entry (`"h.0.ln_1.bias":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},`
# is 66 bytes): a lower bound on the header, to refuse a huge layer count before building it.
HEADER_ENTRY_MIN = 60


class ToolError(Exception):
    """Bad input or environment: main() prints it as one line and exits 1 (as it does the package's
    AssetError)."""


# ---------------------------------------------------------------------------------------------
# The synthetic generator


def hash64(key: int, index: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer of (key << 32 | index), in wrapping uint64 arithmetic."""
    z = (np.uint64(key) << np.uint64(32)) | index.astype(np.uint64)
    z += np.uint64(0x9E3779B97F4A7C15)
    z ^= z >> np.uint64(30)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    z ^= z >> np.uint64(27)
    z *= np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return z


def tensor_key(name: str) -> int:
    return zlib.crc32(name.encode())


def scale(name: str, cfg: Config):
    """(center, standard deviation) of a tensor, near trained GPT-2's: matrices 1/sqrt(fan-in)
    so that every block moves the residual stream (weights of 0.02 leave a model that only
    repeats its last token), layernorm weights near 1, biases small. Biases and layernorm
    parameters are not 0 and 1 exactly, so that mixing them up shows."""
    if name in ("wte.weight", "wpe.weight"):
        return 0.0, 0.1
    if ".ln_" in name or name.startswith("ln_f."):
        return (1.0, 0.1) if name.endswith("weight") else (0.0, 0.05)
    if name.endswith("weight"):
        return 0.0, 1.0 / math.sqrt(tensor_shapes(cfg)[name][0])
    return 0.0, 0.02


def synthetic_values(name: str, start: int, count: int, cfg: Config) -> np.ndarray:
    """Elements [start, start + count) of a tensor: uniform with the tensor's center and
    deviation, from the top 24 bits of the hash. Every step is exact or one IEEE rounding."""
    center, std = scale(name, cfg)
    bits = hash64(tensor_key(name), np.arange(start, start + count, dtype=np.uint64)) >> np.uint64(40)
    unit = (bits.astype(np.float64) * 2.0 + 1.0) / 2.0**24 - 1.0  # in (-1, 1), exact
    return (center + unit * (std * math.sqrt(3.0))).astype(np.float32)


def tensor_shapes(cfg: Config) -> dict:
    """GPT-2's safetensors names and shapes (Conv1D weights are [in, out])."""
    V, S, D, L = cfg.d_vocab, cfg.d_seq, cfg.d_model, cfg.n_layers
    shapes = {"wte.weight": [V, D], "wpe.weight": [S, D]}
    for h in range(L):
        p = f"h.{h}."
        shapes.update({
            p + "ln_1.weight": [D], p + "ln_1.bias": [D],
            p + "attn.bias": [1, 1, S, S],
            p + "attn.c_attn.weight": [D, 3 * D], p + "attn.c_attn.bias": [3 * D],
            p + "attn.c_proj.weight": [D, D], p + "attn.c_proj.bias": [D],
            p + "ln_2.weight": [D], p + "ln_2.bias": [D],
            p + "mlp.c_fc.weight": [D, 4 * D], p + "mlp.c_fc.bias": [4 * D],
            p + "mlp.c_proj.weight": [4 * D, D], p + "mlp.c_proj.bias": [D],
        })
    shapes.update({"ln_f.weight": [D], "ln_f.bias": [D]})
    return shapes


def tensor_chunks(name: str, shape: list, cfg: Config):
    """The tensor's float32 bytes, a chunk at a time. `h.N.attn.bias` is GPT-2's causal mask."""
    if name.endswith(".attn.bias"):  # by rows: the S x S mask may be larger than memory
        S = shape[-1]
        for first in range(0, S, max(1, CHUNK // S)):
            rows = np.arange(first, min(S, first + max(1, CHUNK // S)))[:, None]
            yield (np.arange(S)[None, :] <= rows).astype(np.float32).tobytes()
        return
    count = math.prod(shape)
    for start in range(0, count, CHUNK):
        yield synthetic_values(name, start, min(CHUNK, count - start), cfg).tobytes()


def safetensors_header(shapes: dict, metadata: dict) -> bytes:
    """The JSON header as the safetensors library writes it: tensors sorted by name, compact
    separators (tf.c's key search expects `"data_offsets":[`), padded with spaces to 8 bytes."""
    header = {"__metadata__": metadata}
    offset = 0
    for name in sorted(shapes):
        size = math.prod(shapes[name]) * 4
        header[name] = {"dtype": "F32", "shape": shapes[name], "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    return raw + b" " * (-len(raw) % 8)


def synth_command(cfg: Config, n_tokens: int, gpt2_enc: bool) -> str:
    """The synth command that makes these exact bytes, recorded in the file's metadata."""
    cmd = (f"tools/tf_assets.py synth --vocab {cfg.d_vocab} --seq {cfg.d_seq} --d-model {cfg.d_model}"
           f" --heads {cfg.n_heads} --layers {cfg.n_layers} --tokens {n_tokens}")
    return cmd + (" --bpe-file gpt2.tiktoken" if gpt2_enc else "")


def synthetic_enc_tokens(d_vocab: int) -> list:
    """V distinct non-empty byte strings: printable ASCII first, then `<i>`."""
    return [bytes([32 + i]) if i < 95 else f"<{i}>".encode() for i in range(d_vocab)]


def synthetic_data(d_vocab: int, n_tokens: int) -> np.ndarray:
    return (hash64(tensor_key("data"), np.arange(n_tokens, dtype=np.uint64)) % np.uint64(d_vocab)).astype("<u2")


def check_config(cfg: Config, n_tokens: int):
    """Refuse (UsageError, exit 2) sizes that tf.c cannot take."""
    if min(cfg.d_vocab, cfg.d_seq, cfg.d_model, cfg.n_heads, cfg.n_layers) < 1:
        raise UsageError(f"every size must be at least 1, got {cfg}")
    if cfg.d_model % cfg.n_heads:
        raise UsageError(f"d_model {cfg.d_model} is not a multiple of heads {cfg.n_heads}; pick sizes that divide")
    if cfg.d_vocab > 65536:
        raise UsageError(f"vocab {cfg.d_vocab} does not fit tf.c's uint16 tokens; use at most 65536")
    if not 1 <= n_tokens <= DATA_SIZE_MAX // 2:
        raise UsageError(f"--tokens {n_tokens} must be between 1 and {DATA_SIZE_MAX // 2} (tf.c's data limit)")


def tensor_bytes(cfg: Config) -> int:
    """The bytes of tensor_shapes(cfg)'s float32 data, from the sizes alone (any n_layers, at once)."""
    V, S, D, L = cfg.d_vocab, cfg.d_seq, cfg.d_model, cfg.n_layers
    per_layer = 12 * D * D + S * S + 13 * D  # c_attn, c_proj, c_fc, mlp.c_proj; the mask; biases and layernorms
    return 4 * (V * D + S * D + L * per_layer + 2 * D)


def check_size(cfg: Config, n_tokens: int):
    """Refuse (UsageError, exit 2) a model.safetensors that tf.c could not read, before anything is made."""
    lowest = tensor_bytes(cfg) + 8 + HEADER_ENTRY_MIN * (13 * cfg.n_layers + 4)
    if lowest > TF_C_MAX_BYTES:
        raise UsageError(f"--vocab {cfg.d_vocab} --seq {cfg.d_seq} --d-model {cfg.d_model} --layers {cfg.n_layers} "
                         f"make a model.safetensors of at least {lowest:,} bytes; tf.c reads tensor offsets with atoi, "
                         f"so at most {TF_C_MAX_BYTES:,}: lower --d-model, --seq, --layers or --vocab")


def write_synthetic(out_dir, cfg: Config, n_tokens: int = INPUT_SIZE + 1, *, bpe_file=None, force=False) -> None:
    """Write out_dir/model.safetensors, out_dir/enc and out_dir/data for cfg.

    enc is GPT-2's when bpe_file (a gpt2 .tiktoken ranks file) is given, which needs
    d_vocab 50257, else synthetic. data holds n_tokens hashed token ids below d_vocab."""
    check_config(cfg, n_tokens)
    check_size(cfg, n_tokens)
    if bpe_file is not None and cfg.d_vocab != GPT2.d_vocab:
        raise UsageError(f"--bpe-file gives GPT-2's {GPT2.d_vocab}-token enc, but vocab is {cfg.d_vocab}; "
                         "drop --bpe-file")
    tokens = gpt2_enc_tokens(gpt2_encoding(bpe_file)) if bpe_file is not None else synthetic_enc_tokens(cfg.d_vocab)
    shapes = tensor_shapes(cfg)
    metadata = {"format": "pt", "n_head": str(cfg.n_heads), "made_by": synth_command(cfg, n_tokens, bpe_file is not None)}
    header = safetensors_header(shapes, metadata)
    enc = encode_enc(tokens)

    def model_chunks():
        yield len(header).to_bytes(8, "little")
        yield header
        for name in sorted(shapes):
            yield from tensor_chunks(name, shapes[name], cfg)

    model_size = 8 + len(header) + tensor_bytes(cfg)
    if model_size > TF_C_MAX_BYTES:  # the header's real size: check_size took its lower bound
        raise UsageError(f"model.safetensors would be {model_size:,} bytes; tf.c reads tensor offsets with atoi, "
                         f"so at most {TF_C_MAX_BYTES:,}: lower --d-model, --seq, --layers or --vocab")
    write_files(Path(out_dir), {
        "model.safetensors": model_chunks,
        "enc": lambda: [enc],
        "data": lambda: [synthetic_data(cfg.d_vocab, n_tokens).tobytes()],
    }, force, need_bytes=model_size + len(enc) + 2 * n_tokens)


# ---------------------------------------------------------------------------------------------
# tf.c's enc and data, from GPT-2's tokenizer (tf_numba.assets)


def gpt2_enc_tokens(encoding) -> list:
    return [encoding.decode_single_token_bytes(i) for i in range(encoding.n_vocab)]


def encode_enc(tokens: list) -> bytes:
    """tf.c's decoder file: (offset, size) as little-endian uint32 per token, then the bytes."""
    sizes = np.array([len(t) for t in tokens], dtype="<u4")
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype("<u4")
    return np.stack([offsets, sizes], axis=1).tobytes() + b"".join(tokens)


def encode_data(tokens) -> bytes:
    data = np.asarray(tokens, dtype="<u2").tobytes()
    if len(data) > DATA_SIZE_MAX:
        raise ToolError(f"the text is {len(tokens)} tokens = {len(data)} bytes, over tf.c's "
                        f"{DATA_SIZE_MAX}-byte data limit; use a shorter text")
    return data


def write_text_assets(text_file, out_dir, bpe_file=None, force=False) -> None:
    kind = not_a_file(text_file)
    if kind:  # a FIFO would block the read, /dev/zero never end it
        raise ToolError(f"--input {text_file} is {kind}, not a text file; pass a regular file")
    try:
        text = Path(text_file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ToolError(f"cannot read {text_file} as UTF-8 text ({exc}); pass a text file") from None
    if not text:  # GPT-2's BPE gives any other text at least one token
        raise ToolError(f"{text_file} holds no text, so data would be empty (tf_numba refuses it); pass a text file")
    data = encode_data(encode_prompt(text, bpe_file))
    enc = encode_enc(gpt2_enc_tokens(gpt2_encoding(bpe_file)))
    write_files(Path(out_dir), {"data": lambda: [data], "enc": lambda: [enc]}, force, need_bytes=len(data) + len(enc))


def download(out_dir, url=GPT2_URL, force=False) -> None:
    """Fetch GPT-2 124M's model.safetensors and keep it only if its size is tf.c's."""
    try:
        request = urllib.request.Request(url)
    except ValueError as exc:  # no scheme: urllib's "unknown url type"; a malformed option, as an empty path is
        raise UsageError(f"--url {url!r} is not a URL ({exc}); pass an https:// or file:// address") from None
    if request.type == "file":
        local = urllib.request.url2pathname(urllib.parse.urlparse(url).path)
        kind = not_a_file(local)
        if kind:  # a FIFO blocks, a device such as /dev/zero never ends
            raise ToolError(f"--url {url} is {kind}, not a file; pass the address of a regular file")

    def chunks():
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                while block := response.read(1 << 20):
                    yield block
        except (OSError, ValueError, http.client.HTTPException) as exc:
            raise ToolError(f"cannot download {url} ({exc}); this needs a network, or copy the file in by hand") from None

    write_files(Path(out_dir), {"model.safetensors": chunks}, force, expect_size=GPT2_FILE_SIZE,
                need_bytes=GPT2_FILE_SIZE)


# ---------------------------------------------------------------------------------------------
# Files


def check_out(out_dir: Path, names, force: bool, need_bytes=0, option="--out") -> list:
    """Refuse before any work what write_files would fail on: a file above out_dir, an unwritable
    folder, one of names already there without force (or a folder or FIFO in its place), too little
    free space. The folders to make, deepest first; messages name the option that gave the path."""
    missing = []
    folder = out_dir
    while not folder.exists():  # also False under a regular file
        missing.append(folder)
        folder = folder.parent
    if not folder.is_dir():
        raise ToolError(f"cannot write in {out_dir}: {folder} is a file, not a folder; pick another {option}")
    for name in names:
        problem = unwritable(out_dir / name)
        if problem:
            raise ToolError(f"cannot write {out_dir / name}: {problem}; pick another {option}")
    existing = [str(out_dir / name) for name in names if (out_dir / name).exists()]
    if existing and not force:
        raise ToolError(f"{', '.join(existing)} already exists; pass --force to replace it")
    free = shutil.disk_usage(folder).free
    if need_bytes > free:  # the old files stay until the new ones are renamed over them
        raise ToolError(f"{out_dir} needs {need_bytes:,} bytes but {folder} has {free:,} free; free some space "
                        f"or pick another {option}")
    return missing


HELD = {"depth": 0, "signal": None}  # sigterm_held's state: blocks open, a SIGTERM put off


@contextlib.contextmanager
def sigterm_held():
    """SIGTERM put off until the block is done: a file or folder made and noted for cleanup
    together (a SIGTERM between the two, the moment the file appears, would leave it behind).
    Put off by `terminated`, not masked: a signal masked in this thread may still reach another
    (a library's), and Python then runs the handler here all the same."""
    HELD["depth"] += 1
    try:
        yield
    finally:
        HELD["depth"] -= 1
        if HELD["depth"] == 0 and HELD["signal"] is not None:
            signum, HELD["signal"] = HELD["signal"], None
            raise SystemExit(128 + signum)


def write_files(out_dir: Path, files: dict, force: bool, expect_size=None, need_bytes=0) -> None:
    """Write {name: () -> iterable of bytes} into out_dir, making it if needed. Refuse before
    writing anything what check_out refuses. Every file goes to a temporary name in out_dir and
    all are renamed at the end, so a failure (SIGTERM too, under main()) leaves none of them, nor
    a folder that this call made. A file of expect_size bytes stops as soon as it has more."""
    made, temporaries, done = [], [], False
    try:
        missing = check_out(out_dir, files, force, need_bytes)
        for path in reversed(missing):
            with sigterm_held():
                path.mkdir()
                made.append(path)
        for name, chunks in files.items():
            with sigterm_held():
                fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=f".{name}.", suffix=".tmp")
                temporaries.append((tmp, out_dir / name))
            with os.fdopen(fd, "wb") as f:
                for block in chunks():
                    f.write(block)
                    if expect_size is not None and f.tell() > expect_size:  # /dev/zero, a wrong URL
                        raise ToolError(f"{name} is over {expect_size} bytes, expected exactly that; the download "
                                        "is not GPT-2 124M")
                size = f.tell()
            if expect_size is not None and size != expect_size:
                raise ToolError(f"{name} is {size} bytes, expected {expect_size}; the download is not GPT-2 124M")
            os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide assets from other users
        for tmp, path in temporaries:
            os.replace(tmp, path)
        done = True
    except OSError as exc:
        raise ToolError(f"cannot write in {out_dir} ({exc.strerror or exc}); pick another --out") from None
    finally:
        for tmp, _ in temporaries:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        if not done:
            for path in reversed(made):
                with contextlib.suppress(OSError):  # not empty: someone else wrote there, leave it
                    path.rmdir()


def sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 24):
            h.update(block)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# Command line


def parse_args(argv):
    parser = OneLineParser(prog="tf_assets.py", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    text = sub.add_parser("text", help="text -> data and enc (GPT-2 tokenizer)")
    text.add_argument("--input", required=True, type=path_arg, help="UTF-8 text file")
    text.add_argument("--out", required=True, type=path_arg, help="folder for data and enc")
    text.add_argument("--bpe-file", type=path_arg, help="gpt2.tiktoken ranks file (else tiktoken downloads it)")
    text.add_argument("--force", action="store_true", help="replace existing files")

    dl = sub.add_parser("download", help="GPT-2 124M model.safetensors from its model hub")
    dl.add_argument("--out", required=True, type=path_arg, help="folder for model.safetensors")
    dl.add_argument("--url", default=GPT2_URL, help="where to fetch it (default: %(default)s)")
    dl.add_argument("--force", action="store_true", help="replace an existing file")

    synth = sub.add_parser("synth", help="synthetic weights, enc and data of any size")
    synth.add_argument("--preset", choices=sorted(PRESETS), default="tiny",
                       help="sizes to start from (default: %(default)s; tiny is V=96 S=32 D=64 H=4 L=2)")
    for flag, field in [("--vocab", "d_vocab"), ("--seq", "d_seq"), ("--d-model", "d_model"),
                        ("--heads", "n_heads"), ("--layers", "n_layers")]:
        synth.add_argument(flag, type=integer, dest=field, help=f"override the preset's {field}")
    synth.add_argument("--tokens", type=integer, default=INPUT_SIZE + 1,
                       help="data tokens (default: %(default)s, tf.c's training step)")
    synth.add_argument("--bpe-file", type=path_arg, help="use GPT-2's enc from this gpt2.tiktoken file (vocab 50257 only)")
    synth.add_argument("--out", required=True, type=path_arg, help="folder for model.safetensors, enc, data")
    synth.add_argument("--force", action="store_true", help="replace existing files")
    return parser.parse_args(argv)


def terminated(signum, frame):
    """SIGTERM as SystemExit, so that write_files' cleanup runs and removes its temporary files;
    inside sigterm_held, at the end of its block."""
    if HELD["depth"]:
        HELD["signal"] = signum
        return
    raise SystemExit(128 + signum)


def main(argv=None):
    args = parsed(parse_args, argv, "tf_assets.py")
    if args is None:
        return 2
    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        if args.command == "text":
            write_text_assets(args.input, args.out, args.bpe_file, args.force)
        elif args.command == "download":
            download(args.out, args.url, args.force)
        else:
            sizes = {k: getattr(args, k) for k in Config.__dataclass_fields__ if getattr(args, k) is not None}
            cfg = dataclasses.replace(PRESETS[args.preset], **sizes)
            write_synthetic(args.out, cfg, args.tokens, bpe_file=args.bpe_file, force=args.force)
    except UsageError as exc:
        print(f"tf_assets.py: error: {exc}", file=sys.stderr)
        return 2
    except (ToolError, AssetError) as exc:
        print(f"tf_assets.py: error: {exc}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(f"tf_assets.py: wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
