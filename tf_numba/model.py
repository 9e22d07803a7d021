"""The port's state: tf.c's four arenas on the device, the token buffer and the fp model."""
import math

import numpy as np
from numba import cuda

from . import arena
from .assets import AssetError
from .config import Config
from . import matmul
from .fp import is_fused
from .generate import Passes
from .kernels import ATTN_T_MAX, LN_D_MAX


class TFModel:
    """tf.c's `main` allocations: parameters (filled from the weights), activations,
    gradients and activations_back (allocated once, sized for d_seq tokens), and the tokens
    (tf.c's `data` buffer, where generation appends). Besides: zeros (the start of dot
    products that tf.c begins at 0), row ranges for the matrix kernels (matmul.py),
    `last_rows`, the range of the row that generation unembeds (and the decoder computes),
    which its argmax kernel advances on the device, the unembedding softmax's scratch (each row's
    largest logit of each of the unembedding's blocks of columns, at most as many as any row count
    gives, and 1.0f / its sum: launch.unembedding_softmax) and generation's recorded passes."""

    def __init__(self, cfg: Config, tensors, fp_model: str):
        if cfg.d_model > LN_D_MAX:  # tf.c itself has no such limit
            raise AssetError(f"d_model {cfg.d_model} is wider than the {LN_D_MAX} tf_numba's layer norms stage in "
                             f"shared memory: use a model with d_model <= {LN_D_MAX}")
        if cfg.d_seq > ATTN_T_MAX:
            raise AssetError(f"d_seq {cfg.d_seq} is longer than the {ATTN_T_MAX} positions tf_numba's attention "
                             f"softmax stages in shared memory: use a model with d_seq <= {ATTN_T_MAX}")
        self.cfg = cfg
        self.fused = is_fused(fp_model)
        # tf.c's tf_rsqrt_d_k literal (0.125f for d_k = 64), as a float32 from the config.
        self.rsqrt_d_k = np.float32(1.0 / math.sqrt(cfg.d_k))
        self.parameters = arena.parameters_arena(cfg, tensors)
        self.activations = arena.Arena(arena.activations_layout(cfg))
        self.gradients = arena.Arena(arena.gradients_layout(cfg))
        self.activations_back = arena.Arena(arena.activations_back_layout(cfg))
        self.tokens = cuda.device_array(cfg.d_seq + 1, dtype=np.uint16)
        self.zeros = cuda.to_device(np.zeros(max(cfg.d_vocab, 4 * cfg.d_model), dtype=np.float32))
        self.last_rows = cuda.to_device(np.zeros(2, dtype=np.int64))
        blocks = max(matmul.column_blocks(matmul.launch_tile("tf_unembedding", n, cfg.d_vocab, cfg.d_model, self.fused),
                                          cfg.d_vocab) for n in range(1, cfg.d_seq + 1))
        self.softmax_max = cuda.device_array((cfg.d_seq, blocks), dtype=np.float32)
        self.r_softmax_exp_sum = cuda.device_array(cfg.d_seq, dtype=np.float32)
        self._rows = {}
        self.passes = Passes()

    def rows(self, end):
        """A device range [0, end) of rows for the matrix kernels (kept: recorded graphs point at it)."""
        if end not in self._rows:
            self._rows[end] = cuda.to_device(np.array([0, end], dtype=np.int64))
        return self._rows[end]

    def set_tokens(self, tokens, stream=0):
        """Copy token ids to the start of the device token buffer (zeros after them), on `stream`."""
        host = np.zeros(self.tokens.shape[0], dtype=np.uint16)
        host[: len(tokens)] = tokens
        self.tokens.copy_to_device(host, stream=stream)
