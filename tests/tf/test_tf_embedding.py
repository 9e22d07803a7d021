"""tf_embedding_back against tf.c's loop in float32 numpy (`dL_dwte[token] += dL_dout[i]`,
`dL_dwpe[i] += dL_dout[i]`, samples in order; float32 addition is the same IEEE operation on
both), with tokens that repeat inside and across the kernel's groups of samples."""
import numpy as np
import pytest
from numba import cuda

from tf_numba import kernels as K
from tf_numba import launch


@pytest.mark.parametrize("T, D, V", [(21, 5, 6), pytest.param(64, 768, 50257, marks=pytest.mark.gpu)],
                         ids=["small", "gpt2"])
def test_embedding_back_adds_in_sample_order(T, D, V):
    rng = np.random.default_rng(T)
    tokens = rng.integers(0, min(V, 4), T).astype(np.uint16)  # few distinct tokens: many repeats
    tokens[T // 2:] = rng.integers(0, V, T - T // 2)
    dL_dout = rng.standard_normal((T, D), dtype=np.float32)
    dwte, dwpe = rng.standard_normal((V, D), dtype=np.float32), rng.standard_normal((T, D), dtype=np.float32)
    want_wte, want_wpe = dwte.copy(), dwpe.copy()
    for i in range(T):
        want_wte[tokens[i]] += dL_dout[i]
        want_wpe[i] += dL_dout[i]
    got_wte, got_wpe = cuda.to_device(dwte), cuda.to_device(dwpe)
    launch.elementwise(K.tf_embedding_back, D, cuda.to_device(dL_dout), cuda.to_device(tokens), got_wte, got_wpe, T)
    assert np.array_equal(got_wte.copy_to_host().view(np.uint32), want_wte.view(np.uint32))
    assert np.array_equal(got_wpe.copy_to_host().view(np.uint32), want_wpe.view(np.uint32))
