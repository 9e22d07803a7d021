"""Command line: microgpt.cu's options and output lines, with one-line errors for bad input.

Exit status: 0 done; 2 a usage error (an unknown option, a missing value, a bad or out-of-range
number), as argparse does; 1 bad data (an input file that cannot be read or holds no document, a
--loss-log file that exists), no GPU, or a run that failed. Every error is one line on stderr,
`microgpt_numba: error: ...`, naming the problem and what to do about it.
"""
import argparse
import math
import os
import sys

import numpy as np

from cudakit.files import special_file
from cudakit.options import INTEGER, c_float

from .dataset import DEFAULT_CORPUS, InputError, shown_path

PROG = "microgpt_numba"
ENGINES = ("fast", "reference")
SEED = 42
INT_MAX = 2 ** 31 - 1  # microgpt.cu keeps --steps and --samples in an int
HELP_HINT = f"see python -m {PROG} --help"
QUICK_RUN = "--steps 2 --samples 1"

# The simulator runs each GPU thread as a Python thread on the CPU. Measured on a 2-core machine
# shared with other work, default corpus (about 7 positions a step), one step or one sample per
# launch: fast (a 32-thread block there) about 2 s a step and 3 s a sample, reference 15-23 s a step
# and 11-15 s a sample, depending on the load. A rough estimate, for the note the simulator prints:
# (a step, a sample).
SIMULATOR_SECONDS = {"fast": (2, 3), "reference": (20, 13)}
# A first run's compile on the H200 (tools/bench.py's cold_start_s): about 19-28 s for the fast
# engine's two persistent kernels, about 5-6 s for the reference engine's small ones.
COMPILE_SECONDS = {"fast": "20-30", "reference": "5"}


class UsageError(Exception):
    """A command line that cannot run: exit 2, as argparse."""


class RunFailed(Exception):
    """The run itself failed (the GPU, the driver, the toolkit, writing the output): exit 1."""


class Options:
    def __init__(self):
        self.num_steps = 1000
        self.num_samples = 20
        self.temperature = np.float32(0.5)
        self.input_path = None  # None: the default names corpus
        self.engine = "fast"
        self.loss_log = None


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{message}; {HELP_HINT}")


def _count(minimum):
    """An int option as microgpt.cu reads it, within what its int holds."""
    def parse(text):
        kind = f"must be an integer from {minimum} to {INT_MAX}"
        if not INTEGER.fullmatch(text):
            raise argparse.ArgumentTypeError(f"{kind}, got {text!r}")
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{kind}, got {text!r}")
        if value > INT_MAX:
            raise argparse.ArgumentTypeError(f"{kind} (the largest count microgpt.cu's int holds), got {text!r}")
        return value
    return parse


MIN_TEMPERATURE = float(np.nextafter(np.float32(1.0) / np.finfo(np.float32).max, np.float32(1.0)))


def _temperature(text):
    try:
        number = c_float(text)  # as microgpt.cu's atof reads it
    except ValueError:
        number = math.nan
    with np.errstate(over="ignore"):  # past float32's range is refused below, without numpy's warning
        value = np.float32(number)
    if not np.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    with np.errstate(over="ignore"):
        if not np.isfinite(np.float32(1.0) / value):  # microgpt.cu's softmax scale, 1.0f / temperature
            raise argparse.ArgumentTypeError(f"must be at least {MIN_TEMPERATURE:.4g}: below that microgpt.cu's "
                                             f"1.0f / temperature overflows float32, got {text!r}")
    return value


def _parser():
    defaults = Options()
    p = _Parser(prog=f"python -m {PROG}", allow_abbrev=False,
                description="microgpt.cu on the GPU with Numba: a 1-layer, 16-dim character GPT trained with Adam on "
                            "one document (a line of the input) per step, then sampling new documents. Prints "
                            "microgpt.cu's lines: num docs, vocab size, num params, 'step N / M | loss L' per step, "
                            "then the samples.",
                epilog="Exit status: 0 done, 2 a usage error, 1 bad input data, no GPU or a failed run. Without a "
                       "GPU, NUMBA_ENABLE_CUDASIM=1 runs the kernels in Numba's CPU simulator, where the defaults "
                       f"take over half an hour: try {QUICK_RUN}.")
    p.add_argument("--steps", type=_count(1), default=defaults.num_steps, metavar="N", dest="num_steps",
                   help=f"training steps, one document each, 1 to {INT_MAX} (default: %(default)s)")
    p.add_argument("--samples", type=_count(0), default=defaults.num_samples, metavar="N",
                   dest="num_samples",
                   help=f"documents to sample after training, 0 to {INT_MAX} (default: %(default)s)")
    p.add_argument("--temperature", type=_temperature, default=defaults.temperature, metavar="T",
                   help="sampling temperature, a number > 0 (default: %(default)s)")
    p.add_argument("--input", metavar="PATH", dest="input_path",
                   help="text file, one document per line (default: the names package's US-census first names, "
                        "lowercased, each once)")
    p.add_argument("--engine", choices=ENGINES, default=defaults.engine,
                   help="fast: all steps in persistent single-block kernels; reference: microgpt.cu's kernel "
                        "launches one by one, replayed as CUDA graphs. Both print the same bits (default: %(default)s)")
    p.add_argument("--loss-log", metavar="FILE",
                   help="also write the per-step losses to FILE as CSV (step,loss,loss_hex: the printed %%.4f value "
                        "and the exact float32 as float.hex); FILE must not exist (default: no log)")
    return p


