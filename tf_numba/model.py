"""The port's state: tf.c's four arenas on the device, the token buffer and the fp model."""
import math

import numpy as np
from numba import cuda

from . import arena
from .checkpoints import Config
from .fp import is_fused


class TFModel:
    """tf.c's `main` allocations: parameters (filled from the weights), activations,
    gradients and activations_back (allocated once, sized for d_seq tokens), and the tokens
    (tf.c's `data` buffer, where generation appends)."""

    def __init__(self, cfg: Config, tensors, fp_model: str):
        self.cfg = cfg
        self.fused = is_fused(fp_model)
        # tf.c's tf_rsqrt_d_k literal (0.125f for d_k = 64), as a float32 from the config.
        self.rsqrt_d_k = np.float32(1.0 / math.sqrt(cfg.d_k))
        self.parameters = arena.parameters_arena(cfg, tensors)
        self.activations = arena.Arena(arena.activations_layout(cfg))
        self.gradients = arena.Arena(arena.gradients_layout(cfg))
        self.activations_back = arena.Arena(arena.activations_back_layout(cfg))
        self.tokens = cuda.device_array(cfg.d_seq + 1, dtype=np.uint16)

    def set_tokens(self, tokens):
        """Copy token ids to the start of the device token buffer."""
        host = np.zeros(self.tokens.shape[0], dtype=np.uint16)
        host[: len(tokens)] = tokens
        self.tokens.copy_to_device(host)
