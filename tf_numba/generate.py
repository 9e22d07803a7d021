"""tf.c's generation, and a KV-cache decoder that makes the same tokens without recomputing.

tf.c makes each token with the whole forward pass over every token so far, then takes the first
maximum of the last row's softmax. `generate(..., recompute=True)` does that: the faithful path
(each pass covers the rows rounded up to BUCKET, so a few recorded graphs serve every length;
rows past the current length are computed too, harmlessly, since attention is causal).

Attention is causal, so row t of every layer depends only on rows <= t, and each sum of row t
runs in the same order whichever other rows are computed beside it. The decoder (the default)
therefore runs one prefill pass over the prompt's rows, tf.c's first pass, and then, for each
further token, a decode step over the new row only (forward's `rows`), which reads the earlier
rows' keys and values, and everything else it needs, from the activations arena where the
earlier passes left them: the same bits as recomputing everything. The row and the token live
in device memory (m.last_rows, m.tokens) and the argmax kernel advances them, so the decode
steps are queued back to back on one stream and the host only reads each token as it is made.

Every pass runs eagerly the first time, which compiles its kernels, is recorded as a CUDA graph
the second time and replayed from then on (Passes, kept on the model).

Sampling, beyond tf.c, is Sampler's: it draws from the same probabilities on the host.
"""
import numpy as np
from numba import config, cuda

from cudakit.stream import new_stream, record

from . import kernels as K
from . import launch
from .forward import forward

GENERATE = 128  # tf.c's count of generated tokens
PROMPT_MAX = 64  # tf.c takes at most 64 tokens of data as the prompt
BUCKET = 1 if config.ENABLE_CUDASIM else 32


def prompt_size(data_token_count, d_seq, n_tokens):
    """tf.c's min(count, 64), capped so that prompt and generated tokens fit d_seq."""
    return min(data_token_count, PROMPT_MAX, d_seq - n_tokens)


def tokens_problem(n_tokens, d_seq):
    """Why n_tokens cannot follow a prompt of at least one token in d_seq, as a --tokens option's
    error; None when they fit."""
    if n_tokens >= d_seq:
        return f"--tokens {n_tokens}: the model holds {d_seq} tokens, so pick 1 to {d_seq - 1}"
    return None


