"""python -m tf_numba: tf.c's generation, or with --validate its checked training step."""
import argparse
import os
import sys

from .assets import AssetError
from .fp import FP_MODELS
from .generate import GENERATE, prompt_size


class OneLineParser(argparse.ArgumentParser):
    def error(self, message):
        raise AssetError(f"{message} (see python -m tf_numba --help)")


def parse_args(argv):
    p = OneLineParser(prog="python -m tf_numba", description=(
        "GPT-2 on the GPU, ported from tf.c: greedy generation from assets/data (or --prompt), "
        "or with --validate tf.c's training step with its 39 checkpoint sums."))
    p.add_argument("--assets", default="assets", help="folder with model.safetensors, enc and data (default: assets)")
    p.add_argument("--fp-model", choices=FP_MODELS, default=None,
                   help="which products fuse with adds: fma (tf.c's clang build, default) or nofma")
    p.add_argument("--validate", action="store_true", help="run tf.c's training step and check its 39 sums")
    p.add_argument("--expected", metavar="FILE",
                   help="oracle fixture with the expected sums and input size (default: tf.c's constants)")
    p.add_argument("--prompt", metavar="TEXT", help="generate from this text instead of assets/data")
    p.add_argument("--bpe-file", metavar="PATH", help="GPT-2 .tiktoken ranks file, to encode --prompt offline")
    p.add_argument("--tokens", type=int, default=GENERATE, metavar="N", help=f"tokens to generate (default {GENERATE})")
    return p.parse_args(argv)


def check_gpu():
    from numba import config, cuda

    if config.ENABLE_CUDASIM:
        return
    try:
        ok = cuda.is_available()
    except Exception:
        ok = False
    if not ok:
        raise AssetError("no CUDA GPU found: run on a machine with an NVIDIA GPU and driver, or set "
                         "NUMBA_ENABLE_CUDASIM=1 to use Numba's (slow) simulator with tiny weights")


def encode_prompt(text, bpe_file):
    import tiktoken

    try:
        if bpe_file:
            from tiktoken.load import load_tiktoken_bpe

            encoding = tiktoken.Encoding(
                name="gpt2",
                pat_str=r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
                mergeable_ranks=load_tiktoken_bpe(bpe_file),
                special_tokens={"<|endoftext|>": 50256},
            )
        else:
            encoding = tiktoken.get_encoding("gpt2")
    except Exception as exc:
        if bpe_file:
            raise AssetError(f"cannot read --bpe-file {bpe_file} ({type(exc).__name__}): give GPT-2's "
                             f".tiktoken ranks file") from None
        raise AssetError(f"cannot load GPT-2's tokenizer ({type(exc).__name__}): pass --bpe-file PATH "
                         f"(a gpt2.tiktoken ranks file) to encode --prompt offline") from None
    return encoding.encode_ordinary(text)


def validate(args, cfg, tensors, data):
    from .model import TFModel
    from .validation import dump_time
    from .training import fixture_expected, report, run_step, tf_c_expected

    if args.expected:
        T, fp_model, expected = fixture_expected(args.expected, cfg)
        if args.fp_model and args.fp_model != fp_model:
            raise AssetError(f"--expected {args.expected} holds {fp_model} sums but --fp-model is {args.fp_model}: "
                             f"drop --fp-model or pick the {args.fp_model} fixture")
    else:
        T, fp_model, expected = tf_c_expected(cfg)
        if args.fp_model == "nofma":
            raise AssetError("tf.c's constants come from its fma build: use --fp-model fma, or --expected "
                             "with a nofma oracle fixture")
    validation = run_step(TFModel(cfg, tensors, fp_model), data, T)
    print(f"tf_numba --validate: {cfg}, input size {T}, fp model {fp_model}")
    failed = report(validation, expected, sys.stdout)
    for name, stages, total in validation.timings:
        dump_time(name, stages, total, sys.stdout)
    print(f"{len(expected) - failed} of {len(expected)} checkpoints match")
    return 1 if failed else 0


def generate_text(args, cfg, tensors, data, enc):
    from .generate import generate
    from .model import TFModel

    n = args.tokens
    if not 1 <= n < cfg.d_seq:
        raise AssetError(f"--tokens {n}: the model holds {cfg.d_seq} tokens, so pick 1 to {cfg.d_seq - 1}")
    if args.prompt is not None:
        prompt = encode_prompt(args.prompt, args.bpe_file)
        if not prompt:
            raise AssetError("--prompt is empty: give some text")
        if max(prompt) >= cfg.d_vocab:
            raise AssetError(f"--prompt encodes to token {max(prompt)}, not below these weights' vocabulary "
                             f"of {cfg.d_vocab}: use GPT-2-sized weights for text prompts")
        if len(prompt) + n > cfg.d_seq:
            raise AssetError(f"--prompt is {len(prompt)} tokens; with --tokens {n} that exceeds d_seq "
                             f"{cfg.d_seq}: shorten one of them")
    else:
        size = prompt_size(len(data), cfg.d_seq, n)
        prompt = [int(t) for t in data[:size]]
    m = TFModel(cfg, tensors, args.fp_model or "fma")
    out = sys.stdout.buffer
    for t in prompt:
        out.write(enc[t])
    out.flush()

    def emit(token):
        out.write(enc[token])
        out.flush()

    generate(m, prompt, n, emit)
    out.write(b"\n")
    out.flush()
    return 0


def main(argv=None):
    from . import assets

    try:
        args = parse_args(argv)
        check_gpu()
        cfg, tensors = assets.load_model(os.path.join(args.assets, "model.safetensors"))
        enc = assets.load_enc(os.path.join(args.assets, "enc"), cfg.d_vocab)
        data = assets.load_data(os.path.join(args.assets, "data"), cfg.d_vocab)
        if args.validate:
            return validate(args, cfg, tensors, data)
        return generate_text(args, cfg, tensors, data, enc)
    except AssetError as exc:
        print(f"tf_numba: error: {exc}", file=sys.stderr)
        return 2
