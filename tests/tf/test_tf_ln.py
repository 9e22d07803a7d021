"""tf_ln_back with its epilogue (the residual tf_add that tf.c runs next, applied as each input
gradient is stored: backward.py's launches) against tf_ln_back followed by tf_add, bit for bit.
Small odd shapes in the simulator, GPT-2's on a GPU."""
import numpy as np
import pytest
from numba import cuda

from tf_numba import kernels as K
from tf_numba import launch

FUSED = [pytest.param(True, id="fma"), pytest.param(False, id="nofma")]


def ln_back(T, D, fused, epilogue):
    rng = np.random.default_rng(T * D)
    weight, r_std = (cuda.to_device(rng.standard_normal(n, dtype=np.float32)) for n in (D, T))
    mean = cuda.to_device(rng.standard_normal(T, dtype=np.float32))
    inp, dL_dout, res = (cuda.to_device(rng.standard_normal((T, D), dtype=np.float32)) for _ in range(3))
    dL_dweight, dL_dbias = cuda.device_array(D, np.float32), cuda.device_array(D, np.float32)
    dL_din, extra = cuda.device_array((T, D), np.float32), cuda.device_array((T, D), np.float32)
    if epilogue:
        launch.ln_back(weight, inp, r_std, mean, dL_dout, dL_dweight, dL_dbias, dL_din, T, fused, res=res, extra=extra)
    else:
        launch.ln_back(weight, inp, r_std, mean, dL_dout, dL_dweight, dL_dbias, dL_din, T, fused)
        launch.elementwise(K.tf_add, T * D, res, dL_din, extra, cuda.to_device(np.array([0, T], np.int64)), T)
    return [a.copy_to_host().view(np.uint32) for a in (dL_dweight, dL_dbias, dL_din, extra)]


def check(T, D, fused):
    for name, got, want in zip(("dL_dweight", "dL_dbias", "dL_din", "extra"), ln_back(T, D, fused, True),
                               ln_back(T, D, fused, False)):
        assert np.array_equal(got, want), name


@pytest.mark.parametrize("fused", FUSED)
@pytest.mark.parametrize("T, D", [(5, 11), (3, 20)])
def test_ln_back_add_equals_tf_add_after_it(T, D, fused):
    check(T, D, fused)


@pytest.mark.gpu
@pytest.mark.parametrize("fused", FUSED)
def test_ln_back_add_equals_tf_add_after_it_gpt2(fused):
    check(64, 768, fused)
