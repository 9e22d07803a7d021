"""Device storage: three float arenas allocated once, and the structs whose fields are views of them.

As in microgpt.cu, each struct's storage count is the sum of its fields, and `arena_alloc`
carves the fields out of an arena in declaration order. The field tables below are the single
place that lists the fields, so counts and carve-outs cannot drift apart.
"""
import numpy as np
from numba import cuda
from numba.cuda.cudadrv import driver

from .constants import BLOCK_SIZE, INIT_STD, MLP_HIDDEN, N_EMBD, N_HEAD, N_LAYER
from .glibc_rand import rand_normal


def memset_zero(x):
    driver.device_memset(x, 0, x.nbytes)


class FloatArena:
    def __init__(self, count):
        self.count = count
        self.offset = 0
        self.base = cuda.device_array(count, dtype=np.float32)
        memset_zero(self.base)

    def alloc(self, count):
        if self.offset + count > self.count:
            raise RuntimeError(f"arena overflow: requested {count} floats, {self.count - self.offset} remaining")
        view = self.base[self.offset:self.offset + count]
        self.offset += count
        memset_zero(view)
        return view


class Param:
    """A weight matrix [rows, cols] with its gradient and Adam moments, each a flat view."""

    def __init__(self, arena, name, rows, cols, gen):
        count = rows * cols
        self.name = name
        self.rows = rows
        self.cols = cols
        self.data = arena.alloc(count)
        self.grad = arena.alloc(count)
        self.m = arena.alloc(count)
        self.v = arena.alloc(count)
        host_data = np.array([rand_normal(gen, INIT_STD) for _ in range(count)], dtype=np.float32)
        self.data.copy_to_device(host_data)

    def count(self):
        return self.rows * self.cols


def model_param_shapes(vocab_size):
    """(name, rows, cols) in init order, which is also the order of the random draws."""
    shapes = [("wte", vocab_size, N_EMBD), ("wpe", BLOCK_SIZE, N_EMBD), ("lm_head", vocab_size, N_EMBD)]
    for _ in range(N_LAYER):
        shapes += [("attn_wq", N_EMBD, N_EMBD), ("attn_wk", N_EMBD, N_EMBD), ("attn_wv", N_EMBD, N_EMBD),
                   ("attn_wo", N_EMBD, N_EMBD), ("mlp_fc1", MLP_HIDDEN, N_EMBD), ("mlp_fc2", N_EMBD, MLP_HIDDEN)]
    return shapes


def param_storage_count(vocab_size):
    return sum(4 * rows * cols for _, rows, cols in model_param_shapes(vocab_size))


class Model:
    """wte, wpe, lm_head, then per layer lists attn_wq ... mlp_fc2 (index = layer)."""

    def __init__(self, arena, vocab_size, gen):
        self.wte = self.wpe = self.lm_head = None
        self.attn_wq, self.attn_wk, self.attn_wv, self.attn_wo, self.mlp_fc1, self.mlp_fc2 = ([] for _ in range(6))
        for name, rows, cols in model_param_shapes(vocab_size):
            param = Param(arena, name, rows, cols, gen)
            if isinstance(getattr(self, name), list):
                getattr(self, name).append(param)
            else:
                setattr(self, name, param)

    def params(self):
        """All parameters in init order (the order Adam visits them)."""
        params = [self.wte, self.wpe, self.lm_head]
        for layer in range(N_LAYER):
            params += [self.attn_wq[layer], self.attn_wk[layer], self.attn_wv[layer],
                       self.attn_wo[layer], self.mlp_fc1[layer], self.mlp_fc2[layer]]
        return params

    def total_params(self):
        return sum(p.count() for p in self.params())