def parse_options(argv):
    """Options from argv; UsageError for a bad command line. --help prints the help and raises SystemExit(0)."""
    opts = Options()
    _, extra = _parser().parse_known_args(argv, namespace=opts)
    if extra:
        what = "unknown option {!r}" if extra[0].startswith("-") else \
            "unexpected argument {!r} (each value follows its option)"
        raise UsageError(f"{what.format(extra[0])}; {HELP_HINT}")
    return opts


def check_gpu():
    from cudakit.gpu import unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        raise InputError(f"{reason}; run on a machine with an NVIDIA GPU and driver, or set NUMBA_ENABLE_CUDASIM=1 "
                         f"for Numba's CPU simulator (slow: the defaults take over half an hour there; try {QUICK_RUN})")


def _duration(seconds):
    for unit, size, limit in (("s", 1, 90), ("minutes", 60, 60), ("hours", 3600, 48), ("days", 86400, 730)):
        if seconds < size * limit:
            value = seconds / size
            return f"{value:.1f} {unit}" if unit == "hours" and value < 10 else f"{value:.0f} {unit}"
    return f"{seconds / (365 * 86400):.0f} years"


def simulator_note(opts):
    step_s, sample_s = SIMULATOR_SECONDS[opts.engine]
    total = opts.num_steps * step_s + opts.num_samples * sample_s
    note = (f"NUMBA_ENABLE_CUDASIM=1: the kernels run in Numba's CPU simulator, roughly {step_s:g} s a training step "
            f"and {sample_s:g} s a sample with the {opts.engine} engine (an estimate from a 2-core machine, names "
            f"corpus), so this run takes roughly {_duration(total)}")
    if total > 120:
        note += f"; for a quick look try {QUICK_RUN}"
    return note


def is_cached(dispatcher):
    """Whether Numba's on-disk cache holds the kernel for this GPU and source: True, False, or None
    when that cannot be told (no cache, another Numba)."""
    try:
        import numba_cuda

        cache = dispatcher._cache
        index = cache._cache_file._load_index()  # {} when missing, stale (source changed) or another Numba
        probe = cache._index_key(None, dispatcher.targetctx.codegen())  # (signature, GPU, numba-cuda, source)
    except Exception:
        return None
    if len(probe) < 4 or probe[2] != numba_cuda.__version__:  # not the key layout this reads
        return None
    return any(key[1:] == probe[1:] for key in index)


def engine_kernels(engine):
    if engine == "fast":
        from . import fast

        return [fast.train_kernel, fast.generate_kernel]
    from . import kernels

    return [getattr(kernels, name) for name in sorted(dir(kernels)) if name.endswith("_kernel")]


def compile_note(engine):
    """One line when the engine's kernels will compile (a first run); None when they load from the
    cache, or when that cannot be told."""
    cached = [is_cached(k) for k in engine_kernels(engine)]
    if False not in cached:
        return None
    return (f"compiling the {engine} engine's GPU kernels, roughly {COMPILE_SECONDS[engine]} s; this happens once: "
            "later runs load them from Numba's cache")


def open_loss_log(path):
    """The --loss-log file, created now (before training); it never replaces an existing file."""
    shown = shown_path(path)
    try:
        log = open(path, "x", newline="")
    except FileExistsError:
        kind = "a folder" if os.path.isdir(path) else special_file(path)
        if kind:
            raise InputError(f"--loss-log {shown} is {kind}, not a file; give --loss-log a new file name") from None
        raise InputError(f"--loss-log file {shown} exists; give a new file name (an existing log is never "
                         "overwritten)") from None
    except OSError as exc:
        raise InputError(f"could not create --loss-log file {shown} ({exc.strerror}); give a writable path") from None
    log.write("step,loss,loss_hex\n")
    return log


