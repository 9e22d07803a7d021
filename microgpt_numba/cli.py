"""Command line: microgpt.cu's options and output lines, with one-line errors for bad input."""
import os
import sys

import numpy as np

from cudakit.gpu import quiet, unavailable_reason

from . import fast, model as reference
from .arena import FloatArena, Model, Scratch, TrainCache, param_storage_count, scratch_storage_count, \
    train_cache_storage_count
from .dataset import DEFAULT_CORPUS, InputError, default_docs, load_dataset, read_input
from .glibc_rand import GlibcRand
from .model import StepValues
from .sample import generate_samples, sample_line

PROG = "microgpt_numba"
USAGE = f"usage: python -m {PROG} [--steps N] [--samples N] [--temperature T] [--input PATH] [--engine fast|reference]"
ENGINES = ("fast", "reference")
SEED = 42


class Options:
    def __init__(self):
        self.num_steps = 1000
        self.num_samples = 20
        self.temperature = np.float32(0.5)
        self.input_path = None  # None: the default names corpus
        self.engine = "fast"


def _int_option(flag, text, minimum):
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < minimum:
        kind = "a positive integer" if minimum > 0 else "a non-negative integer"
        raise InputError(f"{flag} must be {kind}, got {text!r}")
    return value


def _temperature(text):
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not np.isfinite(np.float32(value)) or np.float32(value) <= 0:
        raise InputError(f"--temperature must be a number > 0, got {text!r}")
    return np.float32(value)


def parse_options(argv):
    opts = Options()
    i = 0
    while i < len(argv):
        flag = argv[i]
        if flag in ("-h", "--help"):
            print(USAGE)
            raise SystemExit(0)
        if flag not in ("--steps", "--samples", "--temperature", "--input", "--engine"):
            raise InputError(f"unknown option {flag!r}; {USAGE}")
        if i + 1 == len(argv):
            raise InputError(f"{flag} needs a value; {USAGE}")
        value = argv[i + 1]
        if flag == "--steps":
            opts.num_steps = _int_option(flag, value, 1)
        elif flag == "--samples":
            opts.num_samples = _int_option(flag, value, 0)
        elif flag == "--temperature":
            opts.temperature = _temperature(value)
        elif flag == "--engine":
            if value not in ENGINES:
                raise InputError(f"--engine must be one of {', '.join(ENGINES)}, got {value!r}")
            opts.engine = value
        else:
            opts.input_path = value
        i += 2
    return opts


def train(opts, out):
    gen = GlibcRand(SEED)
    docs = default_docs() if opts.input_path is None else read_input(opts.input_path)
    corpus = DEFAULT_CORPUS if opts.input_path is None else opts.input_path
    dataset = load_dataset(docs, gen)
    out.write(f"corpus: {corpus}\n".encode())
    out.write(b"num docs: %d\nvocab size: %d\n" % (len(dataset.docs), dataset.vocab_size))

    param_arena = FloatArena(param_storage_count(dataset.vocab_size))
    model = Model(param_arena, dataset.vocab_size, gen)
    out.write(b"num params: %d\n" % model.total_params())
    cache_arena = FloatArena(train_cache_storage_count(dataset.vocab_size))
    cache = TrainCache(cache_arena, dataset.vocab_size)
    scratch_arena = FloatArena(scratch_storage_count(dataset.vocab_size))
    scratch = Scratch(scratch_arena, dataset.vocab_size)
    out.flush()

    end = b"\r" if out.isatty() else b"\n"
    if opts.engine == "reference":
        for step, loss in enumerate(reference.train(model, cache, scratch, dataset, opts.num_steps)):
            out.write(step_line(step, opts.num_steps, loss) + end)
            out.flush()
        generate_samples(model, cache, dataset, StepValues(), opts.num_samples, opts.temperature, gen, out)
        return

    layout = fast.Layout(model, param_arena, cache, cache_arena, scratch, scratch_arena)
    generation = fast.Generation(layout, dataset, opts.num_samples, opts.temperature, gen)
    for step, loss in enumerate(fast.train(layout, dataset, opts.num_steps, while_training=generation.load)):
        out.write(step_line(step, opts.num_steps, loss) + end)
    out.write(b"\n--- inference (new, hallucinated names) ---\n")
    for sample_idx, sample in enumerate(generation.run()):
        out.write(sample_line(sample_idx, sample))
    out.flush()


def step_line(step, num_steps, loss):
    return b"step %4d / %4d | loss %.4f" % (step + 1, num_steps, loss)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts = parse_options(argv)
        quiet()
        reason = unavailable_reason()
        if reason is not None:
            raise InputError(f"{reason}; run on a machine with an NVIDIA GPU and driver, "
                             "or set NUMBA_ENABLE_CUDASIM=1 to use the (slow) CPU simulator")
        train(opts, sys.stdout.buffer)
    except InputError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader left early (e.g. `| head`)
        # Python flushes stdout again at exit; point it at /dev/null so that does not fail too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0
