"""The fused attention kernels against the kernels they replace in the passes, bit for bit:
tf_attn (the body of tf.c's attention loop, a block per head and query) against tf_attn_scores,
tf_attn_softmax and tf_attn_z (the softmax rows, also the keys past each query, which neither
writes, and z); tf_attn_back_row against tf_attn_back_dot and tf_attn_back_softmax (dL_ds).

In the simulator the shapes are small and odd (heads of 5 and of 8 features, more keys and
features than tf_attn's threads); on a GPU they are GPT-2's at T = 64 and at its longest row."""
import numpy as np
import pytest
from numba import cuda

from tf_numba import kernels as K
from tf_numba import launch

FUSED = [pytest.param(True, id="fma"), pytest.param(False, id="nofma")]


def attention(T, H, d_k, first, fused, fast, wide=False):
    """z and the softmax rows for queries first .. T - 1, by tf_attn (fast; its 16-byte copies and
    4-step key reads if wide) or the three kernels."""
    rng = np.random.default_rng(T * H + d_k)
    c_attn = cuda.to_device(rng.standard_normal((T, 3 * H * d_k), dtype=np.float32))
    softmax = cuda.to_device(rng.standard_normal((H, T, T), dtype=np.float32))
    z = cuda.to_device(rng.standard_normal((T, H * d_k), dtype=np.float32))
    rows = cuda.to_device(np.array([first, T], dtype=np.int64))
    n, rsqrt_d_k = T - first, np.float32(1.0) / np.sqrt(np.float32(d_k))
    if fast:
        launch.blocks(K.tf_attn(d_k, wide), H * n, K.ATTN_THREADS, 0, c_attn, softmax, z, rows, n, rsqrt_d_k, fused)
    else:
        launch.elementwise(K.tf_attn_scores, H * n * T, c_attn, softmax, rows, n, T, d_k, rsqrt_d_k, fused)
        launch.blocks(K.tf_attn_softmax, H * n, K.ATTN_LANES, 0, softmax, rows, n)
        launch.elementwise(K.tf_attn_z, n * H * d_k, c_attn, softmax, z, rows, n, d_k, fused)
    return [a.copy_to_host().view(np.uint32) for a in (softmax, z)]


def attention_back(T, H, d_k, fused, fast, wide=False):
    """dL_ds of every row, by tf_attn_back_row (fast; its 16-byte copies and 4-step reads if wide)
    or tf_attn_back_dot and tf_attn_back_softmax."""
    rng = np.random.default_rng(T * H + d_k + 1)
    dL_dz = cuda.to_device(rng.standard_normal((T, H * d_k), dtype=np.float32))
    c_attn = cuda.to_device(rng.standard_normal((T, 3 * H * d_k), dtype=np.float32))
    softmax = cuda.to_device(rng.random((H, T, T), dtype=np.float32))
    dL_da = cuda.to_device(rng.standard_normal((H, T, T), dtype=np.float32))
    if fast:
        launch.blocks(K.tf_attn_back_row(d_k, wide), H * T, K.ATTN_THREADS, 0, dL_dz, c_attn, softmax, dL_da, T, fused)
    else:
        launch.elementwise(K.tf_attn_back_dot, H * T * T, dL_dz, c_attn, dL_da, T, d_k, fused)
        launch.blocks(K.tf_attn_back_softmax, H * T, K.ATTN_LANES, 0, softmax, dL_da, T, fused)
    return dL_da.copy_to_host().view(np.uint32)


def check(T, H, d_k, first, fused, wide):
    fast, three = attention(T, H, d_k, first, fused, True, wide), attention(T, H, d_k, first, fused, False)
    for name, got, want in zip(("softmax", "z"), fast, three):
        assert np.array_equal(got, want), name


@pytest.mark.parametrize("fused", FUSED)
@pytest.mark.parametrize("T, H, d_k, first, wide", [(7, 3, 5, 0, False), (6, 2, 8, 2, False), (9, 2, 8, 0, True)],
                         ids=["odd", "rows_from_2", "wide"])
def test_tf_attn_equals_the_three_kernels(T, H, d_k, first, wide, fused):
    check(T, H, d_k, first, fused, wide)


@pytest.mark.gpu
@pytest.mark.parametrize("fused", FUSED)
@pytest.mark.parametrize("wide", [True, False], ids=["wide", "narrow"])
@pytest.mark.parametrize("T", [64, 1024], ids=["T64", "T1024"])
def test_tf_attn_equals_the_three_kernels_gpt2(T, wide, fused):
    check(T, 12, 64, 0, fused, wide)


@pytest.mark.parametrize("fused", FUSED)
@pytest.mark.parametrize("T, H, d_k, wide", [(7, 3, 5, False), (6, 2, 8, False), (9, 2, 8, True)],
                         ids=["odd", "even", "wide"])
def test_tf_attn_back_row_equals_the_two_kernels(T, H, d_k, wide, fused):
    assert np.array_equal(attention_back(T, H, d_k, fused, True, wide), attention_back(T, H, d_k, fused, False))


@pytest.mark.gpu
@pytest.mark.parametrize("fused", FUSED)
@pytest.mark.parametrize("wide", [True, False], ids=["wide", "narrow"])
@pytest.mark.parametrize("T", [64, 1024], ids=["T64", "T1024"])
def test_tf_attn_back_row_equals_the_two_kernels_gpt2(T, wide, fused):
    assert np.array_equal(attention_back(T, 12, 64, fused, True, wide), attention_back(T, 12, 64, fused, False))
