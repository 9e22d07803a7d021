"""tf.c's generation: greedy tokens, the whole forward pass recomputed for each one."""
from . import kernels as K
from .forward import forward

GENERATE = 128  # tf.c's count of generated tokens
PROMPT_MAX = 64  # tf.c takes at most 64 tokens of data as the prompt


def prompt_size(data_token_count, d_seq, n_tokens):
    """tf.c's min(count, 64), capped so that prompt and generated tokens fit d_seq."""
    return min(data_token_count, PROMPT_MAX, d_seq - n_tokens)


def generate(m, prompt, n_tokens, emit=None):
    """Append n_tokens greedy tokens to prompt; emit(token) is called as each one is made."""
    T = len(prompt)
    m.set_tokens(prompt)
    out = []
    for _ in range(n_tokens):
        forward(m, T, False)
        K.tf_argmax[1, K.ARGMAX_THREADS](m.activations.unembedding.out, T - 1, m.tokens, T)
        token = int(m.tokens[T : T + 1].copy_to_host()[0])
        out.append(token)
        if emit is not None:
            emit(token)
        T += 1
    return out