def default_tokens(d_seq):
    """tf.c's 128, or half the context of a model too small to hold 128 after a prompt."""
    return min(GENERATE, d_seq // 2)


class Passes:
    """Generation's passes by key, on one stream: eager the first time (compiling the kernels;
    the device is then synchronised), recorded the second, replayed after. The simulator has no
    graphs and runs every pass eagerly."""

    def __init__(self):
        self.seen, self.graphs = set(), {}
        self.stream = None if config.ENABLE_CUDASIM else new_stream("highest")

    def queue(self, key, launches):
        if self.stream is None or key not in self.seen:
            self.seen.add(key)
            self.sync()  # copies queued on the stream land before default-stream kernels read them
            launches()
            cuda.synchronize()
            return
        if key not in self.graphs:
            self.graphs[key] = record(self.stream, launches, node_priority=True)
        self.graphs[key].launch(self.stream)

    def sync(self):
        if self.stream is not None:
            self.stream.sync()


def argmax(m, logits=False):
    """The next token: the first maximum of the last row's softmax, written to m.tokens; m.last_rows
    advances by one. With `logits` the row holds the logits and tf_argmax_logits finds the same
    token without the softmax."""
    kernel = K.tf_argmax_logits if logits else K.tf_argmax
    launch.blocks(kernel, 1, K.ARGMAX_THREADS, 0, m.activations.unembedding.out, m.last_rows, m.tokens)


def token_pass(m, T, greedy, logits, rows=None):
    """The forward pass that makes the next token: over T rows (tf.c's; the prefill), or over the
    one row in `rows` (a decode step). Greedy, the argmax follows: tf.c's from the softmax, or with
    `logits` from the logits, which then need no softmax. Sampling reads the softmax on the host."""
    forward(m, T, last_only=True, rows=rows, softmax=not (greedy and logits))
    if greedy:
        argmax(m, logits=logits)


class Sampler:
    """Sampling from tf.c's probabilities (the float32 softmax of the last row), one token at a time:

    1. temperature: each probability p becomes p ** (1 / temperature) (the softmax of logits /
       temperature, up to normalisation), in float64;
    2. top-k: only the top_k largest stay (of equal ones, the lower token id), or all with None;
       the temperature does not change their order, so the same tokens stay either way round;
    3. the kept values are normalised, and one uniform u in [0, 1) from numpy's
       Generator(PCG64(seed)), one draw per token, picks the first kept token, in ascending id
       order, whose running sum exceeds u (the last kept token if rounding leaves none).
    The same seed gives the same tokens. Greedy (tf.c's) is generate's sampler=None."""

    def __init__(self, temperature, top_k=None, seed=0):
        self.temperature, self.top_k = float(temperature), top_k
        self.rng = np.random.Generator(np.random.PCG64(seed))

    def distribution(self, probs):
        """(kept token ids ascending, their probabilities)."""
        p = np.asarray(probs, dtype=np.float64)
        with np.errstate(divide="ignore"):
            logp = np.log(p)
        with np.errstate(over="ignore"):  # a tiny temperature sends all but the maxima to -inf: exp gives 0
            q = np.exp((logp - logp.max()) / self.temperature)
        ids = np.arange(len(p))
        if self.top_k is not None and self.top_k < len(p):
            ids = np.sort(np.argsort(-q, kind="stable")[:self.top_k])
        return ids, q[ids] / q[ids].sum()

    def pick(self, probs):
        ids, q = self.distribution(probs)
        u = self.rng.random()
        above = np.nonzero(np.cumsum(q) > u)[0]
        return int(ids[above[0]] if len(above) else ids[-1])


def generate(m, prompt, n_tokens, emit=None, recompute=False, sampler=None):
    """Append n_tokens tokens to prompt (greedy as tf.c, or drawn by sampler); emit(token) is
    called as each one is made. Returns the tokens."""
    T = len(prompt)
    passes = m.passes
    # Host-to-device copies go on the passes' stream: a copy from pageable memory on the default
    # stream may still be in flight when it returns, and the passes' stream does not wait for it.
    stream = passes.stream or 0
    m.set_tokens(prompt, stream)
    m.last_rows.copy_to_device(np.array([T - 1, T], dtype=np.int64), stream=stream)
    greedy = sampler is None
    tokens = []

    def made(token):
        tokens.append(token)
        if emit is not None:
            emit(token)

    def next_pass(t):  # the pass that makes token t + 1 from the tokens up to t
        if recompute:
            rows = min(-(-(t + 1) // BUCKET) * BUCKET, m.cfg.d_seq)
            passes.queue(("recompute", rows, greedy), lambda: token_pass(m, rows, greedy, logits=False))
        elif t == T - 1:
            passes.queue(("prefill", T, greedy), lambda: token_pass(m, T, greedy, logits=True))
        else:
            passes.queue(("decode", greedy), lambda: token_pass(m, m.cfg.d_seq, greedy, logits=True,
                                                                 rows=m.last_rows))

    if greedy and not recompute:
        # Every step queued at once: the device advances the row and the token itself, and the
        # host streams each token out as its step finishes.
        made_on_device = cuda.pinned_array(n_tokens, dtype=np.uint16)
        done = []
        for k in range(n_tokens):
            next_pass(T - 1 + k)
            m.tokens[T + k:T + k + 1].copy_to_host(made_on_device[k:k + 1], stream=stream)
            done.append(passes.stream.record() if passes.stream is not None else None)
        for k, event in enumerate(done):
            if event is not None:
                event.sync()
            made(int(made_on_device[k]))
        return tokens

    for k in range(n_tokens):
        t = T - 1 + k
        next_pass(t)
        passes.sync()
        if greedy:
            made(int(m.tokens[t + 1:t + 2].copy_to_host()[0]))
            continue
        token = sampler.pick(m.activations.unembedding.out[t].copy_to_host())
        m.tokens[t + 1:t + 2].copy_to_device(np.array([token], dtype=np.uint16), stream=stream)
        m.last_rows.copy_to_device(np.array([t + 1, t + 2], dtype=np.int64), stream=stream)
        made(token)
    return tokens