def escaped(name):
    """A file name's bytes for the one `corpus:` line: backslashes and control bytes escaped, the
    rest (a name need not be UTF-8) as they are."""
    named = {0x5C: b"\\\\", 0x0A: b"\\n", 0x0D: b"\\r", 0x09: b"\\t"}
    return b"".join(named.get(c, b"\\x%02x" % c if c < 0x20 or c == 0x7F else bytes([c])) for c in name)


def step_line(step, num_steps, loss):
    return b"step %4d / %4d | loss %.4f" % (step + 1, num_steps, loss)


def loss_row(step, loss):
    """The CSV row of a step: as printed (%.4f of the float32), then the float32 exactly."""
    return "%d,%.4f,%s\n" % (step + 1, loss, float(loss).hex())


def train(opts, out, err=None):
    """The run: header lines, the steps, the samples on out (bytes); notes on err (text)."""
    from . import fast, model as reference
    from .arena import FloatArena, Model, Scratch, TrainCache, param_storage_count, scratch_storage_count, \
        train_cache_storage_count
    from .dataset import default_docs, load_dataset, read_input
    from .glibc_rand import GlibcRand
    from .model import StepValues
    from .sample import generate_samples, sample_line
    from numba import config

    err = sys.stderr if err is None else err
    gen = GlibcRand(SEED)
    docs = default_docs() if opts.input_path is None else read_input(opts.input_path)
    corpus = DEFAULT_CORPUS.encode() if opts.input_path is None else os.fsencode(opts.input_path)
    corpus = escaped(corpus)
    log = open_loss_log(opts.loss_log) if opts.loss_log is not None else None
    try:
        dataset = load_dataset(docs, gen)
        out.write(b"corpus: " + corpus + b"\n")
        out.write(b"num docs: %d\nvocab size: %d\n" % (len(dataset.docs), dataset.vocab_size))

        param_arena = FloatArena(param_storage_count(dataset.vocab_size))
        model = Model(param_arena, dataset.vocab_size, gen)
        out.write(b"num params: %d\n" % model.total_params())
        cache_arena = FloatArena(train_cache_storage_count(dataset.vocab_size))
        cache = TrainCache(cache_arena, dataset.vocab_size)
        scratch_arena = FloatArena(scratch_storage_count(dataset.vocab_size))
        scratch = Scratch(scratch_arena, dataset.vocab_size)
        out.flush()

        note = simulator_note(opts) if config.ENABLE_CUDASIM else compile_note(opts.engine)
        if note:
            print(f"{PROG}: {note}", file=err, flush=True)

        end = b"\r" if out.isatty() else b"\n"
        step = 0

        def print_steps(losses):
            nonlocal step
            for loss in losses:
                out.write(step_line(step, opts.num_steps, loss) + end)
                if log is not None:
                    log.write(loss_row(step, loss))
                step += 1
            out.flush()
            if log is not None:
                log.flush()

        if opts.engine == "reference":
            for losses in reference.train_batches(model, cache, scratch, dataset, opts.num_steps):
                print_steps(losses)
            generate_samples(model, cache, dataset, StepValues(), opts.num_samples, opts.temperature, gen, out)
            return

        layout = fast.Layout(model, param_arena, cache, cache_arena, scratch, scratch_arena)
        generation = fast.Generation(layout, dataset, opts.num_samples, opts.temperature, gen)
        for losses in fast.train_chunks(layout, dataset, opts.num_steps, while_training=generation.load):
            print_steps(losses)
        out.write(b"\n--- inference (new, hallucinated names) ---\n")
        sample_idx = 0
        for samples in generation.chunks():
            for sample in samples:
                out.write(sample_line(sample_idx, sample))
                sample_idx += 1
            out.flush()
    finally:
        if log is not None:
            log.close()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        try:
            opts = parse_options(argv)
        except SystemExit as exc:  # --help
            return exc.code or 0
        from cudakit.gpu import STDOUT_CLOSED, cuda_errors, quiet, run_failed

        if sys.stdout is None:
            raise RunFailed(STDOUT_CLOSED)
        quiet()  # before any kernel compiles: they compile lazily, at their first launch
        check_gpu()
        try:
            train(opts, sys.stdout.buffer)
        except cuda_errors() as exc:
            raise RunFailed(run_failed(exc))
        except BrokenPipeError:
            raise
        except OSError as exc:  # writing stdout (a full disk, a closed terminal)
            raise RunFailed(f"could not write the output ({exc.strerror or exc}); check where stdout goes")
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except (InputError, RunFailed) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader left early (e.g. `| head`)
        # Python flushes stdout again at exit; point it at /dev/null so that does not fail too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    return 0
