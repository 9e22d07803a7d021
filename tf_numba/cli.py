"""python -m tf_numba: tf.c's generation, or with --validate its checked training step.

Exit status: 0 done; 1 bad data (a missing or malformed asset, an unusable fixture, no GPU) or a
failed check (a checkpoint that differs); 2 a usage error (a bad or meaningless option)."""
import argparse
import math
import os
import sys

from cudakit.options import integer, number

from .assets import AssetError
from .fp import FP_MODELS
from .generate import GENERATE, default_tokens, prompt_size, tokens_problem

PROG = "python -m tf_numba"
# Options of generation, which mean nothing to --validate (tf.c's training step).
GENERATION_OPTIONS = ("prompt", "bpe_file", "tokens", "recompute", "temperature", "top_k", "seed")


class UsageError(Exception):
    """A bad or meaningless option: one line, exit status 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of printing its usage, and takes flags only whole
    (--valid is not --validate), as python -m microgpt_numba does."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):
        raise UsageError(f"{message} (see {PROG} --help)")


def parse_args(argv):
    p = OneLineParser(prog=PROG, description=(
        "GPT-2 on the GPU, ported from tf.c: greedy generation from assets/data (or --prompt), "
        "or with --validate tf.c's training step with its 39 checkpoint sums."))
    p.add_argument("--assets", default="assets", help="folder with model.safetensors, enc and data (default: assets)")
    p.add_argument("--fp-model", choices=FP_MODELS, default=None,
                   help="which products fuse with adds: fma (tf.c's clang build, default) or nofma")
    p.add_argument("--validate", action="store_true", help="run tf.c's training step and check its 39 sums")
    p.add_argument("--expected", metavar="FILE",
                   help="with --validate: an oracle fixture with the expected sums and input size "
                        "(default: tf.c's constants)")
    p.add_argument("--prompt", metavar="TEXT", help="generate from this text instead of assets/data")
    p.add_argument("--bpe-file", metavar="PATH",
                   help="with --prompt: a GPT-2 .tiktoken ranks file, to encode the prompt offline "
                        "(without it tiktoken downloads GPT-2's encoding)")
    p.add_argument("--tokens", type=integer, metavar="N",
                   help=f"tokens to generate (default {GENERATE}, tf.c's; half the context for models of "
                        f"fewer than {2 * GENERATE} positions)")
    p.add_argument("--recompute", action="store_true",
                   help="recompute the whole forward pass for every token, as tf.c does (the default keeps "
                        "every row in the activations and computes only the new one: the same tokens)")
    p.add_argument("--temperature", type=number, metavar="T",
                   help="sample instead of taking the most probable token: probabilities raised to 1/T "
                        "(default 0: greedy, tf.c's)")
    p.add_argument("--top-k", type=integer, metavar="K", help="with --temperature: sample among the K most probable")
    p.add_argument("--seed", type=integer, metavar="S", help="with --temperature: the sampler's seed (default 0)")
    args = p.parse_args(argv)
    check_options(args)
    return args


def utf8(text):
    """Whether text is valid UTF-8: argv's bytes that are not come in as lone surrogates."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_options(args):
    """Refuse what the options cannot mean before anything is loaded."""
    given = [name for name in GENERATION_OPTIONS if getattr(args, name) not in (None, False)]
    if args.validate and given:
        flag = "--" + given[0].replace("_", "-")
        raise UsageError(f"{flag} means nothing with --validate, which runs tf.c's training step: drop it")
    if args.expected and not args.validate:
        raise UsageError("--expected means nothing without --validate: add --validate or drop --expected")
    if args.prompt == "":
        raise UsageError("--prompt is empty: give some text, or drop --prompt to start from assets/data")
    if args.prompt is not None and not utf8(args.prompt):
        raise UsageError("--prompt is not UTF-8 text (its bytes would be replaced by U+FFFD): pass the prompt in UTF-8")
    if args.bpe_file and args.prompt is None:
        raise UsageError("--bpe-file only encodes --prompt: add --prompt TEXT or drop --bpe-file")
    if args.temperature is not None and not (math.isfinite(args.temperature) and args.temperature >= 0):
        raise UsageError(f"--temperature must be a finite number >= 0 (0: greedy), got {args.temperature}")
    sampling = bool(args.temperature)
    if not sampling and (args.top_k is not None or args.seed is not None):
        flag = "--top-k" if args.top_k is not None else "--seed"
        raise UsageError(f"{flag} only shapes sampling, and greedy decoding draws nothing: add --temperature T > 0")
    if args.top_k is not None and args.top_k < 1:
        raise UsageError(f"--top-k must be at least 1, got {args.top_k}")
    if args.seed is not None and args.seed < 0:
        raise UsageError(f"--seed must be a non-negative integer, got {args.seed}")
    if args.tokens is not None and args.tokens < 1:
        raise UsageError(f"--tokens must be at least 1, got {args.tokens}")


def check_gpu():
    from cudakit.gpu import unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        raise AssetError(f"{reason}: run on a machine with an NVIDIA GPU and driver, or set "
                         "NUMBA_ENABLE_CUDASIM=1 to use Numba's (slow) simulator with tiny weights "
                         "(python tools/tf_assets.py synth --preset tiny --out DIR)")