LAYER_CACHE_FIELDS = (
    ("x_in", N_EMBD), ("attn_norm", N_EMBD), ("q", N_EMBD),
    ("attn_logits", N_HEAD * BLOCK_SIZE), ("attn_weights", N_HEAD * BLOCK_SIZE),
    ("attn_out", N_EMBD), ("attn_proj", N_EMBD), ("mlp_in", N_EMBD), ("mlp_norm", N_EMBD),
    ("fc1", MLP_HIDDEN), ("relu", MLP_HIDDEN), ("fc2", N_EMBD), ("x_out", N_EMBD),
)


def layer_cache_storage_count():
    return sum(count for _, count in LAYER_CACHE_FIELDS)


class LayerCache:
    """One layer's activations at one position; k and v point into TrainCache's keys/values."""

    def __init__(self, arena):
        for name, count in LAYER_CACHE_FIELDS:
            setattr(self, name, arena.alloc(count))
        self.k = None
        self.v = None


def position_cache_fields(vocab_size):
    return (("embed_in", N_EMBD), ("x0", N_EMBD), ("logits", vocab_size), ("probs", vocab_size))


class PositionCache:
    """A position's activations. The C's token_id/target_id live in StepValues.tokens (device memory)."""

    def __init__(self, arena, vocab_size):
        for name, count in position_cache_fields(vocab_size):
            setattr(self, name, arena.alloc(count))
        self.layers = [LayerCache(arena) for _ in range(N_LAYER)]

    def final_hidden(self):
        return self.layers[N_LAYER - 1].x_out if N_LAYER else self.x0

    def layer_input(self, layer):
        return self.layers[layer - 1].x_out if layer else self.x0


KV_FIELDS = ("keys", "values", "grad_keys", "grad_values")


def train_cache_storage_count(vocab_size):
    per_position = sum(count for _, count in position_cache_fields(vocab_size)) + N_LAYER * layer_cache_storage_count()
    return N_LAYER * len(KV_FIELDS) * BLOCK_SIZE * N_EMBD + BLOCK_SIZE * per_position


class TrainCache:
    """Per-position caches plus, per layer, the key/value rows of all positions and their gradients.

    grad_k_accum[layer][pos] / grad_v_accum[layer][pos] are row views of grad_keys / grad_values.
    """

    def __init__(self, arena, vocab_size):
        for name in KV_FIELDS:
            setattr(self, name, [])
        for _ in range(N_LAYER):
            for name in KV_FIELDS:
                getattr(self, name).append(arena.alloc(BLOCK_SIZE * N_EMBD))
        self.pos = [PositionCache(arena, vocab_size) for _ in range(BLOCK_SIZE)]
        self.grad_k_accum = [[self.grad_keys[layer][p * N_EMBD:(p + 1) * N_EMBD] for p in range(BLOCK_SIZE)]
                             for layer in range(N_LAYER)]
        self.grad_v_accum = [[self.grad_values[layer][p * N_EMBD:(p + 1) * N_EMBD] for p in range(BLOCK_SIZE)]
                             for layer in range(N_LAYER)]
        for p, pc in enumerate(self.pos):
            for layer, lc in enumerate(pc.layers):
                lc.k = self.keys[layer][p * N_EMBD:(p + 1) * N_EMBD]
                lc.v = self.values[layer][p * N_EMBD:(p + 1) * N_EMBD]


def scratch_fields(vocab_size):
    return (
        ("grad_logits", vocab_size), ("grad_x", N_EMBD), ("grad_x_in", N_EMBD), ("grad_mlp_in", N_EMBD),
        ("grad_relu", MLP_HIDDEN), ("grad_fc1", MLP_HIDDEN), ("grad_mlp_norm", N_EMBD),
        ("grad_norm_tmp", N_EMBD), ("grad_attn_out", N_EMBD), ("grad_q", N_EMBD),
        ("grad_attn_norm", N_EMBD), ("grad_embed_in", N_EMBD),
    )


def scratch_storage_count(vocab_size):
    return sum(count for _, count in scratch_fields(vocab_size))


class Scratch:
    def __init__(self, arena, vocab_size):
        for name, count in scratch_fields(vocab_size):
            setattr(self, name, arena.alloc(count))
