"""`--validate`: tf.c's training step on the first input_size + 1 tokens, every checkpoint
compared with an expected sum (tf.c's constants, or an oracle fixture)."""
import json

import numpy as np

from . import kernels as K
from .assets import AssetError
from .backward import backward, zero_gradients
from .checkpoints import TF_C_SUMS, c_hex, checkpoints
from .config import GPT2, INPUT_SIZE, Config
from .forward import forward
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


def fixture_expected(path, cfg: Config):
    """An oracle fixture's (input size, fp model, [(label, count, sum)]), checked against cfg."""
    try:
        with open(path) as f:
            fixture = json.load(f)
        fc = fixture["config"]
        fixture_cfg = Config(*(fc[k] for k in ("d_vocab", "d_seq", "d_model", "n_heads", "n_layers")))
        T = int(fc["input_size"])
        sums = [(c["label"], int(c["count"]), float.fromhex(c["sum"])) for c in fixture["checkpoints"]]
        fp_model = fixture["fp_model"]
    except OSError as exc:
        raise AssetError(f"cannot read --expected {path}: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError):
        raise AssetError(f"--expected {path} is not an oracle fixture (tools/tf_oracle.py writes them)") from None
    if fixture_cfg != cfg:
        raise AssetError(f"--expected {path} was made for {fixture_cfg}, but the weights are {cfg}: pick its fixture")
    if [(l, n) for l, n, _ in sums] != checkpoints(cfg, T):
        raise AssetError(f"--expected {path}: its checkpoints are not tf.c's 39 for this configuration")
    return T, fp_model, sums


def training_step(m, T, validation=NO_VALIDATION):
    """tf_process with is_training over tokens[0:T + 1]: gradients zeroed, forward, backward."""
    zero_gradients(m)
    forward(m, T, last_only=False, validation=validation)
    backward(m, T, validation)


def run_step(m, tokens, T):
    """The training step, scratch arenas poisoned first; returns the Probe with every sum and the
    per-stage times."""
    if T > m.cfg.d_seq:
        raise AssetError(f"input size {T} is more than the model's d_seq {m.cfg.d_seq}")
    if len(tokens) < T + 1:
        raise AssetError(f"--validate needs {T + 1} tokens of data, assets/data has {len(tokens)}: use a longer text")
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