def say_compiling():
    """tf's kernels are compiled for the GPU at their first launch in each run (nothing is cached)."""
    from numba import config

    if not config.ENABLE_CUDASIM:
        print("tf_numba: compiling the GPU kernels for this run (about 15-30 s)", file=sys.stderr, flush=True)


def validate(args, cfg, tensors, data):
    from .model import TFModel
    from .training import check_step, fixture_expected, report, run_step, tf_c_expected
    from .validation import dump_time

    if args.expected:
        T, fp_model, expected = fixture_expected(args.expected, cfg)
        if args.fp_model and args.fp_model != fp_model:
            raise UsageError(f"--expected {args.expected} holds {fp_model} sums but --fp-model is {args.fp_model}: "
                             f"drop --fp-model or pick the {args.fp_model} fixture")
    else:
        T, fp_model, expected = tf_c_expected(cfg)
        if args.fp_model == "nofma":
            raise UsageError("tf.c's constants come from its fma build: use --fp-model fma, or --expected "
                             "with a nofma oracle fixture")
    check_step(cfg, data, T, os.path.join(args.assets, "data"))
    m = TFModel(cfg, tensors, fp_model)
    print(f"tf_numba --validate: {cfg}, input size {T}, fp model {fp_model}", flush=True)
    say_compiling()
    validation = run_step(m, data, T)
    failed = report(validation, expected, sys.stdout)
    for name, stages, total in validation.timings:
        dump_time(name, stages, total, sys.stdout)
    print(f"{len(expected) - failed} of {len(expected)} checkpoints match")
    return 1 if failed else 0


def generate_text(args, cfg, tensors, data, enc):
    from .assets import encode_prompt
    from .generate import Sampler, generate
    from .model import TFModel

    if cfg.d_seq < 2:
        raise AssetError(f"the model's context holds {cfg.d_seq} token (wpe has {cfg.d_seq} row), which the prompt "
                         f"takes: nothing is left to generate; use a model with a longer context")
    n = default_tokens(cfg.d_seq) if args.tokens is None else args.tokens
    if tokens_problem(n, cfg.d_seq):
        raise UsageError(tokens_problem(n, cfg.d_seq))
    if args.top_k is not None and args.top_k > cfg.d_vocab:
        raise UsageError(f"--top-k {args.top_k} is more than the vocabulary's {cfg.d_vocab} tokens")
    if args.prompt is not None:
        prompt = encode_prompt(args.prompt, args.bpe_file)
        if not prompt:
            raise UsageError("--prompt is empty: give some text")
        if max(prompt) >= cfg.d_vocab:
            raise AssetError(f"--prompt encodes to token {max(prompt)}, not below these weights' vocabulary "
                             f"of {cfg.d_vocab}: use GPT-2-sized weights for text prompts")
        if len(prompt) + n > cfg.d_seq:
            raise UsageError(f"--prompt is {len(prompt)} tokens; with --tokens {n} that exceeds d_seq "
                             f"{cfg.d_seq}: shorten one of them")
    else:
        prompt = [int(t) for t in data[:prompt_size(len(data), cfg.d_seq, n)]]
    sampler = Sampler(args.temperature, args.top_k, args.seed or 0) if args.temperature else None
    m = TFModel(cfg, tensors, args.fp_model or "fma")
    out = sys.stdout.buffer
    for t in prompt:
        out.write(enc[t])
    out.flush()  # first: a stdout that cannot be written fails before the compile note
    say_compiling()

    def emit(token):
        out.write(enc[token])
        out.flush()

    generate(m, prompt, n, emit, recompute=args.recompute, sampler=sampler)
    out.write(b"\n")
    out.flush()
    return 0


def main(argv=None):
    from cudakit.gpu import STDOUT_CLOSED, cuda_errors, quiet, run_failed

    from . import assets

    try:
        args = parse_args(argv)
        if sys.stdout is None:
            raise AssetError(STDOUT_CLOSED)
        quiet()
        check_gpu()
        if os.path.exists(args.assets) and not os.path.isdir(args.assets):
            raise AssetError(f"--assets {args.assets} is not a folder: give the folder that holds model.safetensors, "
                             "enc and data")
        cfg, tensors = assets.load_model(os.path.join(args.assets, "model.safetensors"))
        enc = assets.load_enc(os.path.join(args.assets, "enc"), cfg.d_vocab)
        data = assets.load_data(os.path.join(args.assets, "data"), cfg.d_vocab)
        try:
            if args.validate:
                return validate(args, cfg, tensors, data)
            return generate_text(args, cfg, tensors, data, enc)
        except cuda_errors() as exc:
            raise AssetError(run_failed(exc)) from None
        except BrokenPipeError:
            raise
        except OSError as exc:  # writing stdout (a full disk, a closed terminal)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so that the exit's flush is quiet
            raise AssetError(f"could not write the output ({exc.strerror or exc}); check where stdout goes") from None
    except UsageError as exc:
        print(f"tf_numba: error: {exc}", file=sys.stderr)
        return 2
    except AssetError as exc:
        print(f"tf_numba: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader left early (e.g. `| head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        print("tf_numba: interrupted", file=sys.stderr)
        return 130
