"""tf.c's generation: greedy tokens, the whole forward pass recomputed for each one."""
import numpy as np
from numba import config

from . import kernels as K
from . import launch
from .forward import forward
from cudakit.stream import Recorded

GENERATE = 128  # tf.c's count of generated tokens
PROMPT_MAX = 64  # tf.c takes at most 64 tokens of data as the prompt
# Generation passes are recorded for lengths rounded up to a multiple of BUCKET, so a few
# graphs serve every length; the simulator records nothing and runs exactly the rows it needs.
BUCKET = 1 if config.ENABLE_CUDASIM else 32


def prompt_size(data_token_count, d_seq, n_tokens):
    """tf.c's min(count, 64), capped so that prompt and generated tokens fit d_seq."""
    return min(data_token_count, PROMPT_MAX, d_seq - n_tokens)


def generation_pass(m, rows):
    """Forward over `rows` rows (at least the current length), unembed row m.last_rows, and
    append its argmax to the tokens, advancing m.last_rows: all on the device."""
    forward(m, rows, last_only=True)
    launch.blocks(K.tf_argmax, 1, K.ARGMAX_THREADS, 0, m.activations.unembedding.out, m.last_rows, m.tokens)


def generate(m, prompt, n_tokens, emit=None):
    """Append n_tokens greedy tokens to prompt; emit(token) is called as each one is made."""
    T = len(prompt)
    m.set_tokens(prompt)
    m.last_rows.copy_to_device(np.array([T - 1, T], dtype=np.int64))
    passes = {}
    out = []
    for step in range(n_tokens):
        rows = min(-(-T // BUCKET) * BUCKET, m.cfg.d_seq)
        if step == 0:  # runs directly: compiles the kernels before any graph records them
            generation_pass(m, rows)
        else:
            if rows not in passes:
                passes[rows] = Recorded(lambda rows=rows: generation_pass(m, rows))
            passes[rows]()
        token = int(m.tokens[T : T + 1].copy_to_host()[0])
        out.append(token)
        if emit is not None:
            emit(token)
        T += 1
    return out
