"""Device arenas mirroring tf.c's structs: one float32 allocation each, carved into named views.

`Arena(layout)` takes [(dotted name, shape)] in the C struct's member order and gives nested
attribute access like the C: `activations.h[3].attn.c_attn.out` is a device view of shape
(d_seq, 3 * d_model). Views start on 256-byte boundaries (tf.c's tf_align), so a view's rows
stay aligned for coalesced loads.
"""
from types import SimpleNamespace

import numpy as np
from numba import cuda

from .config import Config

ALIGN = 64  # floats: 256 bytes
ROW_ALIGN = 4  # floats: 16 bytes, one asynchronous copy of the matrix kernels (matmul.copy_width)


def padded(n):
    """A row length of at least n floats whose rows all start 16 bytes aligned."""
    return -(-n // ROW_ALIGN) * ROW_ALIGN


class Arena:
    def __init__(self, layout):
        offsets, total = [], 0
        for _, shape in layout:
            offsets.append(total)
            total += -(-int(np.prod(shape)) // ALIGN) * ALIGN
        self.raw = cuda.device_array(total, dtype=np.float32)
        self.root = SimpleNamespace()
        for (name, shape), start in zip(layout, offsets):
            view = self.raw[start : start + int(np.prod(shape))].reshape(shape)
            _place(self.root, name.split("."), view)

    def __getattr__(self, name):
        return getattr(self.root, name)


def _place(node, path, view):
    """Store view at node.<path>, where a numeric component indexes a list (layer h[N])."""
    head, rest = path[0], path[1:]
    if rest and rest[0].isdigit():
        layers = getattr(node, head, None) or []
        setattr(node, head, layers)
        index = int(rest[0])
        while len(layers) <= index:
            layers.append(SimpleNamespace())
        if len(rest) == 1:
            layers[index] = view
        else:
            _place(layers[index], rest[1:], view)
    elif rest:
        if not hasattr(node, head):
            setattr(node, head, SimpleNamespace())
        _place(getattr(node, head), rest, view)
    else:
        setattr(node, head, view)


def parameters_layout(cfg: Config):
    """struct tf_parameters: the tensors in the order tf.c's struct declares them."""
    from .assets import parameter_shapes

    return parameter_shapes(cfg)


def activations_layout(cfg: Config):
    S, D, H, V = cfg.d_seq, cfg.d_model, cfg.n_heads, cfg.d_vocab
    layout = [("embedding.out", (S, D))]
    for h in range(cfg.n_layers):
        p = f"h.{h}."
        layout += [
            (p + "ln_1.r_std", (S,)),
            (p + "ln_1.mean", (S,)),
            (p + "ln_1.out", (S, D)),
            (p + "attn.c_attn.out", (S, 3 * D)),
            (p + "attn.softmax.out", (H, S, S)),
            (p + "attn.z.out", (S, D)),
            (p + "attn.c_proj.out", (S, D)),
            (p + "res_1.out", (S, D)),
            (p + "ln_2.r_std", (S,)),
            (p + "ln_2.mean", (S,)),
            (p + "ln_2.out", (S, D)),
            (p + "mlp.c_fc.out", (S, 4 * D)),
            (p + "mlp.gelu.out", (S, 4 * D)),
            (p + "mlp.c_proj.out", (S, D)),
            (p + "res_2.out", (S, D)),
        ]
    layout += [
        ("ln_f.r_std", (S,)),
        ("ln_f.mean", (S,)),
        ("ln_f.out", (S, D)),
        ("unembedding.out", (S, V)),
    ]
    return layout


def gradients_layout(cfg: Config):
    D = cfg.d_model
    layout = [("wte.weight", (cfg.d_vocab, D)), ("wpe.weight", (cfg.d_seq, D))]
    for h in range(cfg.n_layers):
        p = f"h.{h}."
        layout += [
            (p + "ln_1.weight", (D,)),
            (p + "ln_1.bias", (D,)),
            (p + "attn.c_attn.weight", (D, 3 * D)),
            (p + "attn.c_attn.bias", (3 * D,)),
            (p + "attn.c_proj.weight", (D, D)),
            (p + "attn.c_proj.bias", (D,)),
            (p + "ln_2.weight", (D,)),
            (p + "ln_2.bias", (D,)),
            (p + "mlp.c_fc.weight", (D, 4 * D)),
            (p + "mlp.c_fc.bias", (4 * D,)),
            (p + "mlp.c_proj.weight", (4 * D, D)),
            (p + "mlp.c_proj.bias", (D,)),
        ]
    layout += [("ln_f.weight", (D,)), ("ln_f.bias", (D,))]
    return layout


def activations_back_layout(cfg: Config):
    """struct tf_activations_back, with three differences: attn.softmax.out holds one row per
    (head, query) where tf.c reuses one row, so that heads and queries run in parallel; `loss`
    keeps on the device the total that tf.c keeps in a local; and unembedding.out (dL/dlogits)
    has its rows padded to whole 16-byte runs (padded), which the unembedding backward's matrix
    kernels copy 16 bytes at a time (50,257-float rows would take 4-byte copies). The padding is
    never written or summed."""
    S, D, H, V = cfg.d_seq, cfg.d_model, cfg.n_heads, cfg.d_vocab
    return [
        ("embedding.out", (S, D)),
        ("ln_1.out", (S, D)),
        ("attn.c_attn.out", (S, 3 * D)),
        ("attn.softmax.out", (H, S, S)),
        ("attn.z.out", (S, D)),
        ("res_1.in_2", (S, D)),
        ("res_1.out", (S, D)),
        ("ln_2.out", (S, D)),
        ("mlp.c_fc.out", (S, 4 * D)),
        ("mlp.gelu.out", (S, 4 * D)),
        ("res_2.in_2", (S, D)),
        ("res_2.out", (S, D)),
        ("ln_f.out", (S, D)),
        ("unembedding.out", (S, padded(V))),
        ("loss", (1,)),
    ]


def parameters_arena(cfg: Config, tensors):
    """The parameters arena, filled from the loaded tensors with one host-to-device copy."""
    layout = parameters_layout(cfg)
    arena = Arena(layout)
    host = np.zeros(arena.raw.shape, dtype=np.float32)
    start = 0
    for name, shape in layout:
        n = int(np.prod(shape))
        host[start : start + n] = tensors[name].reshape(-1)
        start += -(-n // ALIGN) * ALIGN
    arena.raw.copy_to_device(host)
    return arena
