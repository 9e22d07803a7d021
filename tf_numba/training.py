"""`--validate`: tf.c's training step on the first input_size + 1 tokens, every checkpoint
compared with an expected sum (tf.c's constants, or an oracle fixture)."""
import json
import re

import numpy as np

from . import kernels as K
from .assets import AssetError, excerpt, is_int, opened
from .backward import backward, zero_gradients
from .checkpoints import TF_C_SUMS, c_hex, checkpoints
from .config import GPT2, INPUT_SIZE, Config
from .forward import forward
from .fp import FP_MODELS
from . import launch
from .validation import NO_VALIDATION, Validation

POISON = np.float32(np.nan)  # tf.c fills activations with random bytes; NaN shows any use of them


def tf_c_expected(cfg: Config):
    """tf.c's own constants: (input size, fp model, [(label, count, sum)])."""
    if cfg != GPT2:
        raise AssetError(
            f"tf.c's constants are for the real GPT-2 124M weights, not {cfg}: pass --expected "
            f"with an oracle fixture made from these weights (tools/tf_oracle.py)"
        )
    return INPUT_SIZE, "fma", [(l, n, s) for (l, n), s in zip(checkpoints(cfg, INPUT_SIZE), TF_C_SUMS)]


HEX_FLOAT = re.compile(r"-?0x[0-9a-f](\.[0-9a-f]+)?p[+-][0-9]+")  # a finite double, as %a prints it


def fixture_expected(path, cfg: Config):
    """An oracle fixture's (input size, fp model, [(label, count, sum)]), every field checked,
    the configuration and checkpoints against cfg's."""
    try:
        with opened(path, f"--expected {path} not found: pick an oracle fixture (tools/tf_oracle.py writes them)",
                    "--expected ") as f:
            fixture = json.loads(f.read().decode("utf-8"))
    except (ValueError, RecursionError):  # not UTF-8, not JSON, or nested too deep for a fixture
        raise AssetError(f"--expected {path} is not JSON, so not an oracle fixture (tools/tf_oracle.py "
                         f"writes them)") from None

    def bad(what):
        return AssetError(f"--expected {path}: {what}: pick an oracle fixture (tools/tf_oracle.py writes them)")

    def field(obj, key, where, ok, kind):
        if key not in obj:
            raise bad(f"{where} is missing")
        if not ok(obj[key]):
            raise bad(f"{where} must be {kind}, got {excerpt(obj[key])}")
        return obj[key]

    if not isinstance(fixture, dict):
        raise bad(f"it must be a JSON object, got {excerpt(fixture)}")
    fc = field(fixture, "config", "config", lambda v: isinstance(v, dict), "an object")
    sizes = {k: field(fc, k, f"config.{k}", is_int, "an integer")
             for k in ("d_vocab", "d_seq", "d_model", "n_heads", "n_layers", "input_size")}
    T = sizes.pop("input_size")
    fixture_cfg = Config(**sizes)
    if fixture_cfg != cfg:
        raise AssetError(f"--expected {path} was made for {fixture_cfg}, but the weights are {cfg}: pick its fixture")
    if not 1 <= T <= cfg.d_seq:
        raise bad(f"config.input_size must be 1 to d_seq {cfg.d_seq}, got {T}")
    fp_model = field(fixture, "fp_model", "fp_model", lambda v: v in FP_MODELS, f"one of {', '.join(FP_MODELS)}")
    entries = field(fixture, "checkpoints", "checkpoints", lambda v: isinstance(v, list), "a list")
    expected = checkpoints(cfg, T)
    if len(entries) != len(expected):
        raise bad(f"it has {len(entries)} checkpoints, tf.c has {len(expected)}")
    sums = []
    for i, (entry, (label, count)) in enumerate(zip(entries, expected)):
        where = f"checkpoints[{i}]"
        if not isinstance(entry, dict):
            raise bad(f"{where} must be an object, got {excerpt(entry)}")
        got = (field(entry, "label", f"{where}.label", lambda v: isinstance(v, str), "a string"),
               field(entry, "count", f"{where}.count", is_int, "an integer"))
        if got != (label, count):
            raise bad(f"{where} is {got[0]!r} of {got[1]} elements, but tf.c's is {label!r} of {count} "
                      f"for this configuration and input size")
        text = field(entry, "sum", f"{where}.sum", lambda v: isinstance(v, str), "a hex float string")
        try:  # float.fromhex also reads '1e5000' as 0x1e5000, and nan
            if not HEX_FLOAT.fullmatch(text):
                raise ValueError(text)
            sums.append((label, count, float.fromhex(text)))
        except (ValueError, OverflowError):
            raise bad(f"{where}.sum must be a finite hex float as C's %a prints it, got {excerpt(text)}") from None
    return T, fp_model, sums


def training_step(m, T, validation=NO_VALIDATION):
    """tf_process with is_training over tokens[0:T + 1]: gradients zeroed, forward, backward."""
    zero_gradients(m)
    forward(m, T, last_only=False, validation=validation, probs_copy=m.activations_back.unembedding.out)
    backward(m, T, validation)


def check_step(cfg, tokens, T, data_path="the data"):
    """What the training step needs of the data and the model, before anything runs."""
    if T > cfg.d_seq:
        raise AssetError(f"input size {T} is more than the model's d_seq {cfg.d_seq}")
    if len(tokens) < T + 1:
        raise AssetError(f"--validate needs {T + 1} tokens of data, {data_path} has {len(tokens)}: use a longer text")


def run_step(m, tokens, T):
    """The training step, scratch arenas poisoned first; returns the Validation with every sum and
    the per-stage times."""
    check_step(m.cfg, tokens, T)
    m.set_tokens(tokens[: T + 1])
    launch.elementwise(K.tf_memset, m.activations.raw.shape[0], m.activations.raw, POISON)
    launch.elementwise(K.tf_memset, m.activations_back.raw.shape[0], m.activations_back.raw, POISON)
    validation = Validation()
    training_step(m, T, validation)
    return validation


def report(validation, expected, out):
    """Print every checkpoint (label, expected, got, PASS/FAIL); return the number failed."""
    failed = 0
    for (label, count, got), (e_label, e_count, want) in zip(validation.sums, expected):
        assert (label, count) == (e_label, e_count), (label, e_label)
        ok = got == want
        failed += not ok
        print(f"{'PASS' if ok else 'FAIL'} {label} ({count}): expected {c_hex(want)} got {c_hex(got)}", file=out)
    return failed
